-- Routing analytics (spec 002, "Monitoring & Analytics"): every turn's routing decision and the
-- users' feedback on the answers. Written off the request path in batches by the router.

CREATE TABLE routing_decisions (
    -- The ChatResponse id ("chat-<uuid>").
    id text PRIMARY KEY,
    occurred_at timestamptz NOT NULL,
    tenant_id text NOT NULL,
    user_id text,
    session_id text NOT NULL,
    role_id text NOT NULL,
    route text NOT NULL CHECK (route IN ('direct', 'mcp_agent', 'multiagent')),
    reasoning text NOT NULL,
    routing_ms integer NOT NULL,
    execution_ms integer NOT NULL,
    -- The model that wrote the answer, and the one that made the routing decision.
    provider text NOT NULL,
    model text NOT NULL,
    routing_model text NOT NULL,
    cache_hit boolean NOT NULL,
    fallback_used boolean NOT NULL,
    attempts integer NOT NULL,
    model_fallbacks integer NOT NULL,
    prompt_tokens integer NOT NULL,
    completion_tokens integer NOT NULL,
    tools_used text[] NOT NULL,
    domains text[] NOT NULL,
    degraded text[] NOT NULL
);

-- GetRoutingStats reads one tenant's time window; retention prunes by time alone.
CREATE INDEX routing_decisions_tenant_time ON routing_decisions (tenant_id, occurred_at);
CREATE INDEX routing_decisions_time ON routing_decisions (occurred_at);

CREATE TABLE routing_feedback (
    -- One judgement per answer; a second submission replaces the first.
    response_id text PRIMARY KEY,
    tenant_id text NOT NULL,
    helpful boolean NOT NULL,
    -- The route the user says was right, when it was not the one taken.
    expected_route text CHECK (expected_route IN ('direct', 'mcp_agent', 'multiagent')),
    comment text NOT NULL,
    submitted_at timestamptz NOT NULL
);

CREATE INDEX routing_feedback_submitted ON routing_feedback (submitted_at);
