-- The accept of a submission under order and submission policies (db/policed_accept.py;
-- docs/flow-control.md): a sequence, a deduplication window, a debounce, a reject of
-- duplicates, a throttle. A plain submission never runs these (db/sql/accept.sql).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: take_policy_locks
-- The first statement of a policed accept's transaction: the transaction-scoped advisory locks
-- of its keys, in the order given (a throttle's, then a unique key's, then a sequence's), so
-- two accepts of one key run one after the other and every later statement of the transaction
-- sees what the one before committed. The sequence release (RELEASE_SEQUENCES) takes the same
-- sequence locks; it holds no job row an accept waits for, so no cycle can form.
SELECT count(pg_advisory_xact_lock(hashtextextended(k.key, 41))) AS locked
FROM unnest(CAST(:keys AS text[])) WITH ORDINALITY AS k(key, n);

-- name: unique_key_holder
-- The job that answers a unique submission: the live job of its client, type and unique key,
-- else, with a window (:window_seconds, NULL: none), the latest that ended within it by any end
-- but `cancelled`.
SELECT j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
       j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
       j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
       j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
       j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts, r.result,
       j.sequence_key
FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.client_id = :client_id AND j.type = :type AND j.unique_key = :unique_key
  AND (j.state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
       OR (CAST(:window_seconds AS float8) IS NOT NULL AND j.finished_at IS NOT NULL
           AND j.state <> 'cancelled'
           AND j.finished_at > now() - make_interval(secs => CAST(:window_seconds AS float8))))
ORDER BY j.finished_at DESC NULLS FIRST
LIMIT 1;

-- name: debounce_job
-- A debounce: the key's queued job that has not started takes the submission's payload, and
-- its start moves to now + :debounce_seconds, never past its first submission + :max_seconds
-- (NULL: no bound); its outbox row, never leased, moves with it. Nothing else of the job
-- changes (its idempotency key is its first submission's). A job that started, or that the
-- relay took, is not moved (no row comes back), nor is one waiting in a sequence (it has no
-- outbox row yet: its start is the sequence's).
WITH due AS (
    -- The outbox row is locked with the job: a relay's lease under way is waited for and
    -- re-read (then the job is not moved), and a lease that comes later skips it.
    SELECT j.id, least(now() + make_interval(secs => :debounce_seconds),
                       j.created_at + make_interval(secs => CAST(:max_seconds AS float8)))
               AS at
    FROM jobrelay.jobs j JOIN jobrelay.outbox o ON o.job_id = j.id
    WHERE j.id = :id AND j.state = 'queued' AND j.attempts = 0
      AND o.publish_attempts = 0 AND o.published_at IS NULL
    FOR NO KEY UPDATE
), moved AS (
    UPDATE jobrelay.jobs j
    SET payload = CAST(:payload AS jsonb), run_at = d.at, available_at = d.at, updated_at = now()
    FROM due d WHERE j.id = d.id
    RETURNING j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
              j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
              j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at,
              j.run_at, j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key,
              j.unique_key, j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts,
              j.sequence_key, NULL::jsonb AS result
), outbox_moved AS (
    UPDATE jobrelay.outbox o SET available_at = m.available_at
    FROM moved m WHERE o.job_id = m.id AND o.publish_attempts = 0 AND o.published_at IS NULL
)
SELECT * FROM moved;

-- name: hand_over_unique_key
-- A debounce whose key's job has started (or was taken by the relay): that job keeps running
-- without the key, which passes to the job this submission makes (it runs after the edits
-- stop, with the last payload).
UPDATE jobrelay.jobs SET unique_key = NULL, updated_at = now()
WHERE id = :id AND state IN ('queued', 'running', 'retrying', 'waiting', 'sleeping')
RETURNING id;

-- name: take_throttle
-- A throttled type's submission, counted under its key ('' for none) against the throttle in
-- force: the runtime one (``type_limits``) while set, else the code's (:count per
-- :period_seconds). Under the key's lock (TAKE_POLICY_LOCKS): the accepts of the last period
-- are counted, and one more is recorded when they are fewer than the count; else nothing is
-- written and ``retry_after`` says when the oldest leaves the period. The ones older than the
-- period are deleted on the way.
WITH throttle AS (
    SELECT coalesce(l.throttle_count, CAST(:count AS int)) AS count,
           coalesce(l.throttle_period_seconds, CAST(:period_seconds AS int)) AS period_seconds
    FROM (SELECT 1) AS one
    LEFT JOIN jobrelay.type_limits l ON l.type = :type AND l.throttle_count IS NOT NULL
), gone AS (
    DELETE FROM jobrelay.throttle_accepts a USING throttle t
    WHERE a.type = :type AND a.key = :key
      AND a.at <= now() - make_interval(secs => t.period_seconds)
), counted AS (
    SELECT t.count, t.period_seconds, count(a.at) AS n, min(a.at) AS oldest
    FROM throttle t LEFT JOIN jobrelay.throttle_accepts a
      ON a.type = :type AND a.key = :key
     AND a.at > now() - make_interval(secs => t.period_seconds)
    GROUP BY t.count, t.period_seconds
), taken AS (
    INSERT INTO jobrelay.throttle_accepts (type, key)
    SELECT :type, :key FROM counted WHERE count IS NULL OR n < count
    RETURNING at
)
SELECT (SELECT count(*) FROM taken) > 0 AS taken, c.count, c.period_seconds,
       extract(epoch FROM c.oldest + make_interval(secs => c.period_seconds) - now())
           AS retry_after
FROM counted c;

-- name: accept_policed_job
-- ACCEPT_JOB with a sequence: its place (the order of acceptance: the accept holds its key's
-- lock) and, when a job of its key has not yet succeeded or been cancelled, ``sequence_waits``
-- and no outbox row (the end of the job ahead releases it: RELEASE_SEQUENCES). The sequence's
-- jobs are read in a statement of their own, after the lock, so none committed before it is
-- missed.
WITH j AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
                      max_attempts, run_at, available_at, traceparent, priority,
                      concurrency_key, unique_key, sequence_key, sequence_no, sequence_waits)
    SELECT :id, :client_id, :idempotency_key, :request_hash, :type,
           CAST(:payload AS jsonb), :max_attempts, due.at, coalesce(due.at, now()),
           CAST(:traceparent AS text), CAST(:priority AS smallint),
           CAST(:concurrency_key AS text), CAST(:unique_key AS text),
           CAST(:sequence_key AS text),
           CASE WHEN CAST(:sequence_key AS text) IS NOT NULL
                THEN nextval('jobrelay.job_sequence_order') END,
           CAST(:sequence_key AS text) IS NOT NULL AND EXISTS (
               SELECT 1 FROM jobrelay.jobs a
               WHERE a.client_id = :client_id AND a.sequence_key = CAST(:sequence_key AS text)
                 AND a.state NOT IN ('succeeded', 'cancelled'))
    FROM (SELECT coalesce(CAST(:run_at AS timestamptz),
                          now() + make_interval(secs => CAST(:delay_seconds AS float8)))
                 AS at) AS due
    ON CONFLICT DO NOTHING
    RETURNING id, created_at, updated_at, available_at, priority, client_id, type,
              sequence_waits
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM j WHERE NOT sequence_waits
)
SELECT created_at, updated_at, available_at, sequence_waits FROM j;

