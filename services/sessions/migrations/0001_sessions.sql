-- The sessions record: expert roles, session lifecycle and counters, every context switch and
-- every conversation turn — enough to rebuild a live session Redis lost. Events and messages
-- carry no foreign key to `sessions` on purpose: a record whose SessionCreated was lost must
-- still keep what it can. Their primary keys also serve history paging (sequence > $n,
-- ascending) and "newest N messages" (a backward scan), so they need no other index.

CREATE TABLE roles (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    description     TEXT NOT NULL,
    domains         TEXT[] NOT NULL DEFAULT '{}',
    system_prompt   TEXT NOT NULL,
    custom_triggers JSONB NOT NULL DEFAULT '[]',
    preferred_model TEXT NULL,
    created_at      TIMESTAMPTZ NOT NULL,
    updated_at      TIMESTAMPTZ NOT NULL
);

CREATE TABLE sessions (
    tenant_id     TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    role_id       TEXT NOT NULL,
    status        TEXT NOT NULL,
    turn_count    BIGINT NOT NULL DEFAULT 0,
    switch_count  BIGINT NOT NULL DEFAULT 0,
    message_count BIGINT NOT NULL DEFAULT 0,
    ttl_seconds   BIGINT NOT NULL,
    metadata      JSONB NOT NULL DEFAULT '{}',
    created_at    TIMESTAMPTZ NOT NULL,
    updated_at    TIMESTAMPTZ NOT NULL,
    closed_at     TIMESTAMPTZ NULL,
    PRIMARY KEY (tenant_id, session_id)
);

CREATE TABLE session_switches (
    tenant_id     TEXT NOT NULL,
    session_id    TEXT NOT NULL,
    sequence      BIGINT NOT NULL,
    from_role_id  TEXT NOT NULL,
    to_role_id    TEXT NOT NULL,
    reason        TEXT NOT NULL,
    reason_detail TEXT NOT NULL,
    from_score    INT NOT NULL,
    to_score      INT NOT NULL,
    query_excerpt TEXT NOT NULL,
    occurred_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, session_id, sequence)
);

CREATE TABLE session_messages (
    tenant_id  TEXT NOT NULL,
    session_id TEXT NOT NULL,
    seq        BIGINT NOT NULL,
    role       TEXT NOT NULL,
    content    TEXT NOT NULL,
    role_id    TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (tenant_id, session_id, seq)
);
