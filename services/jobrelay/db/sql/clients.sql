-- Clients, their tokens and their submission limits (db/client_store.py; transactional.py reads
-- client_by_id_or_name).
--
-- Named statements, read by jobrelay/db/sql/__init__.py: each block is `-- name: <name>`, comment
-- lines saying what it does and why, then the statement, ending with `;`. Parameters are
-- `:name`. `python -m jobrelay.db.sql <name>` prints a statement exactly as it runs.

-- name: insert_client
INSERT INTO jobrelay.clients (id, name, token_hash, is_admin, type_patterns)
VALUES (:id, :name, :token_hash, :is_admin, CAST(:type_patterns AS text[]))
ON CONFLICT (name) DO NOTHING
RETURNING id;

-- name: client_by_token_hash
-- A client's current token, or its previous one until the rotation's grace period ends
-- (``valid_for_seconds``: how long the previous token still works; NULL for the current one).
SELECT id, name, is_admin, rate_limit_per_second, rate_limit_burst, type_patterns,
       CASE WHEN token_hash = :token_hash THEN NULL
            ELSE EXTRACT(EPOCH FROM previous_token_expires_at - now())::float8
       END AS valid_for_seconds
FROM jobrelay.clients
WHERE disabled_at IS NULL
  AND (token_hash = :token_hash
       OR (previous_token_hash = :token_hash AND previous_token_expires_at > now()));

-- name: set_client_disabled
-- Disable (:disable true) or enable a client by name. One row per existing client: whether it
-- was disabled before, and whether this statement changed it; no row for an unknown name.
WITH target AS (
    SELECT id, disabled_at IS NOT NULL AS was_disabled
    FROM jobrelay.clients WHERE name = :name FOR UPDATE
), changed AS (
    UPDATE jobrelay.clients c
    SET disabled_at = CASE WHEN CAST(:disable AS boolean) THEN now() END
    FROM target t
    WHERE c.id = t.id AND t.was_disabled <> CAST(:disable AS boolean)
    RETURNING c.id
)
SELECT t.id, t.was_disabled, EXISTS (SELECT 1 FROM changed) AS changed,
       pg_notify('jobrelay_clients', t.id::text)::text AS notified
FROM target t;

-- name: rotate_client_token
-- A new token for the same client row (its jobs stay its own). With a grace period the old
-- token keeps working until then (SET sees the row's old values: the old hash moves over);
-- without one it stops at once.
WITH rotated AS (
    UPDATE jobrelay.clients
    SET token_hash = :token_hash,
        previous_token_hash = CASE WHEN CAST(:grace_seconds AS float8) > 0
                                   THEN token_hash END,
        previous_token_expires_at = CASE WHEN CAST(:grace_seconds AS float8) > 0
            THEN now() + make_interval(secs => CAST(:grace_seconds AS float8)) END
    WHERE name = :name
    RETURNING id, disabled_at, previous_token_expires_at
)
SELECT id, disabled_at, previous_token_expires_at,
       pg_notify('jobrelay_clients', id::text)::text AS notified
FROM rotated;

-- name: set_client_rate_limit
-- A client's own submission limit, or (both NULL) back to the API's settings. Notified like a
-- token change: every API process drops its cached client and reads the new limit.
WITH changed AS (
    UPDATE jobrelay.clients
    SET rate_limit_per_second = CAST(:per_second AS float8),
        rate_limit_burst = CAST(:burst AS int)
    WHERE name = :name
    RETURNING id
), forgotten AS (  -- the old limit's bucket state no longer applies
    DELETE FROM jobrelay.rate_limits r USING changed c WHERE r.client_id = c.id
)
SELECT id, pg_notify('jobrelay_clients', id::text)::text AS notified FROM changed;

-- name: set_client_type_patterns
-- The types a client may submit (NULL: the default rule). Notified like a token change: every
-- API process drops its cached client and reads the new patterns.
UPDATE jobrelay.clients SET type_patterns = CAST(:type_patterns AS text[])
WHERE name = :name
RETURNING id, pg_notify('jobrelay_clients', id::text)::text AS notified;

-- name: take_rate_token
-- Take ``count`` submissions from a client's limit: the generic cell rate algorithm.
-- ``allowed_from`` is when the client's limit is next back to empty; submissions fit while that
-- lies at most ``:window`` (burst x interval) ahead, and push it ``:cost`` (count x interval)
-- further. One row per client, in an UNLOGGED table: the update commits without waiting for the
-- WAL flush, and concurrent API processes serialize on the row, so the limit holds across all
-- of them exactly. ``retry_after``: seconds until they would fit (meaningful when not allowed).
WITH taken AS (
    INSERT INTO jobrelay.rate_limits AS r (client_id, allowed_from)
    VALUES (:client_id, now() + make_interval(secs => CAST(:cost AS float8)))
    ON CONFLICT (client_id) DO UPDATE
    SET allowed_from = greatest(r.allowed_from, now())
                       + make_interval(secs => CAST(:cost AS float8))
    WHERE greatest(r.allowed_from, now()) + make_interval(secs => CAST(:cost AS float8))
          <= now() + make_interval(secs => CAST(:window AS float8))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM taken) AS allowed,
       (SELECT EXTRACT(EPOCH FROM greatest(allowed_from, now()) - now())::float8
               + CAST(:cost AS float8) - CAST(:window AS float8)
        FROM jobrelay.rate_limits WHERE client_id = :client_id) AS retry_after;

-- name: list_clients
SELECT id, name, is_admin, disabled_at, created_at,
       rate_limit_per_second, rate_limit_burst, type_patterns,
       CASE WHEN previous_token_expires_at > now() THEN previous_token_expires_at END
           AS previous_token_expires_at
FROM jobrelay.clients ORDER BY created_at, name;

-- name: client_by_id_or_name
-- The client ``jobrelay.enqueue`` names by id (:id, NULL when not a uuid) or name (:name, NULL
-- when given a uuid); a name that is also another client's id means the id's client.
SELECT id, name, disabled_at IS NOT NULL AS disabled, type_patterns
FROM jobrelay.clients
WHERE id = CAST(:id AS uuid) OR name = CAST(:name AS text)
ORDER BY (id = CAST(:id AS uuid)) IS TRUE DESC
LIMIT 1;
