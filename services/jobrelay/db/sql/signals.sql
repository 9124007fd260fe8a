-- What users and operators see of a job's durable execution (docs/durable-execution.md) and the
-- signals they send it (db/store.py::Store). The handler's side, the steps, sleeps and waits
-- under a lease, is db/sql/durable.sql's.
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: send_signal
-- Through jobrelay_signal (migration 0016), the function a sender calls in its own
-- transaction: it takes the job's row before it looks, keeps the signal with a `signalled`
-- entry, and wakes the job when it sleeps waiting for that very signal. :client_id NULL: any
-- client's job (an admin); otherwise another client's job is no row, as unknown as a missing one.
-- Answers 'sent', 'repeated' (the key was used for this job), 'finished' or 'unknown'.
SELECT jobrelay.jobrelay_signal(j.id, CAST(:name AS text), CAST(:value AS jsonb),
                                CAST(:idempotency_key AS text)) AS status
FROM jobrelay.jobs j
WHERE j.id = :job_id AND (CAST(:client_id AS uuid) IS NULL OR j.client_id = :client_id);

-- name: steps_of_job
-- The job's recorded steps in the order they were recorded (the single job's view, the trace):
-- one aggregate, the shape of the claim's `steps` column (db/rows.py::steps_from_json), NULL
-- when there is none. The values only when asked (?steps=values): they can be large.
SELECT jsonb_agg(CASE WHEN CAST(:with_values AS boolean) THEN to_jsonb(s)
                      ELSE to_jsonb(s) - 'value' END
                 ORDER BY s.at, s.name) AS steps
FROM jobrelay.job_steps s
WHERE s.job_id = :job_id;

-- name: signals_of_job
-- The signals sent to the job, oldest first, with the wait that took each (the trace, the
-- console): names and times, not values (a signal's value is its sender's data).
SELECT g.id, g.name, g.sent_at, g.taken_by, g.taken_at
FROM jobrelay.job_signals g
WHERE g.job_id = :job_id
ORDER BY g.id;

-- name: reset_steps
-- A replay with reset_steps (in the replay's transaction, after it): the job's recorded steps
-- go, so its next attempt runs every step again; the signals its waits took are untaken again,
-- so the new run's waits find them in the order they were sent (the untaken ones stay).
WITH released AS (
    UPDATE jobrelay.job_signals SET taken_by = NULL, taken_at = NULL
    WHERE job_id = :job_id AND taken_by IS NOT NULL
    RETURNING id
), dropped AS (
    DELETE FROM jobrelay.job_steps WHERE job_id = :job_id
    RETURNING name
)
SELECT (SELECT count(*) FROM dropped) AS steps, (SELECT count(*) FROM released) AS signals;
