-- The work queues' figures (db/queue_store.py, db/flow_store.py, db/relay_store.py).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: queues
SELECT name, paused_at IS NOT NULL AS paused FROM jobrelay.queues ORDER BY name;

-- name: queue_backlogs
-- Per work queue (short name; ``:route_types``/``:route_queues`` is JOBRELAY_TYPE_QUEUES), the
-- due, unpublished rows not leased right now: the backlog the window, a pause or a limit holds.
SELECT coalesce(r.queue, 'default') AS queue, count(*) AS n
FROM jobrelay.outbox o
LEFT JOIN jobrelay.jobs j ON o.type IS NULL AND j.id = o.job_id
LEFT JOIN unnest(CAST(:route_types AS text[]), CAST(:route_queues AS text[]))
          AS r(type, queue) ON r.type = coalesce(o.type, j.type)
WHERE o.published_at IS NULL AND o.available_at <= now()
GROUP BY 1;

-- name: queue_running
-- Running jobs per work queue (through ix_jobs_running_type_key).
SELECT coalesce(r.queue, 'default') AS queue, count(*) AS n
FROM jobrelay.jobs j
LEFT JOIN unnest(CAST(:route_types AS text[]), CAST(:route_queues AS text[]))
          AS r(type, queue) ON r.type = j.type
WHERE j.state = 'running'
GROUP BY 1;
