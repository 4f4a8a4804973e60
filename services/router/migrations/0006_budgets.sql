-- Spend budgets per tenant (key_id '') or per API key: the hard limit refuses new turns once
-- the period's spend reaches it; the soft threshold (0: none) only warns. Money is integer
-- nano-dollars. What was spent is counted in Redis and rebuilt from routing_decisions.cost_nanousd.

CREATE TABLE budgets (
    tenant_id text NOT NULL,
    key_id text NOT NULL DEFAULT '',
    limit_nanousd bigint NOT NULL CHECK (limit_nanousd > 0),
    soft_nanousd bigint NOT NULL DEFAULT 0 CHECK (soft_nanousd >= 0),
    period text NOT NULL CHECK (period IN ('day', 'month')),
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key_id)
);
