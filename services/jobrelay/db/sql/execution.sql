-- The consumer's claims, finishes and reports (db/execution_store.py; docs/life-of-a-job.md,
-- "3. Claim, run, finish, ack").
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: claim_jobs
-- makes: claim reclaim
-- Claim: due queued/retrying/sleeping (a sleeper is due at its wake time), or running with an
-- expired lease, and attempts left. The previous
-- state comes back so a re-claim of an expired lease is journaled as such. Two requests for one
-- job in a group: one wins (its token is returned), the other is refused as a duplicate.
-- Nothing of the consumer's queue (:queue, NULL: none) is claimed while it is paused: its row is
-- share-locked first (FOR KEY SHARE, before any job row), so a pause (PAUSE_QUEUE locks the row
-- FOR UPDATE) waits for the claims under way, and a claim that waited for a pause sees it.
-- A request not :checked (its type's limit checked by the caller's transaction, CLAIM_CANDIDATES
-- below) claims only a job of a type without a runtime limit (``type_limits``). Nothing of a
-- cancelled workflow is claimed (it is cancelled as soon as the workflow's cancel reaches it).
--
-- The consumer's hot path runs as group commits (``db/group_commit.py``): one statement claims,
-- or finishes, the jobs of every delivery that arrived together, each row fenced on its own.
-- The requests come as parallel arrays; a row the statement cannot move is simply not returned,
-- and its caller alone finds out why. Rows are locked in id order, so two groups that share a
-- job (duplicate deliveries) wait for each other instead of deadlocking.
WITH asked AS (
    SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:lease_tokens AS uuid[]),
                         CAST(:lease_seconds AS float8[]), CAST(:details AS text[]),
                         CAST(:types AS text[]), CAST(:checked AS boolean[]))
                  AS a(job_id, asked_token, asked_seconds, asked_detail, asked_type,
                       limit_checked)
), queue AS MATERIALIZED (
    SELECT paused_at IS NULL AS open FROM jobrelay.queues
    WHERE name = CAST(:queue AS text) FOR KEY SHARE
), before AS (
    -- The claim this one replaces (an earlier attempt's, the row tells only the latest),
    -- and a place in the journal for an expiry, drawn before the new claim's.
    SELECT id, state AS previous_state, attempts AS previous_attempt,
           claimed_seq AS previous_seq, claimed_at AS previous_at,
           claimed_by AS previous_by,
           CASE WHEN state = 'running' THEN nextval('jobrelay.job_events_id_seq') END
               AS expiry_seq
    FROM jobrelay.jobs
    WHERE id IN (SELECT job_id FROM asked)
      AND coalesce((SELECT open FROM queue), true)  -- no row: no pause to keep
    -- NO KEY: the journal rows other transactions insert for these jobs (their foreign
    -- key takes FOR KEY SHARE, in no particular order) neither wait nor deadlock on it.
    ORDER BY id FOR NO KEY UPDATE
), claimed AS (
    UPDATE jobrelay.jobs j
    SET state = 'running', attempts = j.attempts + 1, lease_token = a.asked_token,
        lease_until = now() + make_interval(secs => a.asked_seconds), updated_at = now(),
        type_unknown_since = NULL,  -- a consumer that knows the type has it now
        wake_at = NULL, waiting_on = NULL,  -- a sleeper's time has come
        -- The `claimed` entry, told by the row (JOB_EVENTS). At the statement's clock, not
        -- its transaction's start: a claim under a limit waits for its slot's lock within its
        -- transaction, and the journal must not date it before the finish that freed the slot.
        claimed_seq = nextval('jobrelay.job_events_id_seq'), claimed_at = clock_timestamp(),
        claimed_by = a.asked_detail
    FROM before b JOIN asked a ON a.job_id = b.id
    WHERE j.id = b.id AND j.attempts < j.max_attempts
      -- a consumer claims only a job it can run (NULL: any type)
      AND (a.asked_type IS NULL OR j.type = a.asked_type)
      AND (a.limit_checked
           OR NOT EXISTS (SELECT 1 FROM jobrelay.type_limits l WHERE l.type = j.type))
      AND (j.workflow_id IS NULL OR NOT EXISTS (
          SELECT 1 FROM jobrelay.workflows w
          WHERE w.id = j.workflow_id AND w.cancelled_at IS NOT NULL))
      AND ((state IN ('queued', 'retrying', 'sleeping') AND available_at <= now())
           OR (state = 'running' AND lease_until < now()))
    -- ``steps``: what earlier attempts recorded (docs/durable-execution.md), NULL for a job
    -- that recorded none: one probe of job_steps' primary key for a plain job.
    RETURNING j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload,
              j.state, j.attempts, j.max_attempts, j.available_at, j.lease_token,
              j.lease_until, j.last_error_code, j.last_error, j.created_at, j.updated_at,
              j.finished_at, j.run_at, j.cancel_requested_at, j.traceparent, j.priority,
              j.concurrency_key, j.unique_key, j.workflow_id, j.workflow_ref, j.progress,
              j.replayed_attempts, j.parent_job_id, j.sequence_key,
              (SELECT jsonb_agg(to_jsonb(s) - 'job_id' ORDER BY s.at, s.name)
               FROM jobrelay.job_steps s WHERE s.job_id = j.id) AS steps,
              b.previous_state, b.previous_attempt, b.previous_seq, b.previous_at,
              b.previous_by, b.expiry_seq, j.claimed_at
), new_events AS (
    -- What the row forgets now, in the journal: the claim replaced (with its own place and
    -- time: it reads where it happened), and an expired lease, placed before the new claim.
    -- A first claim writes nothing here. The place goes in seq, the row's id is its own.
    INSERT INTO jobrelay.job_events (seq, job_id, event, attempt, detail, at)
    SELECT previous_seq, id, 'claimed', previous_attempt, previous_by, previous_at
    FROM claimed WHERE previous_seq IS NOT NULL
    UNION ALL
    SELECT expiry_seq, id, 'lease_expired', attempts - 1,
           'lease expired; re-claimed by a consumer', claimed_at
    FROM claimed WHERE previous_state = 'running'
)
SELECT * FROM claimed;

-- name: quarantine_exhausted
-- makes: exhaust
-- A job that cannot be claimed because it has no attempts left is quarantined here, with no
-- attempt of its own (the journal entry carries the attempts so far), and its dependents (a
-- workflow's) are cancelled; returns its id.
WITH moved AS (
    UPDATE jobrelay.jobs
    SET state = 'quarantined', lease_token = NULL, lease_until = NULL,
        wake_at = NULL, waiting_on = NULL,
        last_error = :error, finished_at = now(), updated_at = now(),
        last_error_code = 'attempts_exhausted'
    WHERE id = :id AND attempts >= max_attempts
      AND (state IN ('queued', 'retrying', 'sleeping')
           OR (state = 'running' AND lease_until < now()))
    RETURNING id, attempts, state AS ends_as, workflow_id, parent_job_id
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'quarantined', attempts, 'attempts_exhausted' FROM moved
)
-- include: dependents_of

SELECT id FROM moved;

-- name: record_event
INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
SELECT id, :event, CAST(:attempt AS integer), :detail FROM jobrelay.jobs WHERE id = :job_id;

-- name: renew_lease
UPDATE jobrelay.jobs SET lease_until = now() + make_interval(secs => :lease_seconds)
WHERE id = :id AND lease_token = :lease_token AND state = 'running' AND lease_until > now()
RETURNING lease_until, cancel_requested_at IS NOT NULL AS cancel_requested;

-- name: cancels_requested
-- The heartbeat's poll between renewals, for a group of running jobs: which of them (by id and
-- lease token) have a cancel requested. Read only: no row version, no WAL, no dead tuple.
SELECT id, lease_token FROM jobrelay.jobs
WHERE id = ANY(CAST(:ids AS uuid[])) AND cancel_requested_at IS NOT NULL;

-- fragment: finish_moves
-- makes: complete retry quarantine cancel_running
-- The body of FINISH_JOBS and FINISH_PLAIN_JOBS, written once.
-- Every exit of a worker from `running`, for a group of jobs: each row's decided outcome (its
-- :targets entry: succeeded, retrying, quarantined or cancelled) with its state, result or retry
-- (due :retry_delays seconds after the database's now(), a new outbox row), error (cleared by a
-- success) and journal entry (a success's is told by its row), all in one statement, and only while that row's
-- lease is the worker's and alive. A retry of a job whose client asked to cancel it meanwhile
-- ends it `cancelled` instead (``ends_as``; no outbox row). The rows moved come back as (id,
-- asked_token, target, ends_as): two reports on one job in a group (a stale worker's and the
-- owner's) are told apart by token and target. A row not moved (a stale lease) is looked into
-- by its own caller.
-- Arrays unused by an outcome hold NULL for its row.
WITH asked AS (
    SELECT * FROM unnest(CAST(:ids AS uuid[]), CAST(:lease_tokens AS uuid[]),
                         CAST(:targets AS text[]), CAST(:results AS text[]),
                         CAST(:retry_delays AS float8[]), CAST(:error_codes AS text[]),
                         CAST(:errors AS text[]), CAST(:failures AS text[]))
                  AS a(job_id, asked_token, target, result, retry_delay, error_code, error,
                       failure)
), locked AS (
    SELECT id, cancel_requested_at IS NOT NULL AS cancel_requested
    FROM jobrelay.jobs WHERE id IN (SELECT job_id FROM asked) ORDER BY id FOR NO KEY UPDATE
), decided AS (
    SELECT a.*, CASE WHEN a.target = 'retrying' AND l.cancel_requested
                     THEN 'cancelled' ELSE a.target END AS ends_as
    FROM locked l JOIN asked a ON a.job_id = l.id
), moved AS (
    UPDATE jobrelay.jobs j
    SET state = a.ends_as,
        lease_token = NULL, lease_until = NULL,
        available_at = CASE WHEN a.ends_as = 'retrying'
                            THEN now() + make_interval(secs => a.retry_delay)
                            ELSE j.available_at END,
        -- A success clears an earlier attempt's error (the journal keeps it).
        last_error_code = CASE WHEN a.ends_as <> 'succeeded'
                               THEN coalesce(a.error_code, j.last_error_code) END,
        last_error = CASE WHEN a.ends_as <> 'succeeded'
                          THEN coalesce(a.error, j.last_error) END,
        finished_at = CASE WHEN a.ends_as <> 'retrying' THEN now() END,
        -- A success's `succeeded` entry is told by the row (JOB_EVENTS): its place here.
        finished_seq = CASE WHEN a.ends_as = 'succeeded'
                            THEN nextval('jobrelay.job_events_id_seq') END,
        updated_at = now()
    FROM decided a
    WHERE j.id = a.job_id
      AND lease_token = a.asked_token AND (state = 'running' AND lease_until > now())
      -- only the moves declared
      AND a.ends_as IN ('succeeded', 'retrying', 'quarantined', 'cancelled')
    RETURNING j.id, j.attempts, j.available_at, a.asked_token, a.target, a.ends_as,
              a.result, a.error_code, a.failure, j.priority, j.client_id, j.type,
              j.workflow_id, j.parent_job_id
), stored AS (
    INSERT INTO jobrelay.job_results (job_id, result, attempt)
    SELECT id, CAST(result AS jsonb), attempts FROM moved
    WHERE ends_as = 'succeeded'
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM moved
    WHERE ends_as = 'retrying'
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail, error)
    SELECT id, CASE ends_as WHEN 'retrying' THEN 'retry_scheduled'
                            WHEN 'quarantined' THEN 'quarantined'
                            WHEN 'cancelled' THEN 'cancelled' END,
           attempts,
           CASE
               WHEN ends_as = 'retrying' THEN
                   error_code || ': retry at '
                   || to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
               WHEN target = 'retrying' THEN
                   error_code || ': not retried, its cancel was requested'
               WHEN target = 'quarantined' THEN error_code
               WHEN target = 'cancelled' THEN 'its cancel was requested'
           END,
           CAST(failure AS jsonb)
    FROM moved WHERE ends_as <> 'succeeded'
)

-- name: finish_jobs
-- Every exit of a worker from `running`, for a group of jobs (the fragment finish_moves), and
-- the moves it makes of their workflows' dependents and waiting parents (dependents_of).
-- include: finish_moves
-- include: dependents_of

SELECT id, asked_token, target, ends_as FROM moved;

-- name: finish_plain_jobs
-- FINISH_JOBS without dependents_of, for a group in which no job has a workflow or a parent
-- (db/execution_store.py chooses): such a job has no edge to follow, so the workflow release
-- would only probe the indexes and find nothing.
-- include: finish_moves

SELECT id, asked_token, target, ends_as FROM moved;

-- name: defer_unknown_type
-- makes: defer unknown_type
-- A consumer that does not know the job's type (its message says which) never claims it: one
-- statement puts the job back, due after :delay_seconds with a new outbox row and a `deferred`
-- event, and attempts untouched; or, once the type has stayed unknown past :patience_seconds,
-- quarantines it (unknown_job_type). Guarded like a claim: queued or retrying, and due.
WITH met AS (
    SELECT id, coalesce(type_unknown_since, now()) AS since,
           coalesce(type_unknown_since <= now() - make_interval(secs => :patience_seconds),
                    false) AS patience_over
    FROM jobrelay.jobs
    WHERE id = :id AND type = :type AND state IN ('queued', 'retrying', 'sleeping')
      AND available_at <= now()
    FOR UPDATE
), moved AS (
    UPDATE jobrelay.jobs j
    SET state = CASE WHEN m.patience_over THEN 'quarantined' ELSE j.state END,
        available_at = CASE WHEN m.patience_over THEN j.available_at
                            ELSE now() + make_interval(secs => :delay_seconds) END,
        finished_at = CASE WHEN m.patience_over THEN now() END,
        type_unknown_since = m.since,
        -- a sleeper deferred sleeps on (due later); quarantined, it waits for nothing
        wake_at = CASE WHEN m.patience_over THEN NULL ELSE j.wake_at END,
        waiting_on = CASE WHEN m.patience_over THEN NULL ELSE j.waiting_on END,
        last_error_code = 'unknown_job_type',
        last_error = CASE WHEN m.patience_over THEN :quarantined_error
                          ELSE :deferred_error END,
        updated_at = now()
    FROM met m WHERE j.id = m.id
    RETURNING j.id, j.attempts, j.available_at, j.type_unknown_since, m.patience_over,
              j.priority, j.client_id, j.type, j.state AS ends_as, j.workflow_id,
              j.parent_job_id
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM moved WHERE NOT patience_over
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, CASE WHEN patience_over THEN 'quarantined' ELSE 'deferred' END, attempts,
           CASE WHEN patience_over THEN 'unknown_job_type'
                ELSE 'unknown_job_type: ' || :detail || '; due again at '
                     || to_char(available_at AT TIME ZONE 'UTC',
                                'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
    FROM moved
)
-- include: dependents_of

SELECT id, attempts, available_at, type_unknown_since, patience_over FROM moved;

-- name: release_lease
-- makes: release
-- Shutdown gives a running job back: `queued` again (its message is requeued), attempt counted.
WITH released AS (
    UPDATE jobrelay.jobs
    SET state = 'queued', lease_token = NULL, lease_until = NULL,
        available_at = now(), updated_at = now()
    WHERE id = :id AND lease_token = :lease_token AND state = 'running'
    RETURNING id, attempts
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'lease_expired', attempts, :detail FROM released
)
SELECT id FROM released;

-- name: attempt_trace
-- What a finished attempt left behind, to tell "my earlier COMMIT landed but its answer was
-- lost" (the attempt number is unique per claim) from "a newer attempt owns the job".
SELECT j.state, j.attempts, r.attempt AS result_attempt
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.id = :id;

-- name: claim_candidates
-- The jobs of types with a limit in force that arrived together are claimed in one transaction
-- (docs/flow-control.md): CLAIM_CANDIDATES locks the consumer's queue row (FOR KEY SHARE, as
-- CLAIM_JOBS) and the jobs' rows (in id order, as CLAIM_JOBS), and reads their types' runtime
-- limits; with a concurrency limit, TAKE_SLOT_LOCKS serializes the claims of each type (or key)
-- and RUNNING_IN_SLOTS counts their slots in use, in a statement of its own so its snapshot sees
-- every claim that held a lock before; TAKE_TYPE_TOKEN takes a start from a type's rate; then
-- one CLAIM_JOBS claims those that fit (:checked). HOLD_JOB puts each of the others back.
-- A slot is a running job under a live lease: a consumer that dies frees it as the lease
-- expires, with nothing to clean up.
WITH queue AS MATERIALIZED (
    SELECT paused_at IS NOT NULL AS paused FROM jobrelay.queues
    WHERE name = CAST(:queue AS text) FOR KEY SHARE
)
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, j.concurrency_key,
       coalesce((SELECT paused FROM queue), false) AS queue_paused,
       j.attempts < j.max_attempts
           AND ((state IN ('queued', 'retrying', 'sleeping') AND available_at <= now())
                OR (state = 'running' AND lease_until < now()))
           AND (j.workflow_id IS NULL OR NOT EXISTS (
               SELECT 1 FROM jobrelay.workflows w
               WHERE w.id = j.workflow_id AND w.cancelled_at IS NOT NULL))
           AS claimable,
       l.type IS NOT NULL AS has_runtime_limit, l.concurrency, l.rate_count,
       l.rate_period_seconds, l.per_key, j.wake_at, j.waiting_on, j.parent_job_id,
       -- as CLAIM_JOBS returns them: a claim found already made under the caller's token (its
       -- answer lost) must bring the job's recorded steps too
       (SELECT jsonb_agg(to_jsonb(s) - 'job_id' ORDER BY s.at, s.name)
        FROM jobrelay.job_steps s WHERE s.job_id = j.id) AS steps
