-- What every turn cost: its model calls (the routing call, the agent's steps, the experts, the
-- synthesis, a direct answer), each with its model, role, tokens and cost, and their sum.
-- Money is integer nano-dollars (10^-9 USD), so sums are exact.

ALTER TABLE routing_decisions
    ADD COLUMN cached_prompt_tokens integer NOT NULL DEFAULT 0,
    ADD COLUMN cost_nanousd bigint NOT NULL DEFAULT 0,
    -- [{"kind", "model", "role_id", "prompt_tokens", "cached_prompt_tokens", "completion_tokens",
    --   "cost_nanousd", "priced"}, ...] in the order the calls were made.
    ADD COLUMN cost_parts jsonb NOT NULL DEFAULT '[]',
    -- Calls of models the price table had no price for (counted as 0).
    ADD COLUMN unpriced_calls integer NOT NULL DEFAULT 0,
    -- The route was decided without a routing call (a cache hit, or the fast router in its place).
    ADD COLUMN routing_call_avoided boolean NOT NULL DEFAULT false;
