-- The relay: the outbox leased, published and kept (db/relay_store.py; docs/life-of-a-job.md,
-- "2. Relay"; the flow pick: docs/flow-control.md).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: lease_outbox_batch
-- Lease a batch of due rows: lock them briefly, push their available_at past the publish
-- timeout, and commit at once. The broker round trip happens with no transaction open; another
-- dispatcher skips these rows until the lease passes, and a crashed dispatcher's rows simply
-- come due again (a duplicate publish, never a lost one).
--
-- Each row's `published` journal entry (MARK_PUBLISHED writes it once the broker confirmed)
-- is decided here: the journal reads in id order, and a consumer can claim the job before the
-- confirm is recorded, so the entry's id (journal_id) is drawn here, in the lease's
-- transaction, which commits before the message exists, and it is dated by the lease
-- (leased_at: the database's clock, like every journal entry). It carries the attempt the
-- message delivers (delivers_attempt): the job's next one while it is due and has one left (a
-- lease-expired or exhausted job's message delivers no new one). The flow picks return the same.
WITH unsynced AS (
    -- The lease's commit waits for no WAL flush (an fsync: most of the lease's time in the
    -- path of a job). A lease lost in a crash only makes its rows due again, a duplicate
    -- publish at worst, as after a dispatcher's crash; and any later flushed commit (the
    -- claim, the mark) flushes this one first, the WAL being one sequence.
    SELECT set_config('synchronous_commit', 'off', true)
), due AS (
    SELECT id FROM jobrelay.outbox
    WHERE published_at IS NULL AND available_at <= now()
    ORDER BY available_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE jobrelay.outbox o
SET available_at = now() + make_interval(secs => :lease_seconds),
    publish_attempts = o.publish_attempts + 1
FROM due, jobrelay.jobs j, unsynced
WHERE o.id = due.id AND j.id = o.job_id
RETURNING o.id, o.job_id, j.type, o.publish_attempts, j.traceparent,
          nextval('jobrelay.job_events_id_seq') AS journal_id, now() AS leased_at,
          CASE WHEN j.state IN ('queued', 'retrying', 'sleeping')
                    AND j.attempts < j.max_attempts
               THEN j.attempts + 1 ELSE j.attempts END AS delivers_attempt;

-- name: lease_flow_pick
-- The flow pick of one work queue: due rows in priority order (higher first), round-robin among
-- the clients with due rows within a priority, then due order. A recursive skip scan finds the
-- clients with due rows (ix_outbox_client_priority_due, one probe per client), a LATERAL pick
-- per client reads that client's best :limit rows from the same index, and ``turn`` (the row's
-- rank within its client and priority) interleaves them. Rows whose (type, key) is at its
-- concurrency limit (running jobs holding a live lease, through ix_jobs_running_type_key) or
-- over its rate (type_rate_buckets) are skipped; within the pick at most the free slots (and
-- one period's rate) of a (type, key) are taken. Rows written before migration 0007 carry no
-- type or client: they are read with their job (ix_outbox_legacy_unpublished), as one more
-- client. Limits are approximate here: the consumer enforces them exactly at claim. Each row
-- returns its place (priority, turn, due time): the relay publishes in that order. The lease
-- itself is LEASE_OUTBOX_BATCH's: locked with SKIP LOCKED and re-checked under the lock, so
-- several dispatchers never lease a row twice.
--
-- A row's type is routed to the picked queue when it is one of :queue_types (the types
-- JOBRELAY_TYPE_QUEUES sends there), or, for ``default`` (:is_default), any type not sent
-- elsewhere (:other_types). The key a row counts under is its job's concurrency key when its
-- type's limit is per key (:per_key_types; '' without one), else '' (core/flow.py::limit_key).
-- This pick reads no key and skips nothing per key (no limit is in force): a filter there
-- alone would make the planner misjudge the scan (a bitmap scan and a sort of the client's
-- whole backlog). LEASE_FLOW_PICK_LIMITED is the same pick with those.
WITH RECURSIVE unsynced AS (
    -- The lease's commit waits for no WAL flush: see LEASE_OUTBOX_BATCH.
    SELECT set_config('synchronous_commit', 'off', true)
), limits AS (
    SELECT * FROM unnest(
        CAST(:limit_types AS text[]), CAST(:limit_concurrency AS integer[]),
        CAST(:limit_burst AS integer[])
    ) AS l(type, concurrency, burst)
), running AS (
    SELECT r.type,
           CASE WHEN r.type = ANY(CAST(:per_key_types AS text[]))
                THEN coalesce(r.concurrency_key, '') ELSE '' END AS key,
           count(*) AS n
    FROM limits l JOIN jobrelay.jobs r ON r.type = l.type
    WHERE l.concurrency IS NOT NULL AND r.state = 'running' AND r.lease_until > now()
    GROUP BY 1, 2
), blocked AS (
    SELECT r.type, r.key FROM running r JOIN limits l ON l.type = r.type
    WHERE r.n >= l.concurrency
    UNION
    SELECT b.type, b.key FROM limits l JOIN jobrelay.type_rate_buckets b ON b.type = l.type
    WHERE l.burst IS NOT NULL AND b.allowed_from > now()
), senders AS (
    (SELECT o.client_id FROM jobrelay.outbox o
     WHERE o.published_at IS NULL AND o.client_id IS NOT NULL AND o.available_at <= now()
     ORDER BY o.client_id LIMIT 1)
    UNION ALL
    SELECT (SELECT o.client_id FROM jobrelay.outbox o
            WHERE o.published_at IS NULL AND o.client_id > c.client_id
              AND o.available_at <= now()
            ORDER BY o.client_id LIMIT 1)
    FROM senders c WHERE c.client_id IS NOT NULL
), candidates AS (
    SELECT p.* FROM senders c CROSS JOIN LATERAL (
        SELECT s.id, s.client_id, s.priority, s.available_at, s.type, k.key
        FROM (
            SELECT o.id, o.job_id, o.client_id, o.priority, o.available_at, o.type
            FROM jobrelay.outbox o
            WHERE o.client_id = c.client_id AND o.published_at IS NULL
              AND o.available_at <= now() AND o.type IS NOT NULL
              AND (o.type = ANY(CAST(:queue_types AS text[]))
                   OR (CAST(:is_default AS boolean)
                       AND NOT (o.type = ANY(CAST(:other_types AS text[])))))
            ORDER BY o.priority DESC, o.available_at
            LIMIT :lookahead
        ) s CROSS JOIN LATERAL (SELECT '' AS key) k
        ORDER BY s.priority DESC, s.available_at
        LIMIT :limit
    ) p
    WHERE c.client_id IS NOT NULL
    UNION ALL
    (SELECT o.id, o.client_id, o.priority, o.available_at, j.type, k.key
     FROM jobrelay.outbox o JOIN jobrelay.jobs j ON j.id = o.job_id
     CROSS JOIN LATERAL (SELECT CASE WHEN j.type = ANY(CAST(:per_key_types AS text[]))
                                     THEN coalesce(j.concurrency_key, '') ELSE '' END AS key) k
     WHERE o.published_at IS NULL AND (o.type IS NULL OR o.client_id IS NULL)
       AND o.available_at <= now()
       AND (j.type = ANY(CAST(:queue_types AS text[]))
            OR (CAST(:is_default AS boolean)
                AND NOT (j.type = ANY(CAST(:other_types AS text[])))))
       AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.type = j.type AND b.key = k.key)
     ORDER BY o.available_at
     LIMIT :limit)
), ranked AS (
    SELECT cd.id, cd.priority, cd.available_at,
           row_number() OVER (PARTITION BY cd.client_id, cd.priority
                              ORDER BY cd.available_at, cd.id) AS turn,
           row_number() OVER (PARTITION BY cd.type, cd.key
                              ORDER BY cd.priority DESC, cd.available_at, cd.id) AS nth,
           l.concurrency - coalesce(r.n, 0) AS free, l.burst
    FROM candidates cd
    LEFT JOIN limits l ON l.type = cd.type
    LEFT JOIN running r ON r.type = cd.type AND r.key = cd.key
), top AS (
    SELECT rk.id, rk.priority, rk.turn, rk.available_at FROM ranked rk
    WHERE (rk.free IS NULL OR rk.nth <= rk.free) AND (rk.burst IS NULL OR rk.nth <= rk.burst)
    ORDER BY rk.priority DESC, rk.turn, rk.available_at, rk.id
    LIMIT :limit
), due AS (
    SELECT o.id FROM jobrelay.outbox o
    WHERE o.id = ANY(ARRAY(SELECT id FROM top))
      AND o.published_at IS NULL AND o.available_at <= now()
    FOR UPDATE SKIP LOCKED
)
UPDATE jobrelay.outbox o
SET available_at = now() + make_interval(secs => :lease_seconds),
    publish_attempts = o.publish_attempts + 1
