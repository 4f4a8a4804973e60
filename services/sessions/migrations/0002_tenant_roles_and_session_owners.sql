-- Roles belong to a tenant, seen by that tenant alone; tenant_id '' marks the built-in roles
-- every tenant shares (read-only). A tenant's role may reuse a built-in's id: that tenant's
-- own copy, hiding the built-in from it alone.
ALTER TABLE roles ADD COLUMN tenant_id TEXT NOT NULL DEFAULT '';
ALTER TABLE roles DROP CONSTRAINT roles_pkey;
ALTER TABLE roles ADD PRIMARY KEY (tenant_id, id);

-- Roles made before roles had tenants were made through the one shared catalogue; they go to
-- the default tenant (the internal callers'), and only the seeded built-ins stay shared.
UPDATE roles SET tenant_id = 'default'
WHERE id NOT IN ('finance-expert', 'tech-expert', 'healthcare-expert', 'marketing-expert',
                 'legal-expert', 'education-expert', 'creative-expert', 'general-assistant');

-- The user who created a session (NULL: a caller without a user, the whole tenant's).
ALTER TABLE sessions ADD COLUMN user_id TEXT NULL;