FROM jobrelay.jobs j LEFT JOIN jobrelay.type_limits l ON l.type = j.type
WHERE j.id = ANY(CAST(:ids AS uuid[]))
  AND (SELECT count(*) FROM queue) >= 0  -- the queue's row is locked before the jobs'
ORDER BY j.id
FOR UPDATE OF j;

-- name: take_slot_locks
-- One lock per type and limit key ('' for the whole type), released at COMMIT (a transaction's
-- lock, never a session's: a pooler such as PgBouncer may hand the session to another client).
-- Taken in the order of the locks' own numbers, in every transaction, so two claims that share
-- slots wait for each other instead of deadlocking (OFFSET 0: the subquery stays ordered below
-- the function calls).
SELECT pg_advisory_xact_lock(s.type_hash, s.key_hash)
FROM (SELECT DISTINCT hashtext(type) AS type_hash, hashtext(key) AS key_hash
      FROM unnest(CAST(:types AS text[]), CAST(:keys AS text[])) AS s(type, key)
      ORDER BY 1, 2 OFFSET 0) s;

-- name: running_in_slots
-- Each asked slot's slots in use: running jobs of the type (and key, when per key; '' is a job
-- without one) under a live lease (ix_jobs_running_type_key); and how many of its jobs hold an
-- expired lease, the jobs being claimed (:except_ids) aside: the claim frees those first
-- (RESCUE_EXPIRED_LEASES), so that a slot freed by an expiry is journaled before it is taken.
-- That is rare: the rescue runs only for a slot that has one.
SELECT s.type, s.key,
       count(j.id) FILTER (WHERE j.lease_until > now()) AS running,
       count(j.id) FILTER (WHERE j.lease_until < now()
                             AND NOT (j.id = ANY(CAST(:except_ids AS uuid[])))) AS expired
