-- The usage record (context_events, tool_calls) partitioned by month on created_at (range
-- partitioning): the usage retention (--usage-retention) drops a month's partition whole
-- instead of deleting rows. Months, not days: the record is read per session (its newest
-- records) and newest first across every session (the usage prior's history), and every
-- partition is probed once per read. The gateway creates this month's and the coming months'
-- partitions ahead (switchyard_kit::partitions); the DEFAULT partition takes a row of any other
-- time (a skewed clock, a far past or future date), so an insert never fails for want of a
-- partition.
--
-- A key of a partitioned table must hold the partition column: the primary keys become
-- (id, created_at). The ids still come from the tables' own sequences, which move to the new
-- tables: a row inserted after the move gets the next id after every moved one.
--
-- Existing rows are moved in place: each old table is renamed, the partitioned one is created
-- with the same columns in the same order (the id's default still draws from its sequence),
-- each month holding rows (within ten years back and a month ahead) gets its partition, the
-- rest go to the default, the sequences are handed to the new tables and the old ones dropped.

-- Moving a large table takes longer than the pool's statement timeout.
SET LOCAL statement_timeout = 0;

ALTER TABLE context_events RENAME TO context_events_unpartitioned;
ALTER TABLE tool_calls RENAME TO tool_calls_unpartitioned;

CREATE TABLE context_events (LIKE context_events_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
CREATE TABLE context_events_default PARTITION OF context_events DEFAULT;
CREATE TABLE tool_calls (LIKE tool_calls_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
CREATE TABLE tool_calls_default PARTITION OF tool_calls DEFAULT;

DO $$
DECLARE
    moved record;
BEGIN
    FOR moved IN
        SELECT 'context_events' AS tab, month FROM (
            SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date AS month
            FROM context_events_unpartitioned
            WHERE created_at >= now() - interval '10 years' AND created_at < now() + interval '1 month') c
        UNION ALL
        SELECT 'tool_calls', month FROM (
            SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date AS month
            FROM tool_calls_unpartitioned
            WHERE created_at >= now() - interval '10 years' AND created_at < now() + interval '1 month') t
    LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            moved.tab || '_p' || to_char(moved.month, 'YYYYMM'),
            moved.tab,
            moved.month::text || ' 00:00:00+00',
            (moved.month + interval '1 month')::date::text || ' 00:00:00+00');
    END LOOP;
END
$$;

INSERT INTO context_events SELECT * FROM context_events_unpartitioned;
INSERT INTO tool_calls SELECT * FROM tool_calls_unpartitioned;

-- The sequences (made by BIGSERIAL in 0001) belong to the old tables' columns and would go
-- with them; they keep their values, so new ids follow the moved ones.
ALTER SEQUENCE context_events_id_seq OWNED BY context_events.id;
ALTER SEQUENCE tool_calls_id_seq OWNED BY tool_calls.id;
DROP TABLE context_events_unpartitioned;
DROP TABLE tool_calls_unpartitioned;

-- The keys and indexes, built once over the moved rows; each partition gets its own. The
-- reads order by (created_at DESC, id DESC), so the indexes end with both: each partition's
-- scan comes out in that order and the partitions' scans are merged, up to the read's limit.
ALTER TABLE context_events ADD PRIMARY KEY (id, created_at);
-- A session's records, newest first.
CREATE INDEX context_events_session ON context_events (tenant, session_id, created_at DESC, id DESC);
ALTER TABLE tool_calls ADD PRIMARY KEY (id, created_at);
CREATE INDEX tool_calls_session ON tool_calls (tenant, session_id, created_at DESC, id DESC);
-- The usage prior's query: the newest successful calls that had a context.
CREATE INDEX tool_calls_learning ON tool_calls (created_at DESC, id DESC)
    WHERE context_query IS NOT NULL AND NOT is_error;

ANALYZE context_events;
ANALYZE tool_calls;
