-- Hourly rollups of routing decisions, so GetRoutingStats reads one row per tenant, hour and
-- route (and per tenant, hour and model, role, kind of call or API key) instead of every
-- decision of its window. The router adds each inserted decision to its hour's rows in the
-- transaction that inserts it (a decision already stored, such as a retried batch, adds
-- nothing), so the rollups stay exact; GetRoutingStats reads the window's whole hours here and
-- its partial first and last hours from routing_decisions.
--
-- The rollups are small (a few dozen rows per tenant and hour) and are not partitioned:
-- retention deletes their hours before the cut and rebuilds the hour the cut falls in.
--
-- Latency is kept as a histogram per hour: bucket b counts the milliseconds ms with
-- routing_latency_bucket(ms) = b. Below 128 ms each bucket is one millisecond; above, each
-- power of two is split into 64 buckets (1/64 of the octave wide), so a percentile read from
-- the rollups is within 1/128 (0.8 %) of the exact one. The array is dense: element b + 1 is
-- bucket b (Postgres arrays start at 1), as long as the highest bucket in use.

-- Backfilling a large table takes longer than the pool's statement timeout.
SET LOCAL statement_timeout = 0;

CREATE FUNCTION routing_latency_bucket(ms integer) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT CASE WHEN ms < 128 THEN greatest(ms, 0)
        ELSE 128 + (k - 7) * 64 + ((ms >> (k - 6)) & 63) END
    -- k: the index of the highest set bit (7 for 128..255).
    FROM (SELECT 32 - position('1' IN ms::bit(32)::text) AS k) AS high
$$;

-- Two histograms added bucket by bucket (the shorter one padded with zeros).
CREATE FUNCTION routing_histogram_add(a bigint[], b bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(coalesce(x, 0) + coalesce(y, 0) ORDER BY i), '{}')
    FROM unnest(a, b) WITH ORDINALITY AS u(x, y, i)
$$;

-- The dense histogram of bucket counts given as (bucket, count) pairs in bucket order.
CREATE FUNCTION routing_histogram_of(buckets integer[], counts bigint[]) RETURNS bigint[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(coalesce(c.n, 0) ORDER BY s.b), '{}')
    FROM generate_series(0, buckets[cardinality(buckets)]) AS s(b)
    LEFT JOIN unnest(buckets, counts) AS c(b, n) ON c.b = s.b
$$;

CREATE TABLE routing_stats_hourly (
    tenant_id text NOT NULL,
    -- The hour's start (UTC).
    hour timestamptz NOT NULL,
    route text NOT NULL,
    turns bigint NOT NULL,
    cache_hits bigint NOT NULL,
    fallbacks bigint NOT NULL,
    degraded bigint NOT NULL,
    client_tools bigint NOT NULL,
    continuations bigint NOT NULL,
    held_switches bigint NOT NULL,
    routing_calls_avoided bigint NOT NULL,
    -- The turns' model calls (cost parts), and the tokens and cost of the turns.
    calls bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cost_nanousd bigint NOT NULL,
    unpriced_calls bigint NOT NULL,
    routing_ms_histogram bigint[] NOT NULL,
    execution_ms_histogram bigint[] NOT NULL,
    PRIMARY KEY (tenant_id, hour, route)
);
CREATE INDEX routing_stats_hourly_hour ON routing_stats_hourly (hour);

