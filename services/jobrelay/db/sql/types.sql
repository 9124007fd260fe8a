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

-- name: register_type_policies
-- The code's throttle and the window of its unique key (migration 0019), written after
-- REGISTER_JOB_TYPES by a statement of their own: against a database not yet migrated to 0019
-- this one fails alone (db/type_store.py), and the registration above stands. Only the rows
-- that change are written and, if any, notified again (the API may have read the types between
-- the two statements).
WITH asked AS (
    SELECT * FROM unnest(
        CAST(:names AS text[]), CAST(:throttle_counts AS int[]),
        CAST(:throttle_periods AS int[]), CAST(:unique_fors AS float8[])
    ) AS a(name, throttle_count, throttle_period_seconds, unique_for_seconds)
), changed AS (
    UPDATE jobrelay.job_types t
    SET throttle_count = a.throttle_count, throttle_period_seconds = a.throttle_period_seconds,
        unique_for_seconds = a.unique_for_seconds
    FROM (SELECT * FROM asked ORDER BY name) AS a
    WHERE t.name = a.name
      AND (t.throttle_count, t.throttle_period_seconds, t.unique_for_seconds)
          IS DISTINCT FROM (a.throttle_count, a.throttle_period_seconds, a.unique_for_seconds)
    RETURNING t.name
)
SELECT count(*) AS changed,
       CASE WHEN count(*) > 0 THEN pg_notify('jobrelay_job_types', '')::text END AS notified
FROM changed;

-- name: job_type_rows
-- The columns of migration 0019 are read through to_jsonb, which has them as NULL before it:
-- an API runs against a database not yet migrated (db/type_store.py).
SELECT name, payload_schema, max_attempts, priority, timeout_seconds, concurrency, rate_count,
       rate_period_seconds, per_key, description, registered_by, api, registered_at,
       CAST(to_jsonb(t) ->> 'throttle_count' AS int) AS throttle_count,
       CAST(to_jsonb(t) ->> 'throttle_period_seconds' AS int) AS throttle_period_seconds,
       CAST(to_jsonb(t) ->> 'unique_for_seconds' AS float8) AS unique_for_seconds
FROM jobrelay.job_types t ORDER BY name;

-- name: runtime_throttle_rows
-- The throttles set at runtime, which every API process keeps in its catalog (reloaded with the
-- types: set_type_limit and clear_type_limit notify the same channel). Through to_jsonb as
-- above: no row before migration 0019.
SELECT type, CAST(to_jsonb(l) ->> 'throttle_count' AS int) AS throttle_count,
       CAST(to_jsonb(l) ->> 'throttle_period_seconds' AS int) AS throttle_period_seconds
FROM jobrelay.type_limits l
WHERE to_jsonb(l) ->> 'throttle_count' IS NOT NULL
ORDER BY type;