-- name: take_sequence_locks
-- The advisory locks of the sequences of the jobs :ids (none for jobs without one), in one
-- order, as TAKE_POLICY_LOCKS names them (db/policed_accept.py::sequence_lock_key): the first
-- statement of a transaction that ends a job of a sequence (a finish, a cancel), before
-- RELEASE_SEQUENCES. A finish takes them after its jobs' rows, which no accept ever waits
-- for while it holds one of these.
SELECT count(pg_advisory_xact_lock(hashtextextended(k.lock_key, 41))) AS locked
FROM (SELECT DISTINCT concat_ws(E'\x1f', 'sequence', CAST(client_id AS text), sequence_key)
          AS lock_key
      FROM jobrelay.jobs
      WHERE id = ANY(CAST(:ids AS uuid[])) AND sequence_key IS NOT NULL
      ORDER BY 1) AS k;

-- name: release_sequences
-- The sequences of the jobs :ids, after one of them ended, under their locks
-- (TAKE_SEQUENCE_LOCKS) and in a statement of its own, so every job an accept put behind
-- them is seen: in each sequence, the first job (by acceptance) that has not succeeded or
-- been cancelled, when it waits, is let go: its outbox row and a `released` entry. When the
-- first is running, retrying, asleep or quarantined (it blocks the sequence), nothing moves.
-- Not a transition: the job stays `queued`, due at its own time.
WITH keyset AS (
    SELECT DISTINCT client_id, sequence_key FROM jobrelay.jobs
    WHERE id = ANY(CAST(:ids AS uuid[])) AND sequence_key IS NOT NULL
), head AS (
    SELECT h.id FROM keyset k CROSS JOIN LATERAL (
        SELECT j.id, j.sequence_waits FROM jobrelay.jobs j
        WHERE j.client_id = k.client_id AND j.sequence_key = k.sequence_key
          AND j.state NOT IN ('succeeded', 'cancelled')
        ORDER BY j.sequence_no LIMIT 1) h
    WHERE h.sequence_waits
), released AS (
    UPDATE jobrelay.jobs j SET sequence_waits = false, updated_at = now()
    FROM head WHERE j.id = head.id AND j.sequence_waits AND j.state = 'queued'
    RETURNING j.id, j.attempts, j.available_at, j.priority, j.client_id, j.type, j.sequence_key
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
    SELECT id, available_at, priority, client_id, type FROM released
), event AS (
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'released', attempts,
           'the job ahead of it in sequence ' || sequence_key || ' ended'
    FROM released
)
SELECT id FROM released;
