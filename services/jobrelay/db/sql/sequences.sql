-- The sequences, the operators' side (db/sequence_store.py; docs/flow-control.md): the keys
-- with jobs waiting in line, and the quarantined job that blocks one.
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: waiting_sequences
-- Every sequence with jobs waiting behind its head (``sequence_waits``: accepted while a job
-- of the key had not succeeded or been cancelled), with its client's name, how many wait, and
-- ``blocked_by``: the head when it is quarantined (it holds the key until it is replayed and
-- succeeds, or is cancelled), else null. :blocked true: the blocked ones only. Blocked first,
-- then the longest lines, at most :limit. Both reads go through the partial index
-- ix_jobs_sequence_unfinished (the unfinished jobs of sequences): plain jobs are never read.
WITH lines AS (
    SELECT client_id, sequence_key, count(*) AS waiting
    FROM jobrelay.jobs
    WHERE sequence_key IS NOT NULL AND state NOT IN ('succeeded', 'cancelled')
      AND sequence_waits
    GROUP BY client_id, sequence_key
), headed AS (
    SELECT l.client_id, l.sequence_key, l.waiting,
           CASE WHEN h.state = 'quarantined' THEN h.id END AS blocked_by
    FROM lines l CROSS JOIN LATERAL (
        SELECT j.id, j.state FROM jobrelay.jobs j
        WHERE j.client_id = l.client_id AND j.sequence_key = l.sequence_key
          AND j.sequence_key IS NOT NULL AND j.state NOT IN ('succeeded', 'cancelled')
        ORDER BY j.sequence_no LIMIT 1) AS h
)
SELECT c.name AS client, s.sequence_key AS key, s.blocked_by, s.waiting
FROM headed s JOIN jobrelay.clients c ON c.id = s.client_id
WHERE NOT CAST(:blocked AS boolean) OR s.blocked_by IS NOT NULL
ORDER BY s.blocked_by IS NULL, s.waiting DESC, c.name, s.sequence_key
LIMIT :limit;
