-- The API key a turn came with (the edge passes its id; NULL for other credentials), so a key's
-- budget counter can be rebuilt from what its turns cost.

ALTER TABLE routing_decisions ADD COLUMN key_id text;
CREATE INDEX routing_decisions_tenant_key_time ON routing_decisions (tenant_id, key_id, occurred_at)
    WHERE key_id IS NOT NULL;