FROM top, jobrelay.jobs j, unsynced
WHERE o.id = ANY(ARRAY(SELECT id FROM due)) AND top.id = o.id AND j.id = o.job_id
RETURNING o.id, o.job_id, j.type, o.publish_attempts, j.traceparent,
          nextval('jobrelay.job_events_id_seq') AS journal_id, now() AS leased_at,
          CASE WHEN j.state IN ('queued', 'retrying', 'sleeping')
                    AND j.attempts < j.max_attempts
               THEN j.attempts + 1 ELSE j.attempts END AS delivers_attempt,
          top.priority, top.turn, top.available_at AS due_at;

-- name: lease_flow_pick_limited
-- LEASE_FLOW_PICK while any limit is in force: the same pick that also reads each candidate's
-- key (its job's, for a per-key limit) and skips blocked keys. The per-client pick is an
-- ordered index scan either way: a type blocked as a whole is filtered in it (no join), a
-- blocked key among the client's next :lookahead rows after it.
WITH RECURSIVE unsynced AS (
    -- The lease's commit waits for no WAL flush: see LEASE_OUTBOX_BATCH.
    SELECT set_config('synchronous_commit', 'off', true)
), limits AS (
    SELECT * FROM unnest(
        CAST(:limit_types AS text[]), CAST(:limit_concurrency AS integer[]),
        CAST(:limit_burst AS integer[])
    ) AS l(type, concurrency, burst)
), running AS (
    SELECT r.type,
           CASE WHEN r.type = ANY(CAST(:per_key_types AS text[]))
                THEN coalesce(r.concurrency_key, '') ELSE '' END AS key,
           count(*) AS n
    FROM limits l JOIN jobrelay.jobs r ON r.type = l.type
    WHERE l.concurrency IS NOT NULL AND r.state = 'running' AND r.lease_until > now()
    GROUP BY 1, 2
), blocked AS (
    SELECT r.type, r.key FROM running r JOIN limits l ON l.type = r.type
    WHERE r.n >= l.concurrency
    UNION
    SELECT b.type, b.key FROM limits l JOIN jobrelay.type_rate_buckets b ON b.type = l.type
    WHERE l.burst IS NOT NULL AND b.allowed_from > now()
), senders AS (
    (SELECT o.client_id FROM jobrelay.outbox o
     WHERE o.published_at IS NULL AND o.client_id IS NOT NULL AND o.available_at <= now()
     ORDER BY o.client_id LIMIT 1)
    UNION ALL
    SELECT (SELECT o.client_id FROM jobrelay.outbox o
            WHERE o.published_at IS NULL AND o.client_id > c.client_id
              AND o.available_at <= now()
            ORDER BY o.client_id LIMIT 1)
    FROM senders c WHERE c.client_id IS NOT NULL
), candidates AS (
    SELECT p.* FROM senders c CROSS JOIN LATERAL (
        SELECT s.id, s.client_id, s.priority, s.available_at, s.type, k.key
        FROM (
            SELECT o.id, o.job_id, o.client_id, o.priority, o.available_at, o.type
            FROM jobrelay.outbox o
            WHERE o.client_id = c.client_id AND o.published_at IS NULL
              AND o.available_at <= now() AND o.type IS NOT NULL
              AND (o.type = ANY(CAST(:queue_types AS text[]))
                   OR (CAST(:is_default AS boolean)
                       AND NOT (o.type = ANY(CAST(:other_types AS text[])))))
              AND NOT (o.type = ANY(ARRAY(
                  SELECT b.type FROM blocked b
                  WHERE b.key = '' AND NOT (b.type = ANY(CAST(:per_key_types AS text[]))))))
            ORDER BY o.priority DESC, o.available_at
            LIMIT :lookahead
        ) s CROSS JOIN LATERAL (
            SELECT CASE WHEN s.type = ANY(CAST(:per_key_types AS text[]))
                        THEN coalesce((SELECT j.concurrency_key FROM jobrelay.jobs j
                                       WHERE j.id = s.job_id), '')
                        ELSE '' END AS key
        ) k
        WHERE NOT EXISTS (SELECT 1 FROM blocked b WHERE b.type = s.type AND b.key = k.key)
        ORDER BY s.priority DESC, s.available_at
        LIMIT :limit
    ) p
    WHERE c.client_id IS NOT NULL
    UNION ALL
    (SELECT o.id, o.client_id, o.priority, o.available_at, j.type, k.key
     FROM jobrelay.outbox o JOIN jobrelay.jobs j ON j.id = o.job_id
     CROSS JOIN LATERAL (SELECT CASE WHEN j.type = ANY(CAST(:per_key_types AS text[]))
                                     THEN coalesce(j.concurrency_key, '') ELSE '' END AS key) k
     WHERE o.published_at IS NULL AND (o.type IS NULL OR o.client_id IS NULL)
       AND o.available_at <= now()
       AND (j.type = ANY(CAST(:queue_types AS text[]))
            OR (CAST(:is_default AS boolean)
                AND NOT (j.type = ANY(CAST(:other_types AS text[])))))
       AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.type = j.type AND b.key = k.key)
     ORDER BY o.available_at
     LIMIT :limit)
), ranked AS (
    SELECT cd.id, cd.priority, cd.available_at,
           row_number() OVER (PARTITION BY cd.client_id, cd.priority
                              ORDER BY cd.available_at, cd.id) AS turn,
           row_number() OVER (PARTITION BY cd.type, cd.key
                              ORDER BY cd.priority DESC, cd.available_at, cd.id) AS nth,
           l.concurrency - coalesce(r.n, 0) AS free, l.burst
    FROM candidates cd
    LEFT JOIN limits l ON l.type = cd.type
    LEFT JOIN running r ON r.type = cd.type AND r.key = cd.key
), top AS (
    SELECT rk.id, rk.priority, rk.turn, rk.available_at FROM ranked rk
    WHERE (rk.free IS NULL OR rk.nth <= rk.free) AND (rk.burst IS NULL OR rk.nth <= rk.burst)
    ORDER BY rk.priority DESC, rk.turn, rk.available_at, rk.id
    LIMIT :limit
), due AS (
    SELECT o.id FROM jobrelay.outbox o
    WHERE o.id = ANY(ARRAY(SELECT id FROM top))
      AND o.published_at IS NULL AND o.available_at <= now()
    FOR UPDATE SKIP LOCKED
)
UPDATE jobrelay.outbox o
SET available_at = now() + make_interval(secs => :lease_seconds),
    publish_attempts = o.publish_attempts + 1
