-- The stats and the console's reads (db/store.py::Store; docs/storage.md: they read in time that
-- does not grow with the jobs kept).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: jobs_by_state
-- The stats read in time that does not grow with the jobs kept: live jobs are counted through
-- the partial index that holds them alone; finished ones are ``job_totals`` plus the deltas
-- the triggers appended since the dispatcher last folded them in (migration 0003).
SELECT state, count(*) AS n FROM jobrelay.jobs
WHERE state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping') GROUP BY state
UNION ALL
SELECT state, sum(n)::bigint FROM (
    SELECT state, code, n FROM jobrelay.job_totals
    UNION ALL
    SELECT state, code, n FROM jobrelay.job_count_deltas
) AS finished GROUP BY state;

-- name: outbox_backlog
SELECT count(*) AS unpublished,
       count(*) FILTER (WHERE available_at <= now()) AS due,
       EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE available_at <= now()))
           AS oldest_due_seconds
FROM jobrelay.outbox WHERE published_at IS NULL;

-- name: expired_leases
SELECT count(*) AS n FROM jobrelay.jobs WHERE (state = 'running' AND lease_until < now());

-- name: retrying_summary
SELECT count(*) AS n, min(available_at) AS next_due_at
FROM jobrelay.jobs WHERE state = 'retrying';

-- name: quarantined_by_code
SELECT CASE code WHEN '' THEN 'unknown' ELSE code END AS code, sum(n)::bigint AS n
FROM (
    SELECT state, code, n FROM jobrelay.job_totals
    UNION ALL
    SELECT state, code, n FROM jobrelay.job_count_deltas
) AS finished WHERE state = 'quarantined'
GROUP BY 1 HAVING sum(n) > 0 ORDER BY 2 DESC;

-- name: failed_by_code
-- Jobs not quarantined that met an error on the way: finished ones from the totals, live ones
-- (retrying, or deferred for an unknown type) counted.
SELECT code, sum(n)::bigint AS n FROM (
    SELECT code, n FROM (
        SELECT state, code, n FROM jobrelay.job_totals
        UNION ALL
        SELECT state, code, n FROM jobrelay.job_count_deltas
    ) AS finished WHERE state <> 'quarantined' AND code <> ''
    UNION ALL
    SELECT last_error_code, 1 FROM jobrelay.jobs
    WHERE state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
      AND last_error_code IS NOT NULL
) AS failed
GROUP BY 1 HAVING sum(n) > 0 ORDER BY 2 DESC;

-- name: published_never_claimed
SELECT count(*) AS n FROM jobrelay.jobs j
WHERE j.state IN ('queued', 'retrying', 'sleeping')
  AND j.available_at < now() - make_interval(secs => :older_than_seconds)
  AND EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id)
  AND NOT EXISTS (
      SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id
      AND (o.published_at IS NULL
           OR o.published_at >= now() - make_interval(secs => :older_than_seconds)));

-- name: finished_per_minute
-- The console's chart (docs/console.md): jobs that finished succeeded or quarantined in each of
-- the last 60 minutes, the current one included, one row per minute (zeros too). Read through
-- ix_jobs_state_finished_at, so it costs the last hour's finishes, never the history. The span
-- is written out rather than a parameter: the planner then estimates it from now() every time
-- (a generic plan guesses a third of the table). A job counts in its current state: a
-- quarantined job replayed since counts where it ended.
SELECT m.minute, coalesce(f.succeeded, 0) AS succeeded,
       coalesce(f.quarantined, 0) AS quarantined
FROM generate_series(date_trunc('minute', now()) - interval '59 minutes',
                     date_trunc('minute', now()), interval '1 minute') AS m(minute)
LEFT JOIN (
    SELECT date_trunc('minute', finished_at) AS minute,
           count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
           count(*) FILTER (WHERE state = 'quarantined') AS quarantined
    FROM jobrelay.jobs
    WHERE state IN ('succeeded', 'quarantined') AND finished_at IS NOT NULL
      AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
    GROUP BY 1
) AS f ON f.minute = m.minute
ORDER BY m.minute;

-- name: redispatched_recently
-- For `stats`: how many messages were published again (by the dispatcher or an operator).
SELECT count(*) AS n FROM jobrelay.job_events
WHERE at > now() - interval '1 hour' AND event = 'redispatched';

-- name: broker_blocks
SELECT dispatcher, reason, since FROM jobrelay.broker_blocks
WHERE seen_at > now() - make_interval(secs => CAST(:fresh_seconds AS float8))
ORDER BY since, dispatcher;

-- name: no_consumer_by_type
-- Live jobs of the types no consumer serves now, by type: what `jobrelay stats` and the console
-- show as no_consumer.
SELECT j.type, count(*) AS n FROM jobrelay.jobs j
WHERE (j.state IN ('queued', 'retrying') AND NOT EXISTS (
    SELECT 1 FROM jobrelay.job_types t WHERE t.name = j.type AND t.served_until > now()))
GROUP BY 1 ORDER BY 2 DESC, 1;

-- name: paused_queue_rows
SELECT name, paused_at, paused_by FROM jobrelay.queues WHERE paused_at IS NOT NULL ORDER BY name;

-- name: console_key
-- The key the console signs its cookies and forms with (migration 0006 made it), read once per
-- API process unless JOBRELAY_CONSOLE_SECRET is set.
SELECT secret FROM jobrelay.console_keys WHERE id = 1;
