-- Each usage record (a set_context, a tool call) carries the id the gateway gave it, so a batch
-- written again is stored once. The record buffer writes a batch again whenever it cannot tell
-- that the last try landed: a connection lost between COMMIT and its answer (Postgres cut, a
-- proxy or pooler restarting), or a write past its timeout that still commits. Without an id,
-- such a retry stored every call of the batch twice, and the usage prior learned them twice.
--
-- The column is added nullable and without a default, so adding it rewrites nothing and rows
-- written before this migration keep NULL (NULLs never conflict). The default set afterwards
-- touches only new rows: it gives an id to those a replica of an older gateway still inserts
-- during a rolling upgrade. The unique index holds the
-- partition column, as every key of a partitioned table must; a retry repeats the record's time.

SET LOCAL statement_timeout = 0;

ALTER TABLE context_events ADD COLUMN record_id UUID;
ALTER TABLE context_events ALTER COLUMN record_id SET DEFAULT gen_random_uuid();
CREATE UNIQUE INDEX context_events_record ON context_events (record_id, created_at);

ALTER TABLE tool_calls ADD COLUMN record_id UUID;
ALTER TABLE tool_calls ALTER COLUMN record_id SET DEFAULT gen_random_uuid();
CREATE UNIQUE INDEX tool_calls_record ON tool_calls (record_id, created_at);
