-- The jobs as the API and the CLI read and cancel them (db/store.py::Store).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: ping
SELECT 1 AS ok;

-- name: jobs_by_keys
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, r.result
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.client_id = :client_id
  AND j.idempotency_key = ANY(CAST(:idempotency_keys AS text[]));

-- name: job_by_id
-- :client_id NULL means "any client" (operators and the CLI); the API always passes its caller.
-- ``no_consumer``: a live job of a type that no consumer serves now (docs/job-types.md, "Where
-- a job goes"): one primary-key read of job_types. ``steps``: its recorded steps in the order
-- they were recorded, for the views that show them (:steps 'names', or 'values' with their
-- values, which can be large; '[]' for none); NULL, not read, when :steps is NULL: the
-- reads that do not show them (a cancel, the wait's polls) skip the subquery. ``blocked_by``:
-- a job waiting in a sequence behind a quarantined one: that one (docs/flow-control.md).
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, r.result,
       j.wake_at, j.waiting_on, j.parent_job_id,
       (j.state IN ('queued', 'retrying') AND NOT EXISTS (
           SELECT 1 FROM jobrelay.job_types t WHERE t.name = j.type AND t.served_until > now()))
       AS no_consumer,
       CASE WHEN CAST(:steps AS text) IS NOT NULL THEN coalesce(
           (SELECT jsonb_agg(CASE WHEN CAST(:steps AS text) = 'values'
                                  THEN to_jsonb(s) - 'job_id'
                                  ELSE to_jsonb(s) - 'job_id' - 'value' END
                             ORDER BY s.at, s.name)
            FROM jobrelay.job_steps s WHERE s.job_id = j.id),
           '[]'::jsonb) END AS steps,
       j.sequence_key,
       CASE WHEN j.sequence_waits THEN (
           SELECT head.id FROM (
               SELECT b.id, b.state FROM jobrelay.jobs b
               WHERE b.client_id = j.client_id AND b.sequence_key = j.sequence_key
                 AND b.state NOT IN ('succeeded', 'cancelled')
               ORDER BY b.sequence_no LIMIT 1) AS head
           WHERE head.state = 'quarantined') END AS blocked_by
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.id = :id AND (CAST(:client_id AS uuid) IS NULL OR j.client_id = :client_id);

-- name: job_events
-- A job's journal in order: the view job_journal (migration 0018) reads job_events and the
-- entries a job's own rows tell (received, published, claimed, succeeded), each in its place.
-- Two entries share a place only after a crash that lost a lease's unflushed commit (the relay
-- leases without waiting for the flush, docs/failover.md): its sequence values may be drawn
-- again, and the entries' times order them.
SELECT e.seq, e.at, e.event, e.attempt, e.detail, e.error
FROM jobrelay.job_journal e
WHERE e.job_id = :job_id
ORDER BY e.seq, e.at;

-- name: list_jobs
-- Keyset pagination, newest first: the cursor is the (created_at, id) of the last row seen.
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, r.result,
       j.wake_at, j.waiting_on, j.parent_job_id
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.client_id = :client_id
  AND (CAST(:state AS text) IS NULL OR j.state = :state)
  AND (CAST(:type AS text) IS NULL OR j.type = :type)
  AND (CAST(:after_created_at AS timestamptz) IS NULL
       OR (j.created_at, j.id)
          < (CAST(:after_created_at AS timestamptz), CAST(:after_id AS uuid)))
ORDER BY j.created_at DESC, j.id DESC
LIMIT :limit;

-- name: cancel_job
-- makes: cancel cancel_quarantined
-- A job that has not started, or sleeps (docs/durable-execution.md), or was quarantined (it
-- blocks its sequence no more: docs/flow-control.md), is cancelled; and so are
-- its child jobs (``context.run_child``, ``start_child``) that have not finished: those not
-- running cancelled, the running ones asked to stop (as REQUEST_CANCEL). A child row another
-- statement holds (its finish, which waits for this job's row to wake it: a cycle) is skipped
-- rather than waited for: it is ending, or comes to run and is not asked to stop.
WITH moved AS (
    UPDATE jobrelay.jobs SET state = 'cancelled', waiting_for = 0, finished_at = now(),
                    wake_at = NULL, waiting_on = NULL, updated_at = now()
    WHERE id = :id AND (CAST(:client_id AS uuid) IS NULL OR client_id = :client_id)
      AND (state IN ('queued', 'retrying', 'waiting', 'sleeping') OR state IN ('quarantined'))
    RETURNING id, attempts, state AS ends_as, workflow_id, parent_job_id
), children AS (
    SELECT c.id FROM jobrelay.jobs c
    WHERE c.parent_job_id IN (SELECT id FROM moved)
      AND c.state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
      AND NOT (c.state = 'running' AND c.cancel_requested_at IS NOT NULL)
    ORDER BY c.id FOR UPDATE SKIP LOCKED
), cancelled_children AS (
    UPDATE jobrelay.jobs c SET state = 'cancelled', waiting_for = 0, finished_at = now(),
                      wake_at = NULL, waiting_on = NULL, updated_at = now()
    FROM children t
    WHERE c.id = t.id AND state IN ('queued', 'retrying', 'waiting', 'sleeping')
    RETURNING c.id, c.attempts
), requested_children AS (
    UPDATE jobrelay.jobs c SET cancel_requested_at = now(), updated_at = now()
    FROM children t
    WHERE c.id = t.id AND c.state = 'running' AND c.cancel_requested_at IS NULL
    RETURNING c.id, c.attempts
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'cancelled', attempts, :detail FROM moved
    UNION ALL
    SELECT id, 'cancelled', attempts, 'its parent job was cancelled' FROM cancelled_children
    UNION ALL
    SELECT id, 'cancel_requested', attempts, 'its parent job was cancelled'
    FROM requested_children
)
-- include: dependents_of

SELECT id FROM moved;

-- name: request_cancel
-- A cancel of a running job is a request its worker carries out (docs/states.md,
-- `cancel_running`): ``cancel_requested_at`` and a `cancel_requested` event, the first time
-- only. Not a transition: the state is the worker's to change. Its row comes back whether
-- the request is new (``first``) or was made before; no row: the job is not running.
WITH running AS (
    SELECT id, attempts, cancel_requested_at IS NULL AS first FROM jobrelay.jobs
    WHERE id = :id AND (CAST(:client_id AS uuid) IS NULL OR client_id = :client_id)
      AND state = 'running'
    FOR UPDATE
), requested AS (
    UPDATE jobrelay.jobs j SET cancel_requested_at = now(), updated_at = now()
    FROM running r WHERE j.id = r.id AND r.first
    RETURNING j.id, j.attempts
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'cancel_requested', attempts, :detail FROM requested
)
SELECT id, first FROM running;

-- name: outbox_rows_of_job
SELECT id, available_at, created_at, published_at, publish_attempts, last_error
FROM jobrelay.outbox WHERE job_id = :job_id ORDER BY id;

-- name: client_name_of_job
SELECT c.name FROM jobrelay.clients c JOIN jobrelay.jobs j ON j.client_id = c.id
WHERE j.id = :job_id;

-- name: result_of_job
SELECT result, attempt, created_at FROM jobrelay.job_results WHERE job_id = :job_id;
