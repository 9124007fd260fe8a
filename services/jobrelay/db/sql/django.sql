-- Django's Tasks framework (jobrelay/django/backend.py; docs/django.md).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: django_task_result
-- One job as a Django TaskResult shows it, if :client (a client's name or id) owns it: the job
-- and its stored result, when each attempt started (the journal's claims, job_journal, whose
-- detail names the consumer: Django's worker_ids), and every failed attempt's error document.
SELECT j.id, j.type, j.payload, j.state, j.attempts, j.created_at, j.finished_at,
       r.result,
       coalesce((SELECT array_agg(e.at ORDER BY e.seq, e.at) FROM jobrelay.job_journal e
                 WHERE e.job_id = j.id AND e.event = 'claimed'), '{}') AS claimed_at,
       coalesce((SELECT array_agg(coalesce(e.detail, '') ORDER BY e.seq, e.at)
                 FROM jobrelay.job_journal e
                 WHERE e.job_id = j.id AND e.event = 'claimed'), '{}') AS claimed_by,
       coalesce((SELECT jsonb_agg(e.error ORDER BY e.id) FROM jobrelay.job_events e
                 WHERE e.job_id = j.id AND e.error IS NOT NULL), '[]') AS errors
FROM jobrelay.jobs j
JOIN jobrelay.clients c ON c.id = j.client_id
LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
WHERE j.id = CAST(:id AS uuid) AND (c.name = :client OR CAST(c.id AS text) = :client);
