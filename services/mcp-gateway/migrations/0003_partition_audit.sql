-- The audit trail partitioned by day on created_at (range partitioning): retention
-- (--audit-retention) drops a day's partition whole instead of deleting rows, and a window
-- reads only its days. The gateway creates the coming days' partitions ahead
-- (switchyard_kit::partitions); the DEFAULT partition takes a row of any other time (a skewed
-- clock, a far past or future date), so an insert never fails for want of a partition.
--
-- The usage record (context_events, tool_calls) stays one table each: nothing prunes it, and
-- its reads (one session's, the newest successful calls) would visit every day's partition.
--
-- A key of a partitioned table must hold the partition column: the primary key becomes
-- (id, created_at). An audit record is written once with its own time and a retried batch
-- repeats both, so ON CONFLICT (id, created_at) skips a retry just as (id) did.
--
-- Existing rows are moved in place: the old table is renamed, the partitioned one is created
-- with the same columns in the same order, each day holding rows (within a year back and a
-- week ahead) gets its partition, the rest go to the default, and the old table is dropped.

-- Moving a large table takes longer than the pool's statement timeout.
SET LOCAL statement_timeout = 0;

ALTER TABLE tool_call_audit RENAME TO tool_call_audit_unpartitioned;

CREATE TABLE tool_call_audit (LIKE tool_call_audit_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
CREATE TABLE tool_call_audit_default PARTITION OF tool_call_audit DEFAULT;

DO $$
DECLARE
    day date;
BEGIN
    FOR day IN
        SELECT DISTINCT (created_at AT TIME ZONE 'UTC')::date FROM tool_call_audit_unpartitioned
        WHERE created_at >= now() - interval '366 days' AND created_at < now() + interval '7 days'
    LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF tool_call_audit FOR VALUES FROM (%L) TO (%L)',
            'tool_call_audit_p' || to_char(day, 'YYYYMMDD'),
            day::text || ' 00:00:00+00',
            (day + 1)::text || ' 00:00:00+00');
    END LOOP;
END
$$;

INSERT INTO tool_call_audit SELECT * FROM tool_call_audit_unpartitioned;
DROP TABLE tool_call_audit_unpartitioned;

-- The indexes of before, built once over the moved rows.
ALTER TABLE tool_call_audit ADD PRIMARY KEY (id, created_at);
-- ListToolCalls: a tenant's window, newest first, paged by (created_at, id).
CREATE INDEX tool_call_audit_tenant_time ON tool_call_audit (tenant, created_at DESC, id DESC);
-- Every tenant's window (administrators), and retention's delete in the day its cut falls in.
CREATE INDEX tool_call_audit_time ON tool_call_audit (created_at DESC, id DESC);

ANALYZE tool_call_audit;
