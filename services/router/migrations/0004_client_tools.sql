-- Turns of a caller's own agent loop: a request with the caller's tools, a continuation of a
-- tool loop (no routing call, no role switch), the role switch held back inside the loop, and
-- the caller's tools the model called.

ALTER TABLE routing_decisions
    ADD COLUMN client_tools boolean NOT NULL DEFAULT false,
    ADD COLUMN continuation boolean NOT NULL DEFAULT false,
    ADD COLUMN held_switch_role_id text,
    ADD COLUMN client_tools_called text[] NOT NULL DEFAULT '{}';