FROM top, jobrelay.jobs j, unsynced
WHERE o.id = ANY(ARRAY(SELECT id FROM due)) AND top.id = o.id AND j.id = o.job_id
RETURNING o.id, o.job_id, j.type, o.publish_attempts, j.traceparent,
          nextval('jobrelay.job_events_id_seq') AS journal_id, now() AS leased_at,
          CASE WHEN j.state IN ('queued', 'retrying', 'sleeping')
                    AND j.attempts < j.max_attempts
               THEN j.attempts + 1 ELSE j.attempts END AS delivers_attempt,
          top.priority, top.turn, top.available_at AS due_at;

-- name: mark_published
-- The confirmed rows of a batch, each as LEASE returned it. The row is its own `published`
-- entry (JOB_EVENTS): it keeps the journal id and the time its lease drew, and the attempt it
-- delivers (see LEASE_OUTBOX_BATCH); a row marked by a caller that has none takes a new place.
UPDATE jobrelay.outbox o
SET published_at = now(), last_error = NULL,
    journal_id = coalesce(c.journal_id, nextval('jobrelay.job_events_id_seq')),
    leased_at = coalesce(c.leased_at, now()), delivers_attempt = c.attempt
FROM unnest(CAST(:ids AS bigint[]), CAST(:journal_ids AS bigint[]),
            CAST(:attempts AS integer[]), CAST(:leased_at AS timestamptz[]))
     AS c(id, journal_id, attempt, leased_at)
