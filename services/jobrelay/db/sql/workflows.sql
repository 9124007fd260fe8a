-- Workflows (db/workflow_store.py; docs/workflows.md), and the fragment dependents_of that every
-- statement which can end a job of a workflow includes.
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: accept_workflow
-- A workflow and all its jobs in one statement: the workflow row (nothing else when its key was
-- used: the caller reads that one, WORKFLOW_BY_KEY), its jobs (waiting while they have parents,
-- else queued with their outbox rows) and their edges (a job's `received` entry is its row's
-- created_at). The jobs' keys are the workflow's (core/workflows.py::job_key); their request
-- hash is the workflow's.
WITH w AS (
    INSERT INTO jobrelay.workflows (id, client_id, idempotency_key, request_hash, on_failure)
    VALUES (:id, :client_id, :idempotency_key, :request_hash, :on_failure)
    ON CONFLICT (client_id, idempotency_key) DO NOTHING
    RETURNING id, created_at
), asked AS (
    SELECT * FROM unnest(CAST(:job_ids AS uuid[]), CAST(:refs AS text[]),
                         CAST(:job_keys AS text[]), CAST(:types AS text[]),
                         CAST(:payloads AS jsonb[]), CAST(:max_attempts AS int[]),
                         CAST(:priorities AS smallint[]), CAST(:concurrency_keys AS text[]),
                         CAST(:waiting_for AS int[]))
                  AS a(id, ref, job_key, type, payload, max_attempts, priority,
                       concurrency_key, waiting_for)
), j AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
                      max_attempts, traceparent, priority, concurrency_key, workflow_id,
                      workflow_ref, waiting_for, state)
    SELECT a.id, :client_id, a.job_key, :request_hash, a.type, a.payload, a.max_attempts,
           CAST(:traceparent AS text), a.priority, a.concurrency_key, w.id, a.ref,
           a.waiting_for,
           CASE WHEN a.waiting_for > 0 THEN 'waiting'
                ELSE 'queued' END
    FROM asked a CROSS JOIN w
    RETURNING id, state, available_at, priority, client_id, type
), edges AS (
    INSERT INTO jobrelay.job_dependencies (job_id, parent_id)
    SELECT e.job_id, e.parent_id
    FROM unnest(CAST(:child_ids AS uuid[]), CAST(:parent_ids AS uuid[]))
         AS e(job_id, parent_id)
    WHERE EXISTS (SELECT 1 FROM w)
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM j
    WHERE state = 'queued'
)
SELECT id, created_at FROM w;

-- name: one_snapshot
-- The first statement of a transaction whose reads must see one snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY;

-- name: workflow_by_key
SELECT w.id, w.client_id, w.request_hash, w.on_failure, w.created_at, w.cancelled_at
FROM jobrelay.workflows w
WHERE w.client_id = :client_id AND w.idempotency_key = :idempotency_key;

-- name: workflow_by_id
-- :client_id NULL: any client's (operators and the CLI).
SELECT w.id, w.client_id, w.request_hash, w.on_failure, w.created_at, w.cancelled_at
FROM jobrelay.workflows w
WHERE w.id = :id AND (CAST(:client_id AS uuid) IS NULL OR w.client_id = :client_id);

-- name: workflow_jobs
-- A workflow's jobs in the order they were submitted (their ids are time-ordered), each with the
-- refs of its parents.
SELECT j.id, j.workflow_ref AS ref, j.type, j.state, j.last_error_code, j.progress,
       coalesce(ARRAY(SELECT p.workflow_ref FROM jobrelay.job_dependencies d
                      JOIN jobrelay.jobs p ON p.id = d.parent_id
                      WHERE d.job_id = j.id ORDER BY p.id), '{}') AS after
FROM jobrelay.jobs j WHERE j.workflow_id = :id
ORDER BY j.id;

-- name: list_workflows
SELECT w.id, w.client_id, w.on_failure, w.created_at, w.cancelled_at, c.counts, st.state
FROM jobrelay.workflows w
CROSS JOIN LATERAL (
    SELECT coalesce(jsonb_object_agg(s.state, s.n), '{}'::jsonb) AS counts,
           coalesce(bool_or(s.state <> 'succeeded'), false) AS unsucceeded,
           coalesce(bool_or(s.state IN ('queued', 'running', 'retrying', 'sleeping')), false)
               AS can_run
    FROM (SELECT j.state, count(*) AS n FROM jobrelay.jobs j
          WHERE j.workflow_id = w.id GROUP BY j.state) s
) c
CROSS JOIN LATERAL (
    SELECT CASE WHEN NOT c.unsucceeded THEN 'succeeded'
                WHEN w.cancelled_at IS NOT NULL THEN 'cancelled'
                WHEN c.can_run THEN 'running'
                ELSE 'failed' END AS state
) st
WHERE (CAST(:client_id AS uuid) IS NULL OR w.client_id = :client_id)
  AND (CAST(:state AS text) IS NULL OR st.state = CAST(:state AS text))
  AND (CAST(:after_created_at AS timestamptz) IS NULL
       OR (w.created_at, w.id)
          < (CAST(:after_created_at AS timestamptz), CAST(:after_id AS uuid)))
