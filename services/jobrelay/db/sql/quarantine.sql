-- Quarantine, replay, advisory locks and lost messages (db/quarantine_store.py;
-- docs/life-of-a-job.md, "Quarantine and replay"; docs/invariants.md, invariant 8).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: replay_job
-- makes: replay restore
-- A fresh run: max_attempts = attempts + the type's limit, so attempt numbers stay unique, and
-- replayed_attempts = attempts, from which the run counts its attempts and its backoff. The
-- journal's entry names the attempts used before (docs/states.md, "Attempts and replays").
WITH r AS (
    UPDATE jobrelay.jobs
    SET state = 'queued', max_attempts = attempts + :budget, available_at = now(),
        replayed_attempts = attempts,
        finished_at = NULL, updated_at = now(), type_unknown_since = NULL,
        cancel_requested_at = NULL  -- a cancel asked of an earlier attempt is not the replay's
    WHERE id = :id AND state IN ('quarantined')
      -- Not while another live job holds its unique key (ux_jobs_live_unique_key).
      AND NOT EXISTS (
          SELECT 1 FROM jobrelay.jobs o
          WHERE o.client_id = jobs.client_id AND o.type = jobs.type
            AND o.unique_key = jobs.unique_key AND o.id <> jobs.id
            AND o.state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
      )
      -- Nothing of a cancelled workflow starts again.
      AND NOT EXISTS (SELECT 1 FROM jobrelay.workflows w
                      WHERE w.id = jobs.workflow_id AND w.cancelled_at IS NOT NULL)
    RETURNING id, attempts, available_at, priority, client_id, type
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM r
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'replayed', attempts,
           :detail || ' after ' || attempts || ' attempt(s); a fresh run of '
           || CAST(:budget AS integer) || ' attempt(s)'
    FROM r
), below AS (
    -- Its dependents that its failure cancelled, directly or not, wait for it again
    -- (RESTORE): each for its parents that have not succeeded, the replayed job among them.
    WITH RECURSIVE below(id) AS (
        SELECT d.job_id FROM jobrelay.job_dependencies d JOIN r ON d.parent_id = r.id
        UNION
        SELECT d.job_id FROM jobrelay.job_dependencies d JOIN below b ON d.parent_id = b.id
    )
    SELECT id FROM below
), restored AS (
    UPDATE jobrelay.jobs c
    SET state = 'waiting', finished_at = NULL, last_error_code = NULL,
        last_error = NULL, updated_at = now(),
        waiting_for = (SELECT count(*)
                       FROM jobrelay.job_dependencies d
                       JOIN jobrelay.jobs p ON p.id = d.parent_id
                       WHERE d.job_id = c.id AND p.state <> 'succeeded')
    FROM below b
    WHERE c.id = b.id AND c.state IN ('cancelled')
      AND c.last_error_code = 'dependency_failed'
    RETURNING c.id, c.attempts
), restored_event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'restored', attempts, 'a job it depends on was replayed' FROM restored
)
SELECT id FROM r;

-- name: list_quarantined
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, NULL::jsonb AS result
FROM jobrelay.jobs j
WHERE j.state = 'quarantined'
  AND (CAST(:code AS text) IS NULL OR j.last_error_code = :code)
ORDER BY j.finished_at DESC, j.id
LIMIT :limit;

-- name: quarantined_ids
SELECT id FROM jobrelay.jobs
WHERE state = 'quarantined' AND (CAST(:code AS text) IS NULL OR last_error_code = :code)
ORDER BY finished_at;

-- name: redispatch_stranded
WITH stranded AS (
    SELECT j.id, j.attempts, j.priority, j.client_id, j.type
    FROM jobrelay.jobs j
    WHERE j.state IN ('queued', 'retrying', 'sleeping')
      AND j.available_at < now() - make_interval(secs => :older_than_seconds)
      AND EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id)
      AND NOT EXISTS (
          SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id
          AND (o.published_at IS NULL
               OR o.published_at >= now() - make_interval(secs => :older_than_seconds)))
    ORDER BY j.available_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, priority, client_id, type)
    SELECT id, priority, client_id, type FROM stranded
)
INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
SELECT id, 'redispatched', attempts, :detail FROM stranded
RETURNING job_id;

-- name: stranded_types
-- The types of the stranded jobs: the dispatcher reads the queues of these only. Stranded: due
-- long ago, every outbox row published before the threshold, and still waiting for a consumer.
-- Its message may have been lost (a purged queue, a broker that lost it); the same condition
-- drives `jobrelay jobs redispatch` (REDISPATCH_STRANDED), the dispatcher's healing of lost
-- messages (HEAL_LOST_MESSAGES) and the stats (PUBLISHED_NEVER_CLAIMED).
SELECT DISTINCT j.type FROM jobrelay.jobs j
WHERE j.state IN ('queued', 'retrying', 'sleeping')
  AND j.available_at < now() - make_interval(secs => :older_than_seconds)
  AND EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id)
  AND NOT EXISTS (
      SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id
      AND (o.published_at IS NULL
           OR o.published_at >= now() - make_interval(secs => :older_than_seconds)))
 ORDER BY 1 LIMIT :limit;

