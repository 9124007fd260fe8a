-- Flow control, the operators' side: queues, pause and resume, runtime limits (db/flow_store.py;
-- docs/flow-control.md).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: queue_rows
SELECT name, paused_at, paused_by FROM jobrelay.queues ORDER BY name;

-- name: pause_queue
-- The pause is exact at claim: a claim holds the queue's row (FOR KEY SHARE, CLAIM_JOBS and
-- CLAIM_CANDIDATES) while it checks paused_at and claims, so this lock waits for the claims under
-- way and every claim after it sees the pause. Pausing a paused queue keeps its first time and
-- operator. (The figures of the queues: QUEUE_BACKLOGS and QUEUE_RUNNING, the relay's.)
WITH locked AS (SELECT name FROM jobrelay.queues WHERE name = :name FOR UPDATE)
UPDATE jobrelay.queues AS q
SET paused_at = coalesce(q.paused_at, now()),
    paused_by = CASE WHEN q.paused_at IS NULL THEN :paused_by ELSE q.paused_by END
FROM locked
WHERE q.name = locked.name
RETURNING q.name, q.paused_at, q.paused_by;

-- name: resume_queue
-- A resume wakes the dispatchers (the outbox's channel) so the queue's backlog is published at
-- once, not at the next poll.
WITH resumed AS (
    UPDATE jobrelay.queues SET paused_at = NULL, paused_by = NULL WHERE name = :name
    RETURNING name, paused_at, paused_by
)
SELECT name, paused_at, paused_by, pg_notify('jobrelay_outbox', '')::text AS notified
FROM resumed;

-- name: type_limit_rows
SELECT type, concurrency, rate_count, rate_period_seconds, per_key, throttle_count,
       throttle_period_seconds
FROM jobrelay.type_limits ORDER BY type;

-- name: type_limit_row
SELECT type, concurrency, rate_count, rate_period_seconds, per_key, throttle_count,
       throttle_period_seconds
FROM jobrelay.type_limits WHERE type = :type;

-- name: set_type_limit
-- Notifies the API processes, which keep the runtime throttles in their catalog
-- (core/type_catalog.py): they read them again at once, not at their next refresh.
WITH written AS (
    INSERT INTO jobrelay.type_limits AS t
        (type, concurrency, rate_count, rate_period_seconds, per_key, throttle_count,
         throttle_period_seconds, updated_at)
    VALUES (:type, :concurrency, :rate_count, :rate_period_seconds, :per_key, :throttle_count,
            :throttle_period_seconds, now())
    ON CONFLICT (type) DO UPDATE
    SET concurrency = excluded.concurrency, rate_count = excluded.rate_count,
        rate_period_seconds = excluded.rate_period_seconds, per_key = excluded.per_key,
        throttle_count = excluded.throttle_count,
        throttle_period_seconds = excluded.throttle_period_seconds, updated_at = now()
    RETURNING type, concurrency, rate_count, rate_period_seconds, per_key, throttle_count,
              throttle_period_seconds
)
SELECT written.*, pg_notify('jobrelay_job_types', '')::text AS notified FROM written;

-- name: clear_type_limit
-- Notifies the API processes as SET_TYPE_LIMIT does (a runtime throttle may end here).
WITH cleared AS (DELETE FROM jobrelay.type_limits WHERE type = :type RETURNING type)
SELECT type, pg_notify('jobrelay_job_types', '')::text AS notified FROM cleared;

-- name: job_type_names
-- Every registered type's name: the queues `jobrelay queues list` reads beside the named ones.
SELECT name FROM jobrelay.job_types ORDER BY name;
