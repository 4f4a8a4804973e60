-- API keys of the edge. Only a SHA-256 digest of each key is kept: keys are 256-bit random
-- secrets, so a fast digest is as safe as a slow password hash and costs nothing per request.
CREATE TABLE IF NOT EXISTS api_keys (
    id          TEXT PRIMARY KEY,
    key_hash    BYTEA NOT NULL UNIQUE,
    tenant_id   TEXT NOT NULL,
    user_id     TEXT,
    name        TEXT NOT NULL DEFAULT '',
    admin       BOOLEAN NOT NULL DEFAULT FALSE,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    revoked_at  TIMESTAMPTZ
);

CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant_id);