-- Spend per model, role and kind of call (from each turn's cost parts; turns is 0) and per API
-- key (key '' for turns without one; turns counted, tokens and cost from the turn's columns).
CREATE TABLE routing_spend_hourly (
    tenant_id text NOT NULL,
    hour timestamptz NOT NULL,
    dimension text NOT NULL CHECK (dimension IN ('model', 'role', 'kind', 'key')),
    key text NOT NULL,
    turns bigint NOT NULL,
    calls bigint NOT NULL,
    prompt_tokens bigint NOT NULL,
    cached_prompt_tokens bigint NOT NULL,
    completion_tokens bigint NOT NULL,
    cost_nanousd bigint NOT NULL,
    unpriced_calls bigint NOT NULL,
    PRIMARY KEY (tenant_id, hour, dimension, key)
);
CREATE INDEX routing_spend_hourly_hour ON routing_spend_hourly (hour);

-- Feedback is counted by the route of its answer: read from the feedback side, by tenant and
-- time, so a window's feedback is found without reading its decisions.
CREATE INDEX routing_feedback_tenant_submitted ON routing_feedback (tenant_id, submitted_at);

-- Recomputes the rollups of the hours in [from_hour, to_hour) from routing_decisions: the
-- backfill below, the hour retention cuts into, and a repair an operator may run.
CREATE FUNCTION routing_rollup_rebuild(from_hour timestamptz, to_hour timestamptz) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM routing_stats_hourly WHERE hour >= from_hour AND hour < to_hour;
    DELETE FROM routing_spend_hourly WHERE hour >= from_hour AND hour < to_hour;

    WITH d AS (
        SELECT tenant_id, date_trunc('hour', occurred_at, 'UTC') AS hour, route, routing_ms, execution_ms,
            cache_hit, fallback_used, degraded, client_tools, continuation, held_switch_role_id,
            routing_call_avoided, cost_parts, prompt_tokens, cached_prompt_tokens, completion_tokens,
            cost_nanousd, unpriced_calls
        FROM routing_decisions WHERE occurred_at >= from_hour AND occurred_at < to_hour
    ),
    sums AS (
        SELECT tenant_id, hour, route, count(*) AS turns,
            count(*) FILTER (WHERE cache_hit) AS cache_hits,
            count(*) FILTER (WHERE fallback_used) AS fallbacks,
            count(*) FILTER (WHERE cardinality(degraded) > 0) AS degraded,
            count(*) FILTER (WHERE client_tools) AS client_tools,
            count(*) FILTER (WHERE continuation) AS continuations,
            count(*) FILTER (WHERE held_switch_role_id IS NOT NULL) AS held_switches,
            count(*) FILTER (WHERE routing_call_avoided) AS routing_calls_avoided,
            coalesce(sum(jsonb_array_length(cost_parts)), 0) AS calls,
            coalesce(sum(prompt_tokens), 0) AS prompt_tokens,
            coalesce(sum(cached_prompt_tokens), 0) AS cached_prompt_tokens,
            coalesce(sum(completion_tokens), 0) AS completion_tokens,
            coalesce(sum(cost_nanousd), 0) AS cost_nanousd,
            coalesce(sum(unpriced_calls), 0) AS unpriced_calls
        FROM d GROUP BY tenant_id, hour, route
    ),
    buckets AS (
        SELECT tenant_id, hour, route, 'r' AS metric, routing_latency_bucket(routing_ms) AS bucket, count(*) AS n
        FROM d GROUP BY 1, 2, 3, 5
        UNION ALL
        SELECT tenant_id, hour, route, 'e', routing_latency_bucket(execution_ms), count(*)
        FROM d GROUP BY 1, 2, 3, 5
    ),
    histograms AS (
        SELECT tenant_id, hour, route, metric,
            routing_histogram_of(array_agg(bucket ORDER BY bucket), array_agg(n ORDER BY bucket)) AS histogram
        FROM buckets GROUP BY tenant_id, hour, route, metric
    )
    INSERT INTO routing_stats_hourly
    SELECT s.tenant_id, s.hour, s.route, s.turns, s.cache_hits, s.fallbacks, s.degraded, s.client_tools,
        s.continuations, s.held_switches, s.routing_calls_avoided, s.calls, s.prompt_tokens,
        s.cached_prompt_tokens, s.completion_tokens, s.cost_nanousd, s.unpriced_calls, r.histogram, e.histogram
    FROM sums s
    JOIN histograms r ON (r.tenant_id, r.hour, r.route, r.metric) = (s.tenant_id, s.hour, s.route, 'r')
    JOIN histograms e ON (e.tenant_id, e.hour, e.route, e.metric) = (s.tenant_id, s.hour, s.route, 'e');

    WITH parts AS (
        SELECT d.tenant_id, date_trunc('hour', d.occurred_at, 'UTC') AS hour, c.*
        FROM routing_decisions d, jsonb_to_recordset(d.cost_parts) AS c(kind text, model text, role_id text,
            prompt_tokens bigint, cached_prompt_tokens bigint, completion_tokens bigint, cost_nanousd bigint,
            priced boolean)
        WHERE d.occurred_at >= from_hour AND d.occurred_at < to_hour
    )
    INSERT INTO routing_spend_hourly
    SELECT tenant_id, hour,
        CASE WHEN grouping(model) = 0 THEN 'model' WHEN grouping(role_id) = 0 THEN 'role' ELSE 'kind' END,
        coalesce(CASE WHEN grouping(model) = 0 THEN model WHEN grouping(role_id) = 0 THEN role_id ELSE kind END, ''),
        0, count(*), coalesce(sum(prompt_tokens), 0), coalesce(sum(cached_prompt_tokens), 0),
        coalesce(sum(completion_tokens), 0), coalesce(sum(cost_nanousd), 0), count(*) FILTER (WHERE NOT priced)
    FROM parts
    GROUP BY tenant_id, hour, GROUPING SETS ((model), (role_id), (kind));

    INSERT INTO routing_spend_hourly
    SELECT tenant_id, date_trunc('hour', occurred_at, 'UTC'), 'key', coalesce(key_id, ''), count(*),
        coalesce(sum(jsonb_array_length(cost_parts)), 0), coalesce(sum(prompt_tokens), 0),
        coalesce(sum(cached_prompt_tokens), 0), coalesce(sum(completion_tokens), 0),
        coalesce(sum(cost_nanousd), 0), coalesce(sum(unpriced_calls), 0)
    FROM routing_decisions WHERE occurred_at >= from_hour AND occurred_at < to_hour
    GROUP BY 1, 2, 4;
$$;

-- The rollups of every decision already stored, a day at a time: one statement over millions
-- of decisions sorts them all at once on disk (10 M spilled gigabytes of temporary files).
DO $$
DECLARE
    day timestamptz;
BEGIN
    FOR day IN SELECT DISTINCT date_trunc('day', occurred_at, 'UTC') FROM routing_decisions ORDER BY 1 LOOP
        PERFORM routing_rollup_rebuild(day, day + interval '1 day');
    END LOOP;
END
$$;
