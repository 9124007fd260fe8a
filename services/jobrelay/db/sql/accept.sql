-- The accept of submissions (db/accept.py, Store.accept_jobs; docs/life-of-a-job.md, "1. Accept").
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: accept_job
-- One statement writes the job and its outbox row: they commit together or not at all. The
-- job's `received` entry is its row's created_at (db/sql/jobs.sql, JOB_EVENTS). ON CONFLICT
-- DO NOTHING waits for a concurrent insert of the same key to finish, so of N identical
-- concurrent requests exactly one inserts and the others see its row. It has no conflict
-- target, so a live job of the same client, type and unique key (ux_jobs_live_unique_key) also
-- makes it insert nothing: of N concurrent unique submissions one inserts, and the others find
-- that job (LIVE_JOB_BY_UNIQUE_KEY).
-- The caller knows every column of the new job but the database's times: only those come back
-- (reading back the whole row, its payload parsed again, was a fifth of the accept's driver CPU).
WITH j AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
                      max_attempts, run_at, available_at, traceparent, priority,
                      concurrency_key, unique_key)
    SELECT :id, :client_id, :idempotency_key, :request_hash, :type,
           CAST(:payload AS jsonb), :max_attempts, due.at, coalesce(due.at, now()),
           CAST(:traceparent AS text), CAST(:priority AS smallint),
           CAST(:concurrency_key AS text), CAST(:unique_key AS text)
    FROM (SELECT coalesce(CAST(:run_at AS timestamptz),
                          now() + make_interval(secs => CAST(:delay_seconds AS float8)))
                 AS at) AS due
    ON CONFLICT DO NOTHING
    RETURNING id, created_at, updated_at, available_at, priority, client_id, type
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM j
)
SELECT created_at, updated_at, available_at FROM j;

-- name: accept_jobs
-- Many new jobs in one statement: the same rows as ACCEPT_JOB, one per element of the arrays,
-- each of its client and with its trace context. A batch's (``POST /v1/jobs/batch``: one
-- client, one trace context) or the single submissions that arrived together (the accept's
-- group commit, db/store.py). A key that exists (or repeats within the statement) inserts
-- nothing and comes back in no row; the caller reads those jobs (JOBS_BY_KEYS, or the single
-- accept).
WITH asked AS (
    SELECT a.*, coalesce(a.run_at, now() + make_interval(secs => a.delay_seconds)) AS due
    FROM unnest(CAST(:ids AS uuid[]), CAST(:client_ids AS uuid[]),
                CAST(:idempotency_keys AS text[]), CAST(:request_hashes AS text[]),
                CAST(:types AS text[]), CAST(:payloads AS jsonb[]),
                CAST(:max_attempts AS int[]), CAST(:run_ats AS timestamptz[]),
                CAST(:delays AS float8[]), CAST(:priorities AS smallint[]),
                CAST(:concurrency_keys AS text[]), CAST(:unique_keys AS text[]),
                CAST(:traceparents AS text[]))
         AS a(id, client_id, idempotency_key, request_hash, type, payload, max_attempts,
              run_at, delay_seconds, priority, concurrency_key, unique_key, traceparent)
), j AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
                      max_attempts, run_at, available_at, traceparent, priority,
                      concurrency_key, unique_key)
    SELECT id, client_id, idempotency_key, request_hash, type, payload, max_attempts,
           due, coalesce(due, now()), traceparent, priority, concurrency_key, unique_key
    FROM asked
    ON CONFLICT DO NOTHING  -- a used key, or a live job of a unique key (ACCEPT_JOB)
    RETURNING id, idempotency_key, created_at, available_at, priority, client_id, type
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM j
)
SELECT id, idempotency_key, created_at, available_at FROM j;

-- name: job_by_key
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, r.result
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.client_id = :client_id AND j.idempotency_key = :idempotency_key;

-- name: live_job_by_unique_key
-- The live job that holds a client's unique key of a type (ux_jobs_live_unique_key): the answer
-- to a unique submission whose insert found it. None when it finished meanwhile: the accept
-- then inserts again.
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, NULL::jsonb AS result
FROM jobrelay.jobs j
WHERE j.client_id = :client_id AND j.type = :type AND j.unique_key = :unique_key
  AND state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping');
