-- The audit trail (issue 31): every tool call through the gateway, refused ones included, with
-- who made it, a digest of its arguments, how it ended and how long it took. Pruned by age
-- (--audit-retention).

CREATE TABLE tool_call_audit (
    id                UUID        PRIMARY KEY,
    created_at        TIMESTAMPTZ NOT NULL,
    tenant            TEXT        NOT NULL,
    user_id           TEXT,
    role              TEXT,
    groups            TEXT[]      NOT NULL DEFAULT '{}',
    session_id        TEXT,
    server            TEXT        NOT NULL,   -- empty for an unknown tool
    tool              TEXT        NOT NULL,   -- the gateway name the caller used
    arguments_sha256  TEXT        NOT NULL,   -- hex, of the arguments as compact JSON
    arguments_bytes   BIGINT      NOT NULL,
    arguments         JSONB,                  -- only with --audit-arguments, redacted
    outcome           TEXT        NOT NULL,
    error             TEXT,
    duration_ms       BIGINT      NOT NULL,
    policy            TEXT                    -- the policy that denied the call
);
-- ListToolCalls: a tenant's window, newest first, paged by (created_at, id).
CREATE INDEX tool_call_audit_tenant_time ON tool_call_audit (tenant, created_at DESC, id DESC);
-- Every tenant's window (administrators), and pruning by age.
CREATE INDEX tool_call_audit_time ON tool_call_audit (created_at DESC, id DESC);