FROM unnest(CAST(:types AS text[]), CAST(:keys AS text[]), CAST(:per_keys AS boolean[]))
     AS s(type, key, per_key)
LEFT JOIN jobrelay.jobs j
  ON j.type = s.type AND j.state = 'running'
 AND (NOT s.per_key OR j.concurrency_key = s.key
      OR (s.key = '' AND j.concurrency_key IS NULL))
GROUP BY s.type, s.key;

-- name: take_type_token
-- A start from the type's (or key's) rate: the generic cell rate algorithm of TAKE_RATE_TOKEN
-- with no burst, so starts are at least :interval seconds apart by the database's clock (the
-- statement's, as the claim's journal entry) and at most the rate's count start in any period,
-- over every consumer. Concurrent takers serialize on the row (ON CONFLICT DO UPDATE waits, then
-- sees the latest). Not taken: the row stays locked by this transaction, and TYPE_TOKEN_WAIT
-- reads when the next start is free.
INSERT INTO jobrelay.type_rate_buckets AS b (type, key, allowed_from)
VALUES (:type, :key, clock_timestamp() + make_interval(secs => CAST(:interval AS float8)))
ON CONFLICT (type, key) DO UPDATE
SET allowed_from = greatest(b.allowed_from, clock_timestamp())
                   + make_interval(secs => CAST(:interval AS float8))
