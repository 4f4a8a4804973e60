-- What a budget does at its hard limit: refuse new turns, or degrade them to the direct route
-- and, when degrade_model names one ('provider/model'), a cheaper model.

ALTER TABLE budgets
    ADD COLUMN on_limit text NOT NULL DEFAULT 'refuse' CHECK (on_limit IN ('refuse', 'degrade')),
    ADD COLUMN degrade_model text NOT NULL DEFAULT '';
