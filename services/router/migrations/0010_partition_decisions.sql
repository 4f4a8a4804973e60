-- Routing decisions partitioned by day on occurred_at (range partitioning): retention drops a
-- day's partition whole instead of deleting rows, and a stats window reads only its days. The
-- router creates the coming days' partitions ahead (switchyard_kit::partitions); the DEFAULT
-- partition takes a row of any other time (a skewed clock, a far past or future date), so an
-- insert never fails for want of a partition.
--
-- A key of a partitioned table must hold the partition column: the primary key becomes
-- (id, occurred_at). A decision is written once with its own time and a retried batch repeats
-- both, so ON CONFLICT (id, occurred_at) skips a retry just as (id) did.
--
-- Existing rows are moved in place: the old table is renamed, the partitioned one is created
-- with the same columns in the same order, each day holding rows (within a year back and a
-- week ahead) gets its partition, the rest go to the default, and the old table is dropped.

-- Moving a large table takes longer than the pool's statement timeout.
SET LOCAL statement_timeout = 0;

ALTER TABLE routing_decisions RENAME TO routing_decisions_unpartitioned;

CREATE TABLE routing_decisions (LIKE routing_decisions_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (occurred_at);
CREATE TABLE routing_decisions_default PARTITION OF routing_decisions DEFAULT;

DO $$
DECLARE
    day date;
BEGIN
    FOR day IN
        SELECT DISTINCT (occurred_at AT TIME ZONE 'UTC')::date FROM routing_decisions_unpartitioned
        WHERE occurred_at >= now() - interval '366 days' AND occurred_at < now() + interval '7 days'
    LOOP
        EXECUTE format(
            'CREATE TABLE %I PARTITION OF routing_decisions FOR VALUES FROM (%L) TO (%L)',
            'routing_decisions_p' || to_char(day, 'YYYYMMDD'),
            day::text || ' 00:00:00+00',
            (day + 1)::text || ' 00:00:00+00');
    END LOOP;
END
$$;

INSERT INTO routing_decisions SELECT * FROM routing_decisions_unpartitioned;
DROP TABLE routing_decisions_unpartitioned;

-- The indexes of before, built once over the moved rows.
ALTER TABLE routing_decisions ADD PRIMARY KEY (id, occurred_at);
-- GetRoutingStats reads one tenant's window; the budget counters one key's or one user's.
CREATE INDEX routing_decisions_tenant_time ON routing_decisions (tenant_id, occurred_at);
CREATE INDEX routing_decisions_tenant_key_time ON routing_decisions (tenant_id, key_id, occurred_at)
    WHERE key_id IS NOT NULL;
CREATE INDEX routing_decisions_tenant_user_time ON routing_decisions (tenant_id, user_id, occurred_at)
    WHERE user_id IS NOT NULL;
-- Retention deletes by time alone in the day its cut falls in (and the default partition).
CREATE INDEX routing_decisions_time ON routing_decisions (occurred_at);

ANALYZE routing_decisions;