WHERE o.id = c.id AND o.published_at IS NULL
RETURNING o.job_id;

-- name: mark_publish_failed
UPDATE jobrelay.outbox
SET last_error = :error, available_at = now() + make_interval(secs => :retry_in_seconds)
WHERE id = ANY(:ids) AND published_at IS NULL;

-- name: next_outbox_due_in
SELECT EXTRACT(EPOCH FROM min(available_at) - now()) AS seconds
FROM jobrelay.outbox WHERE published_at IS NULL;

-- name: oldest_due_outbox_age
-- For the dispatcher's gauge: how long the oldest due, unpublished row has waited (0 if none).
-- Rows leased by a dispatcher are not due (their available_at moved forward), so a healthy relay
-- keeps this near zero however large its throughput.
SELECT coalesce(EXTRACT(EPOCH FROM now() - min(available_at)), 0) AS seconds
FROM jobrelay.outbox WHERE published_at IS NULL AND available_at <= now();

-- name: flow_controls
-- The operators' controls the dispatcher obeys, read every couple of seconds: the paused queues,
-- the runtime limits, and the types a running consumer serves (one row each; ``kind`` tells
-- which).
SELECT 'paused' AS kind, name, NULL::integer AS concurrency, NULL::integer AS rate_count,
       NULL::integer AS rate_period_seconds, false AS per_key