WHERE b.allowed_from <= clock_timestamp()
RETURNING allowed_from;

-- name: type_token_wait
SELECT greatest(EXTRACT(EPOCH FROM allowed_from - clock_timestamp())::float8, 0)
       AS wait_seconds
FROM jobrelay.type_rate_buckets WHERE type = :type AND key = :key;

-- name: hold_job
-- makes: hold hold_abandoned wake
-- A due job put back without a claim (its queue paused, its type or key at a limit): due again
-- after :delay_seconds with a new outbox row, a `held` event saying why, attempts untouched; a
-- job whose lease expired is `queued` again (its expiry journaled first); a sleeper whose time
-- has come is woken into the hold (`queued`, its `woke` entry first): it sleeps no more, it
-- waits like any due job.
WITH before AS (
    SELECT id, state AS previous_state FROM jobrelay.jobs WHERE id = :id FOR UPDATE
), held AS (
    UPDATE jobrelay.jobs j
    SET state = CASE WHEN b.previous_state IN ('running', 'sleeping')
                     THEN 'queued' ELSE j.state END,
        lease_token = NULL, lease_until = NULL, wake_at = NULL, waiting_on = NULL,
        available_at = clock_timestamp()
                       + make_interval(secs => CAST(:delay_seconds AS float8)),
        updated_at = now()
    FROM before b
    WHERE j.id = b.id AND j.attempts < j.max_attempts
      AND ((state IN ('queued', 'retrying') AND available_at <= now())
           OR (state IN ('sleeping') AND available_at <= now())
           OR (state = 'running' AND lease_until < now()))
    RETURNING j.id, j.attempts, j.available_at, j.priority, j.client_id, j.type,
              b.previous_state
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM held
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'lease_expired', attempts, 'lease expired; held by a consumer'
    FROM held WHERE previous_state = 'running'
    UNION ALL
    SELECT id, 'woke', attempts, 'its time came; held by a consumer'
    FROM held WHERE previous_state = 'sleeping'
    UNION ALL
    SELECT id, 'held', attempts,
           CAST(:detail AS text) || '; due again at '
           || to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
    FROM held
)
SELECT id, available_at FROM held;

-- name: parent_results
-- A claimed job's parents' results, by ref: ``context.parent_results``.
SELECT p.workflow_ref AS ref, r.result
FROM jobrelay.job_dependencies d JOIN jobrelay.jobs p ON p.id = d.parent_id
LEFT JOIN jobrelay.job_results r ON r.job_id = p.id
WHERE d.job_id = :job_id;

-- name: report_progress
-- What handlers last reported of their progress, for a group of running jobs (at most a few
-- times a second each: consumer/progress.py), fenced by each row's lease token. Not a
-- transition: the state is untouched.
UPDATE jobrelay.jobs j SET progress = a.progress
FROM unnest(CAST(:ids AS uuid[]), CAST(:lease_tokens AS uuid[]),
            CAST(:progress AS jsonb[])) AS a(id, lease_token, progress)
WHERE j.id = a.id AND j.lease_token = a.lease_token AND j.state = 'running'
RETURNING j.id;