ORDER BY w.created_at DESC, w.id DESC
LIMIT :limit;

-- name: mark_workflow_cancelled
-- The cancel of a workflow, first step: from now on nothing of it is claimed, replayed or
-- queued (the claims' condition, the fragment ``dependents_of``). The first cancel's time is kept.
UPDATE jobrelay.workflows SET cancelled_at = coalesce(cancelled_at, now())
WHERE id = :id AND (CAST(:client_id AS uuid) IS NULL OR client_id = :client_id)
RETURNING id;

-- name: cancel_workflow_jobs
-- makes: cancel
-- Then its jobs: those that have not started cancelled (CANCEL), the running ones asked to stop
-- (as REQUEST_CANCEL). Rows another statement holds (a finish, a claim) are skipped rather than
-- waited for, so this never waits in a cycle with a finish that holds a parent and wants its
-- children; ``skipped`` says how many, and the caller runs it again until none is left.
WITH targets AS (
    SELECT id FROM jobrelay.jobs
    WHERE workflow_id = :id
      AND state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
      AND NOT (state = 'running' AND cancel_requested_at IS NOT NULL)
    ORDER BY id FOR UPDATE SKIP LOCKED
), cancelled AS (
    UPDATE jobrelay.jobs j SET state = 'cancelled', waiting_for = 0, finished_at = now(),
                      wake_at = NULL, waiting_on = NULL, updated_at = now()
    FROM targets t
    WHERE j.id = t.id AND j.state IN ('queued', 'retrying', 'waiting', 'sleeping')
    RETURNING j.id, j.attempts
), requested AS (
    UPDATE jobrelay.jobs j SET cancel_requested_at = now(), updated_at = now()
    FROM targets t
    WHERE j.id = t.id AND j.state = 'running' AND j.cancel_requested_at IS NULL
    RETURNING j.id, j.attempts
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'cancelled', attempts, :detail FROM cancelled
    UNION ALL
    SELECT id, 'cancel_requested', attempts, :detail FROM requested
)
SELECT (SELECT count(*) FROM cancelled) AS cancelled,
       (SELECT count(*) FROM requested) AS requested,
       (SELECT count(*) FROM jobrelay.jobs
        WHERE workflow_id = :id
          AND state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
          AND NOT (state = 'running' AND cancel_requested_at IS NOT NULL)
          AND id NOT IN (SELECT id FROM targets)) AS skipped;

-- fragment: dependents_of
-- makes: parents_succeeded dependency_failed wake
-- CTEs that follow a statement's CTE ``moved`` (its jobs that changed state, with columns
-- ``id``, ``ends_as``, ``workflow_id``, ``parent_job_id``) through the workflows' edges and to
-- the parents of child jobs, in the same statement:
--
-- - each waiting child of a job that ``succeeded`` counts one parent fewer to wait for, and
--   is queued (PARENTS_SUCCEEDED, with its outbox row) when none is left. Its row lock makes
--   that exact: of two statements that finish its last two parents, the second waits for the
--   first and re-reads ``waiting_for`` (EvalPlanQual), and one statement that finishes both
--   counts both at once (``counted``);
-- - every job waiting, directly or not, on one that ended ``quarantined`` or ``cancelled`` in
--   a ``cancel_dependents`` workflow is cancelled (DEPENDENCY_FAILED, code
--   ``dependency_failed``), and so is a child that would be queued in a cancelled workflow.
--
-- - the parent of a job that ended (``context.run_child``, docs/durable-execution.md) that
--   sleeps until that job ends is woken (WAKE: queued, due now, its outbox row and a `woke`
--   entry). Its row is locked first (in id order), and the UPDATE matches a running parent
--   too: a parent that is taking its own row to go to sleep on this child at the same instant
--   is waited for and re-read (EvalPlanQual), so it is either woken here or, having locked
--   first, sees the child ended when it looks (db/durable_store.py). A running parent is not
--   written (``woken`` is read under the lock).
--
-- One UPDATE makes both moves (a child may have a parent of each kind in one group), on rows
-- locked in id order first, so two statements never wait for each other's children in a cycle.
-- A statement with no job of a workflow finds no edge: two index probes per job; with no child
-- job, none.
, counted AS (
    SELECT d.job_id, count(*) AS n
    FROM jobrelay.job_dependencies d JOIN moved e ON d.parent_id = e.id
    WHERE e.workflow_id IS NOT NULL AND e.ends_as = 'succeeded'
    GROUP BY d.job_id
), failed_roots AS (
    SELECT e.id, e.ends_as FROM moved e JOIN jobrelay.workflows w ON w.id = e.workflow_id
    WHERE e.ends_as IN ('quarantined', 'cancelled')
      AND w.on_failure = 'cancel_dependents'
), doomed AS (
    WITH RECURSIVE below(id, root, root_state) AS (
        SELECT d.job_id, r.id, r.ends_as FROM jobrelay.job_dependencies d
        JOIN failed_roots r ON d.parent_id = r.id
        UNION
        SELECT d.job_id, b.root, b.root_state FROM jobrelay.job_dependencies d
        JOIN below b ON d.parent_id = b.id
    )
    SELECT DISTINCT ON (id) id, root, root_state FROM below ORDER BY id, root
), dependents AS (
    SELECT j.id FROM jobrelay.jobs j
    WHERE j.id IN (SELECT job_id FROM counted UNION ALL SELECT id FROM doomed)
      AND j.state IN ('waiting')
    ORDER BY j.id FOR UPDATE
), decided_dependents AS (
    SELECT dp.id, coalesce(c.n, 0) AS n, dm.root, dm.root_state,
           EXISTS (SELECT 1 FROM jobrelay.workflows w
                   WHERE w.id = j.workflow_id AND w.cancelled_at IS NOT NULL) AS workflow_cancelled
    FROM dependents dp JOIN jobrelay.jobs j ON j.id = dp.id
    LEFT JOIN counted c ON c.job_id = dp.id LEFT JOIN doomed dm ON dm.id = dp.id
), moved_dependents AS (
    UPDATE jobrelay.jobs c
    SET state = CASE
            WHEN dd.root IS NOT NULL
                 OR (c.waiting_for <= dd.n AND dd.workflow_cancelled)
                THEN 'cancelled'
            WHEN c.waiting_for <= dd.n THEN 'queued'
            ELSE c.state END,
        waiting_for = CASE WHEN dd.root IS NOT NULL THEN 0
                           ELSE greatest(c.waiting_for - dd.n, 0) END,
        available_at = now(),
        finished_at = CASE WHEN dd.root IS NOT NULL
                                OR (c.waiting_for <= dd.n AND dd.workflow_cancelled)
                           THEN now() END,
        last_error_code = CASE WHEN dd.root IS NOT NULL THEN 'dependency_failed'
                               ELSE c.last_error_code END,
        last_error = CASE
            WHEN dd.root IS NOT NULL
                THEN 'job ' || dd.root || ', which it depends on, ended ' || dd.root_state
            WHEN c.waiting_for <= dd.n AND dd.workflow_cancelled
                THEN 'its workflow was cancelled'
            ELSE c.last_error END,
        updated_at = now()
    FROM decided_dependents dd
    WHERE c.id = dd.id AND c.state IN ('waiting')
    RETURNING c.id, c.state, c.attempts, c.available_at, c.priority, c.client_id, c.type,
              c.last_error_code, c.last_error
), dependents_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM moved_dependents
    WHERE state = 'queued'
), dependents_event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id,
           CASE WHEN state = 'queued' THEN 'parents_succeeded'
                ELSE 'cancelled' END,
           attempts,
           CASE WHEN state = 'queued'
                    THEN 'the jobs it waits for have all succeeded'
                ELSE coalesce(last_error_code || ': ', '') || last_error END
    FROM moved_dependents WHERE state <> 'waiting'
), ended_children AS (
    SELECT parent_job_id AS id,
           array_agg(jsonb_build_object('child', CAST(id AS text))) AS ends
    FROM moved
    WHERE parent_job_id IS NOT NULL AND ends_as IN ('succeeded', 'quarantined', 'cancelled')
    GROUP BY parent_job_id
), parents AS (
    SELECT p.id, p.state = 'sleeping' AND p.waiting_on = ANY(ec.ends) AS woken,
           p.waiting_on ->> 'child' AS child
    FROM jobrelay.jobs p JOIN ended_children ec ON ec.id = p.id
    WHERE p.state IN ('sleeping', 'running')
    ORDER BY p.id FOR NO KEY UPDATE OF p
), woken_parents AS (
    UPDATE jobrelay.jobs p
    SET state = CASE WHEN p.state = 'sleeping' AND p.waiting_on = ANY(ec.ends)
                     THEN 'queued' ELSE p.state END,
        wake_at = CASE WHEN p.state = 'sleeping' AND p.waiting_on = ANY(ec.ends)
                       THEN NULL ELSE p.wake_at END,
        waiting_on = CASE WHEN p.state = 'sleeping' AND p.waiting_on = ANY(ec.ends)
                          THEN NULL ELSE p.waiting_on END,
        available_at = CASE WHEN p.state = 'sleeping' AND p.waiting_on = ANY(ec.ends)
                            THEN now() ELSE p.available_at END,
        updated_at = now()
    FROM parents pl JOIN ended_children ec ON ec.id = pl.id
    WHERE p.id = pl.id AND pl.woken AND (state IN ('sleeping') OR state = 'running')
    RETURNING p.id, p.state, p.attempts, p.available_at, p.priority, p.client_id, p.type,
              pl.child
), woken_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM woken_parents
    WHERE state = 'queued'
), woken_event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'woke', attempts, 'its child ' || child || ' ended' FROM woken_parents
    WHERE state = 'queued'
)
