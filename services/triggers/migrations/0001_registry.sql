-- Role trigger registrations, and one registry-wide version that every change bumps so
-- replicas can tell whether their compiled matcher is current.
CREATE TABLE role_triggers (
    role_id         TEXT PRIMARY KEY,
    domains         TEXT[] NOT NULL DEFAULT '{}',
    custom_triggers JSONB NOT NULL DEFAULT '[]',
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE registry_version (
    singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
    version   BIGINT NOT NULL
);

INSERT INTO registry_version (singleton, version) VALUES (TRUE, 0);
