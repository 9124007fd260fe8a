-- Durable execution inside a job (db/durable_store.py; docs/durable-execution.md): a handler's
-- steps, sleeps, waits for a signal and child jobs, each written under the attempt's lease token.
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.
--
-- A wait (a signal, a child) is a transaction of several statements that takes the job's row
-- first (LOCK_FOR_WAIT, fenced), then looks in a new statement: under READ COMMITTED each sees
-- what committed before it started, so a signal's sender (jobrelay_signal, which takes the same
-- row first) or a child's end (the fragment dependents_of, whose UPDATE of the parent waits for
-- that row) either comes before the look, and is seen, or after the sleep, and wakes it.

-- name: record_steps
-- The steps of a group of attempts in one statement (db/group_commit.py): each row written only
-- while its job is running under that request's token and a live lease; the job's row is
-- share-locked (FOR SHARE, in id order) so that a claim of it after an expiry waits for this
-- statement (and reads the steps again after it: db/execution_store.py). A name recorded
-- already keeps its row (ON CONFLICT DO NOTHING). A request whose earlier try committed and
-- lost its answer finds its own attempt's row (``found``, looked up only for the requests not
-- written now, with the value it recorded); any other request not written is not returned. A
-- value written now is not sent back: the caller has it.
WITH asked AS (
    SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:lease_tokens AS uuid[]),
                         CAST(:attempts AS int[]), CAST(:names AS text[]),
                         CAST(:step_values AS text[]))
                  AS a(job_id, asked_token, attempt, name, step_value)
), fenced AS (
    SELECT a.* FROM jobrelay.jobs j JOIN asked a ON a.job_id = j.id
    WHERE j.lease_token = a.asked_token AND (j.state = 'running' AND j.lease_until > now())
      AND j.attempts = a.attempt
    ORDER BY j.id FOR SHARE OF j
), written AS (
    INSERT INTO jobrelay.job_steps (job_id, name, kind, status, attempt, value)
    SELECT job_id, name, 'step', 'done', attempt, CAST(step_value AS jsonb) FROM fenced
    ON CONFLICT (job_id, name) DO NOTHING
    RETURNING job_id, name, attempt, at, false AS earlier, CAST(NULL AS jsonb) AS value
), unwritten AS (
    SELECT a.job_id, a.name, a.attempt FROM asked a
    WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.job_id = a.job_id AND w.name = a.name)
), found AS (
    SELECT s.job_id, s.name, s.attempt, s.at, true AS earlier, s.value
    FROM unwritten u JOIN jobrelay.job_steps s
         ON s.job_id = u.job_id AND s.name = u.name AND s.attempt = u.attempt
    WHERE s.kind = 'step'
)
SELECT * FROM written
UNION ALL
SELECT * FROM found;

-- name: lock_for_wait
-- A wait's first statement: the job's row, taken while the attempt's lease is live and its
-- own, before anything is looked at (FOR NO KEY UPDATE, as jobrelay_signal takes it). Its
-- ``database_now``: the transaction's clock, against which a recorded deadline is judged.
SELECT id, attempts, now() AS database_now FROM jobrelay.jobs
WHERE id = :job_id
  AND lease_token = :lease_token AND (state = 'running' AND lease_until > now())
FOR NO KEY UPDATE;

-- name: fenced_job
-- The job while the attempt's lease is live and its own, unlocked: whose client a child is
-- accepted for, with the parent's trace context.
SELECT id, client_id, traceparent FROM jobrelay.jobs
WHERE id = :job_id
  AND lease_token = :lease_token AND (state = 'running' AND lease_until > now());

-- name: step_of_job
-- One recorded step of a job, by name (a wait's deadline, a child's id).
SELECT name, kind, status, attempt, at, value, wake_at, child_id FROM jobrelay.job_steps
WHERE job_id = :job_id AND name = :name;

-- name: take_signal
-- The oldest signal of that name not taken yet is taken by the wait :name (``taken_by``), and
-- its value recorded as the wait's step, in one statement. Only a wait that holds the job's row
-- takes a signal, so no two waits take the same one.
WITH oldest AS (
    SELECT id FROM jobrelay.job_signals
    WHERE job_id = :job_id AND name = :signal AND taken_by IS NULL
    ORDER BY id LIMIT 1
    FOR UPDATE
), taken AS (
    UPDATE jobrelay.job_signals s SET taken_by = :name, taken_at = now()
    FROM oldest o WHERE s.id = o.id
    RETURNING s.value
), step AS (
    INSERT INTO jobrelay.job_steps (job_id, name, kind, status, attempt, value)
    SELECT CAST(:job_id AS uuid), CAST(:name AS text), 'signal', 'done',
           CAST(:attempt AS integer), value
    FROM taken
    ON CONFLICT (job_id, name) DO UPDATE
    SET status = 'done', value = excluded.value, attempt = excluded.attempt, at = now()
)
SELECT value FROM taken;

