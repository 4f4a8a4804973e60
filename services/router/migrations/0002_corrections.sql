-- Learning from corrections (spec 002, "User Preferences"): with the routing cache on, a turn's
-- message is kept with its decision (for the retention period), so feedback naming the right
-- route can teach the router that user's preference; the correction itself is kept until the
-- user corrects the same message again.

ALTER TABLE routing_decisions ADD COLUMN message text;

CREATE TABLE routing_corrections (
    -- Replicas load corrections in id order and remember the last one seen.
    id bigserial PRIMARY KEY,
    tenant_id text NOT NULL,
    -- '' for callers without a user id (they share the tenant's anonymous preferences).
    user_id text NOT NULL,
    message text NOT NULL,
    route text NOT NULL CHECK (route IN ('direct', 'mcp_agent', 'multiagent')),
    -- The answer whose feedback made the correction; a second judgement of it replaces it.
    response_id text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);

CREATE INDEX routing_corrections_user ON routing_corrections (tenant_id, user_id);
