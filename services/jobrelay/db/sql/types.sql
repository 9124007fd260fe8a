-- The job types the consumers register (db/type_store.py; docs/job-types.md).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: mark_types_served
-- A consumer consuming the queues of :names says so until :seconds from now (the latest of its
-- peers' wins); rows locked in name order, so that consumers of overlapping types never deadlock.
UPDATE jobrelay.job_types t
SET served_until = greatest(t.served_until, now() + make_interval(secs => :seconds))
FROM (SELECT name FROM jobrelay.job_types WHERE name = ANY(CAST(:names AS text[]))
      ORDER BY name FOR UPDATE) AS locked
WHERE t.name = locked.name;

-- name: register_job_types
-- Every type of a consumer's registry in one statement, one array per column, in name order
-- (two consumers registering the same types lock their rows in the same order). The last
-- writer wins each row; no row is ever deleted here. One notification for the whole set
-- (every API process reloads its catalog, core/type_catalog.py).
WITH registered AS (
    INSERT INTO jobrelay.job_types AS t (
        name, payload_schema, max_attempts, priority, timeout_seconds, concurrency, rate_count,
        rate_period_seconds, per_key, description, registered_by, api, registered_at)
    SELECT name, payload_schema, max_attempts, priority, timeout_seconds, concurrency,
           rate_count, rate_period_seconds, per_key, description, registered_by, api, now()
    FROM unnest(
        CAST(:names AS text[]), CAST(:payload_schemas AS jsonb[]),
        CAST(:max_attempts AS int[]), CAST(:priorities AS smallint[]),
        CAST(:timeouts AS float8[]), CAST(:concurrencies AS int[]),
        CAST(:rate_counts AS int[]), CAST(:rate_periods AS int[]),
        CAST(:per_keys AS boolean[]), CAST(:descriptions AS text[]),
        CAST(:registered_by AS text[]), CAST(:apis AS boolean[])
    ) AS r(
        name, payload_schema, max_attempts, priority, timeout_seconds, concurrency, rate_count,
        rate_period_seconds, per_key, description, registered_by, api)
    ORDER BY name
    ON CONFLICT (name) DO UPDATE
    SET payload_schema = excluded.payload_schema, max_attempts = excluded.max_attempts,
        priority = excluded.priority, timeout_seconds = excluded.timeout_seconds,
        concurrency = excluded.concurrency, rate_count = excluded.rate_count,
        rate_period_seconds = excluded.rate_period_seconds, per_key = excluded.per_key,
        description = excluded.description, registered_by = excluded.registered_by,
        api = excluded.api, registered_at = now()
    RETURNING t.name
)
SELECT count(*) AS registered, pg_notify('jobrelay_job_types', '')::text AS notified
FROM registered;

-- name: job_type_rows
SELECT name, payload_schema, max_attempts, priority, timeout_seconds, concurrency, rate_count,
       rate_period_seconds, per_key, description, registered_by, api, registered_at
FROM jobrelay.job_types ORDER BY name;
