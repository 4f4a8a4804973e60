-- The history tables (session_switches, session_messages) partitioned by month on their time
-- (range partitioning): the history retention (--history-retention) drops a month's partition
-- whole instead of deleting rows. Months, not days: a session's history is read per session
-- (its newest messages, its switches after a sequence), and every partition is probed once
-- per read. The service creates this month's and the coming months' partitions ahead
-- (switchyard_kit::partitions); the DEFAULT partition takes a row of any other time (a
-- skewed clock, a far past or future date), so an insert never fails for want of a partition.
--
-- A key of a partitioned table must hold the partition column: the primary keys become
-- (tenant_id, session_id, sequence, occurred_at) and (tenant_id, session_id, seq,
-- created_at), the time last so each partition's key index still serves the per-session
-- reads in sequence order. A record retried after an ambiguous failure repeats its time, so
-- ON CONFLICT on the new key skips it as the old key did; the writes also skip a sequence
-- already stored under another time (see the store).
--
-- Existing rows are moved in place: each old table is renamed, the partitioned one is created
-- with the same columns in the same order, each month holding rows (within ten years back and
-- a month ahead) gets its partition, the rest go to the default, and the old table is dropped.

-- Moving a large table takes longer than the pool's statement timeout.
SET LOCAL statement_timeout = 0;

ALTER TABLE session_switches RENAME TO session_switches_unpartitioned;
ALTER TABLE session_messages RENAME TO session_messages_unpartitioned;

CREATE TABLE session_switches (LIKE session_switches_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (occurred_at);
CREATE TABLE session_switches_default PARTITION OF session_switches DEFAULT;
CREATE TABLE session_messages (LIKE session_messages_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY RANGE (created_at);
CREATE TABLE session_messages_default PARTITION OF session_messages DEFAULT;

DO $$
DECLARE
    moved record;
BEGIN
    FOR moved IN
        SELECT 'session_switches' AS tab, month FROM (
            SELECT DISTINCT date_trunc('month', occurred_at AT TIME ZONE 'UTC')::date AS month
            FROM session_switches_unpartitioned
            WHERE occurred_at >= now() - interval '10 years' AND occurred_at < now() + interval '1 month') s
        UNION ALL
        SELECT 'session_messages', month FROM (
            SELECT DISTINCT date_trunc('month', created_at AT TIME ZONE 'UTC')::date AS month
            FROM session_messages_unpartitioned
            WHERE created_at >= now() - interval '10 years' AND created_at < now() + interval '1 month') m
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

INSERT INTO session_switches SELECT * FROM session_switches_unpartitioned;
INSERT INTO session_messages SELECT * FROM session_messages_unpartitioned;
DROP TABLE session_switches_unpartitioned;
DROP TABLE session_messages_unpartitioned;

-- The keys, built once over the moved rows. They also serve history paging (sequence > $n,
-- ascending) and "newest N messages" (a backward scan in each partition, merged).
ALTER TABLE session_switches ADD PRIMARY KEY (tenant_id, session_id, sequence, occurred_at);
ALTER TABLE session_messages ADD PRIMARY KEY (tenant_id, session_id, seq, created_at);

ANALYZE session_switches;
ANALYZE session_messages;
