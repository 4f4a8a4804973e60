-- What the semantic signal knows a role by beyond its domains' exemplars: a description and
-- example questions, both optional.
ALTER TABLE role_triggers
    ADD COLUMN description       TEXT  NOT NULL DEFAULT '',
    ADD COLUMN example_questions JSONB NOT NULL DEFAULT '[]';