-- name: time_out_wait
-- A wait whose recorded deadline has passed with no signal: recorded timed out, so every later
-- attempt raises SignalTimeout at it again (a first wait with no time at all is recorded so
-- at once).
INSERT INTO jobrelay.job_steps (job_id, name, kind, status, attempt, wake_at)
VALUES (:job_id, :name, 'signal', 'timed_out', :attempt, now())
ON CONFLICT (job_id, name) DO UPDATE
SET status = 'timed_out', attempt = excluded.attempt, at = now();

-- name: sleep_job
-- makes: sleep
-- The job goes to sleep, in one statement: the step :name recorded (a sleep's wake time, a
-- wait's deadline: :until, else now() + :seconds, NULL with neither; a name recorded already
-- keeps its wake time, so a replay does not sleep longer), the job running -> sleeping with
-- its lease given up and its attempt not counted (max_attempts + 1: attempt numbers stay unique
-- per claim), due at its wake time with an outbox row due then; with no wake time (a wait for a
-- signal or a child without a deadline) it has no outbox row and is due nowhere near (the year
-- 9999): only its signal or its child wakes it. Journal: `sleeping`, what for and until when.
-- No row: the lease is not the attempt's; ``cancel_requested``: the job stays running, its
-- cancel to carry out.
WITH recorded AS (
    SELECT wake_at FROM jobrelay.job_steps WHERE job_id = :job_id AND name = :name
), wake AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM recorded) THEN (SELECT wake_at FROM recorded)
                ELSE coalesce(CAST(:until AS timestamptz),
                              now() + make_interval(secs => CAST(:seconds AS float8))) END
           AS at
), moved AS (
    UPDATE jobrelay.jobs j
    SET state = 'sleeping', lease_token = NULL, lease_until = NULL,
        max_attempts = j.max_attempts + 1,
        wake_at = w.at, waiting_on = CAST(:waiting_on AS jsonb),
        available_at = coalesce(w.at, timestamptz '9999-01-01 00:00:00+00'),
        updated_at = now()
    FROM wake w
    WHERE j.id = :job_id
      AND lease_token = :lease_token AND (state = 'running' AND lease_until > now())
      -- A job whose cancel was requested while it ran does not go to sleep: its worker ends
      -- it cancelled (FINISH_JOBS, cancel_running; ``cancel_requested`` below says so).
      AND cancel_requested_at IS NULL
    RETURNING j.id, j.attempts, j.wake_at, j.waiting_on, j.available_at, j.priority,
              j.client_id, j.type
), step AS (
    INSERT INTO jobrelay.job_steps (job_id, name, kind, status, attempt, wake_at, child_id)
    SELECT id, :name, CAST(:kind AS text), CAST(:status AS text), attempts, wake_at,
           CAST(:child_id AS uuid)
    FROM moved
    ON CONFLICT (job_id, name) DO NOTHING
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM moved WHERE wake_at IS NOT NULL
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'sleeping', attempts,
           concat_ws(' ',
                     'for signal ' || (waiting_on ->> 'signal'),
                     'for child ' || (waiting_on ->> 'child'),
                     'until ' || to_char(wake_at AT TIME ZONE 'UTC',
                                         'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
    FROM moved
)
SELECT wake_at, waiting_on, false AS cancel_requested FROM moved
UNION ALL
SELECT CAST(NULL AS timestamptz), CAST(NULL AS jsonb), true FROM jobrelay.jobs
WHERE id = :job_id AND lease_token = :lease_token AND cancel_requested_at IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM moved);

-- name: adopt_child
-- A child accepted for a parent (db/accept.py, in the accept's transaction) names its parent,
-- whose sleep its end then wakes. A job its key held before keeps a parent it had.
UPDATE jobrelay.jobs SET parent_job_id = :parent_id
WHERE id = :child_id AND parent_job_id IS NULL AND id <> :parent_id;

-- name: record_child
-- A child's step: its id (``waiting`` while the parent waits for it, ``done`` for a child
-- started without waiting) or, once it succeeded, its result (``done``). A done step is final.
INSERT INTO jobrelay.job_steps AS s (job_id, name, kind, status, attempt, value, child_id)
VALUES (:job_id, :name, 'child', :status, :attempt, CAST(:step_value AS jsonb), :child_id)
ON CONFLICT (job_id, name) DO UPDATE
SET status = excluded.status, value = excluded.value, attempt = excluded.attempt, at = now()
WHERE s.status = 'waiting';

-- name: child_end
-- A child as its parent's wait reads it, in a statement of its own (a fresh snapshot, taken
-- after the parent's row: a child that ended before is seen ended).
SELECT j.id, j.state, j.last_error_code, r.result
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.id = :child_id;
