-- The gateway's record (spec "Context Injection": "Record (context, tool) pair"): every
-- set_context call and every tool call with the context that was current when it was made.

CREATE TABLE context_events (
    id          BIGSERIAL PRIMARY KEY,
    tenant      TEXT        NOT NULL,
    session_id  TEXT        NOT NULL,
    query       TEXT        NOT NULL,
    intent      TEXT,
    created_at  TIMESTAMPTZ NOT NULL
);
CREATE INDEX context_events_session ON context_events (tenant, session_id, created_at DESC);

CREATE TABLE tool_calls (
    id                BIGSERIAL PRIMARY KEY,
    tenant            TEXT        NOT NULL,
    session_id        TEXT        NOT NULL,
    tool              TEXT        NOT NULL,   -- the gateway name
    server            TEXT        NOT NULL,
    upstream_tool     TEXT        NOT NULL,   -- the name on its server
    context_query     TEXT,
    context_intent    TEXT,
    -- The context's MiniLM embedding (little-endian f32), so the usage prior needs no
    -- re-embedding when it loads the history.
    context_embedding BYTEA,
    -- Whether the tool was in the filtered list shown just before (NULL: no list shown).
    in_filtered_list  BOOLEAN,
    is_error          BOOLEAN     NOT NULL,
    duration_ms       BIGINT      NOT NULL,
    created_at        TIMESTAMPTZ NOT NULL
);
CREATE INDEX tool_calls_session ON tool_calls (tenant, session_id, created_at DESC);
-- The usage prior's query: the newest successful calls that had a context.
CREATE INDEX tool_calls_learning ON tool_calls (created_at DESC) WHERE context_query IS NOT NULL AND NOT is_error;