-- name: quarantine_delivery_limited
-- makes: delivery_limit
-- The broker dead-lettered a job's message on its own (x-delivery-limit): the job is marked
-- quarantined so that it shows up, and can be replayed, like any other. A job that is running
-- under a live lease, or already finished, is left alone.
WITH moved AS (
    UPDATE jobrelay.jobs
    SET state = 'quarantined', lease_token = NULL, lease_until = NULL,
        wake_at = NULL, waiting_on = NULL,
        last_error = :error, finished_at = now(), updated_at = now(),
        last_error_code = 'delivery_limit'
    WHERE id = :id
      AND (state IN ('queued', 'retrying', 'sleeping')
           OR (state = 'running' AND lease_until < now()))
    RETURNING id, attempts, state AS ends_as, workflow_id, parent_job_id
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'quarantined', attempts, 'delivery_limit' FROM moved
)
-- include: dependents_of

SELECT id FROM moved;

-- name: set_lock_timeout
-- Transaction-scoped advisory locks: released by COMMIT, ROLLBACK or a dropped connection, so a
-- crashed holder can never keep one. ``SET_LOCK_TIMEOUT`` bounds the wait of the blocking form.
SELECT set_config('lock_timeout', :timeout, true) AS v;

-- name: advisory_xact_lock
SELECT pg_advisory_xact_lock(:key)::text AS locked;

-- name: try_advisory_xact_lock
SELECT pg_try_advisory_xact_lock(:key) AS locked;

-- name: job_states
-- The states of the jobs named by the messages in the quarantine queue.
SELECT id, state FROM jobrelay.jobs WHERE id = ANY(:ids);

-- name: quarantined_without_message
-- Quarantined jobs none of whose messages the sweep holds (:held, the job ids of every message
-- in the quarantine queue), oldest quarantine first: what their message would say (the latest
-- outbox row's id, its trace context) and the database's clock, which decides the grace.
SELECT j.id, j.type, j.finished_at, j.traceparent, now() AS read_at,
       (SELECT max(o.id) FROM jobrelay.outbox o WHERE o.job_id = j.id) AS outbox_id
FROM jobrelay.jobs j
WHERE j.state = 'quarantined' AND j.id <> ALL(CAST(:held AS uuid[]))
ORDER BY j.finished_at, j.id
LIMIT :limit;

-- name: quarantined_count
SELECT coalesce(sum(n), 0)::bigint AS n FROM (
    SELECT state, code, n FROM jobrelay.job_totals
    UNION ALL
    SELECT state, code, n FROM jobrelay.job_count_deltas
) AS finished WHERE state = 'quarantined';

-- name: heal_lost_messages
-- Lost messages, healed by the dispatcher: stranded jobs (as above: due, every outbox row
-- published over :older_than_seconds ago, unclaimed since) routed to a work queue the caller
-- has just seen empty — :default_empty for the default queue (every type but :own_types),
-- :empty_own_types for the types bound to their own queue — get a new outbox row and a
-- `redispatched` event. At most :cap times in a row without a claim in between, so that a
-- misconfigured route can never make copies without end.
WITH lost AS (
    SELECT j.id, j.type, j.attempts, j.priority, j.client_id FROM jobrelay.jobs j
    WHERE j.state IN ('queued', 'retrying', 'sleeping')
      AND j.available_at < now() - make_interval(secs => :older_than_seconds)
      AND EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id)
      AND NOT EXISTS (
          SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id
          AND (o.published_at IS NULL
               OR o.published_at >= now() - make_interval(secs => :older_than_seconds)))
      AND ((CAST(:default_empty AS boolean)
            AND j.type <> ALL(CAST(:own_types AS text[])))
           OR j.type = ANY(CAST(:empty_own_types AS text[])))
      AND (SELECT count(*) FROM jobrelay.job_events e
           WHERE e.job_id = j.id AND e.event = 'redispatched'
             -- since its latest claim: the row's, else a journaled one (written before 0018)
             AND e.id > coalesce(j.claimed_seq,
                                 (SELECT max(c.id) FROM jobrelay.job_events c
                                  WHERE c.job_id = j.id AND c.event = 'claimed'), 0))
          < :cap
    ORDER BY j.available_at
    LIMIT :limit
    FOR UPDATE OF j SKIP LOCKED
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, priority, client_id, type)
    SELECT id, priority, client_id, type FROM lost
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'redispatched', attempts, :detail FROM lost
)
SELECT id AS job_id, type FROM lost;