FROM jobrelay.queues WHERE paused_at IS NOT NULL
UNION ALL
SELECT 'limit', type, concurrency, rate_count, rate_period_seconds, per_key
FROM jobrelay.type_limits
UNION ALL
SELECT 'served', name, NULL, NULL, NULL, false
FROM jobrelay.job_types WHERE served_until > now();

-- name: register_queues
INSERT INTO jobrelay.queues (name) SELECT unnest(CAST(:names AS text[]))
ON CONFLICT (name) DO NOTHING;

-- name: rescue_expired_leases
-- makes: rescue
-- Back to `queued` with a new outbox row and one `lease_expired` event. The row lock and the
-- re-checked WHERE make it happen once per expiry however many dispatchers run.
WITH expired AS (
    SELECT id FROM jobrelay.jobs
    WHERE (state = 'running' AND lease_until < now())
      -- :type given: only the jobs of one concurrency slot (the exact claim frees them
      -- before it counts, so a slot freed by an expiry is journaled before it is taken)
      AND (CAST(:type AS text) IS NULL
           OR (type = :type AND id <> CAST(:except_id AS uuid)
               AND (NOT CAST(:per_key AS boolean) OR concurrency_key = CAST(:key AS text)
                    OR (CAST(:key AS text) = '' AND concurrency_key IS NULL))))
    ORDER BY lease_until
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE jobrelay.jobs j
    SET state = 'queued', lease_token = NULL, lease_until = NULL,
        available_at = now(), updated_at = now()
    FROM expired e WHERE j.id = e.id
    RETURNING j.id, j.attempts, j.priority, j.client_id, j.type
), new_outbox AS (
    INSERT INTO jobrelay.outbox (job_id, priority, client_id, type)
    SELECT id, priority, client_id, type FROM rescued
)
INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
SELECT id, 'lease_expired', attempts, :detail FROM rescued
RETURNING job_id;

