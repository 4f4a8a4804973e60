-- Budgets per user (user_id '' for every user of the tenant or key); a user's counter is rebuilt
-- from that user's recorded turns (routing_decisions.user_id).

ALTER TABLE budgets ADD COLUMN user_id text NOT NULL DEFAULT '';
ALTER TABLE budgets DROP CONSTRAINT budgets_pkey;
ALTER TABLE budgets ADD PRIMARY KEY (tenant_id, key_id, user_id);
CREATE INDEX routing_decisions_tenant_user_time ON routing_decisions (tenant_id, user_id, occurred_at)
    WHERE user_id IS NOT NULL;