-- name: delete_published_outbox
-- Retention of the published rows of live jobs (a finished job's go with it, DELETE_FINISHED_JOBS).
-- A row is the job's `published` entry (MARK_PUBLISHED), so the entry is journaled as it goes.
WITH gone AS (
    DELETE FROM jobrelay.outbox WHERE id IN (
        SELECT o.id FROM jobrelay.outbox o
        WHERE o.published_at IS NOT NULL
          AND o.published_at < now() - make_interval(secs => :retention_seconds)
          AND NOT EXISTS (SELECT 1 FROM jobrelay.jobs j
                          WHERE j.id = o.job_id AND j.finished_at IS NOT NULL)
        LIMIT :limit
    )
    RETURNING id, job_id, journal_id, leased_at, delivers_attempt
), kept AS (
    INSERT INTO jobrelay.job_events (seq, job_id, event, attempt, detail, at)
    SELECT journal_id, job_id, 'published', delivers_attempt, 'outbox ' || id, leased_at
    FROM gone WHERE journal_id IS NOT NULL
)
SELECT id FROM gone;

-- name: delete_finished_jobs
-- Retention of finished jobs: the oldest of one state, a batch at a time, through the index on
-- (state, finished_at); their outbox rows, journal and result go with them (ON DELETE
-- CASCADE, each through its job_id index) and ``job_totals`` is kept by its trigger. A live
-- job is never deleted: it keeps its whole story. A row being changed right now is skipped.
-- Nor is a quarantined job that blocks its sequence while jobs wait behind it: they wait for
-- its replay or its cancel, and nothing would release them once it was gone
-- (docs/flow-control.md, "Sequences"; through ix_jobs_sequence_unfinished).
DELETE FROM jobrelay.jobs WHERE id IN (
    SELECT j.id FROM jobrelay.jobs j
    WHERE j.state = :state AND j.finished_at IS NOT NULL
      AND j.finished_at < now() - make_interval(secs => :retention_seconds)
      AND NOT (j.sequence_key IS NOT NULL AND j.state = 'quarantined' AND EXISTS (
          SELECT 1 FROM jobrelay.jobs w
          WHERE w.client_id = j.client_id AND w.sequence_key = j.sequence_key
            AND w.state NOT IN ('succeeded', 'cancelled') AND w.sequence_waits))
    ORDER BY j.finished_at
    LIMIT :limit
    FOR UPDATE OF j SKIP LOCKED
);

-- name: fold_job_counts
-- The deltas folded into the totals, in one statement: the rows it deletes are exactly the
-- rows it adds (a delta appended meanwhile waits for the next fold; two dispatchers folding
-- at once never add a delta twice, as each deletes only rows it locked).
WITH folded AS (DELETE FROM jobrelay.job_count_deltas RETURNING state, code, n)
INSERT INTO jobrelay.job_totals AS t (state, code, n)
SELECT state, code, sum(n) FROM folded GROUP BY state, code
ON CONFLICT (state, code) DO UPDATE SET n = t.n + excluded.n
RETURNING 1;

-- name: report_broker_block
-- A dispatcher the broker blocks says so while it lasts: ``since`` stays from the first report,
-- ``seen_at`` moves with every one, so a dispatcher that stopped while blocked fades from the
-- stats (BROKER_BLOCKS) instead of being shown blocked forever.
INSERT INTO jobrelay.broker_blocks AS b (dispatcher, reason, since, seen_at)
VALUES (:dispatcher, :reason, now(), now())
ON CONFLICT (dispatcher) DO UPDATE
SET reason = excluded.reason, seen_at = now(),
    since = CASE WHEN b.reason = excluded.reason THEN b.since ELSE now() END;

-- name: clear_broker_block
DELETE FROM jobrelay.broker_blocks WHERE dispatcher = :dispatcher;
