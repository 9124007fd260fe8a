"""Every SQL statement jobrelay runs, by name.

Rules kept here so call sites never build SQL from strings:
- every state change is guarded on the state(s) it expects (docs/states.md), and on the lease token
  when a worker reports on a job;
- a transition and its journal entry (and outbox row, and result) are written by one statement,
  so they commit or fail together;
- times come from the database clock (``now()``), never from a process clock, so workers on
  different machines agree on what "expired" means. Statements that compare times take
  ``:now`` only where a test must control the clock.
"""

from __future__ import annotations

from sqlalchemy import TextClause, text

from jobrelay.core.journal import QuarantineMarker
from jobrelay.core.states import (
    CANCEL,
    CANCEL_RUNNING,
    CLAIM,
    COMPLETE,
    DEFER,
    DELIVERY_LIMIT,
    DEPENDENCY_FAILED,
    EXHAUST,
    HOLD,
    HOLD_ABANDONED,
    PARENTS_SUCCEEDED,
    QUARANTINE,
    RECLAIM,
    RELEASE,
    REPLAY,
    RESCUE,
    RESTORE,
    RETRY,
    TERMINAL_STATES,
    UNKNOWN_TYPE,
    JobState,
    Lease,
    Transition,
)
from jobrelay.core.workflows import DEPENDENCY_FAILED_CODE, OnFailure, WorkflowState

# The columns of the job view, used by every statement that returns a job.
_JOB_COLUMNS = """
    j.id, j.client_id, j.idempotency_key, j.request_hash, j.type, j.payload, j.state,
    j.attempts, j.max_attempts, j.available_at, j.lease_token, j.lease_until,
    j.last_error_code, j.last_error, j.created_at, j.updated_at, j.finished_at, j.run_at,
    j.cancel_requested_at, j.traceparent, j.priority, j.concurrency_key, j.unique_key,
    j.workflow_id, j.workflow_ref, j.progress, j.replayed_attempts
"""


# --- the guards of state changes, built from the transitions of ``core/states.py`` ---------------


def _state_in(states: frozenset[JobState]) -> str:
    listed = ", ".join(f"'{state}'" for state in JobState if state in states)
    return f"state IN ({listed})"


_RUNNING_WITH_LEASE = {
    Lease.ANY: f"state = '{JobState.RUNNING}'",
    Lease.LIVE: f"(state = '{JobState.RUNNING}' AND lease_until > now())",
    Lease.EXPIRED: f"(state = '{JobState.RUNNING}' AND lease_until < now())",
}
# A running job whose holder crashed or hung.
_LEASE_EXPIRED = _RUNNING_WITH_LEASE[Lease.EXPIRED]


def _guard(transition: Transition, token: str = ":lease_token") -> str:
    """The WHERE condition a statement making ``transition`` puts on the job's row (the
    columns unqualified): its source states, the lease it asks of a running job, the token
    (a parameter, or the column of a group's requests that holds each row's own token)."""
    waiting = transition.source - {JobState.RUNNING}
    parts = [_state_in(waiting)] if waiting else []
    if JobState.RUNNING in transition.source:
        parts.append(_RUNNING_WITH_LEASE[transition.lease])
    condition = parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"
    return f"lease_token = {token} AND {condition}" if transition.fenced else condition


def _shared_guard(transitions: tuple[Transition, ...], token: str) -> str:
    """The one guard of a statement that makes any of ``transitions``, row by row: they must
    agree on source states, lease and fence, or one statement cannot make them all."""
    guards = {_guard(transition, token) for transition in transitions}
    if len(guards) != 1:
        raise ValueError(f"{[t.name for t in transitions]} are guarded differently: {guards}")
    return guards.pop()


# Every move to `quarantined` clears the lease and finishes the job; the code is the caller's.
_QUARANTINE_SET = f"""state = '{JobState.QUARANTINED}', lease_token = NULL, lease_until = NULL,
            last_error = :error, finished_at = now(), updated_at = now()"""


def _quarantine_unclaimed(code: str, condition: str) -> str:
    """Quarantine job ``:id`` with ``code`` (no attempt of its own: the journal entry carries
    the attempts so far) when ``condition`` holds, and cancel its dependents (a workflow's);
    returns its id."""
    return f"""
    WITH q AS (
        UPDATE jobrelay.jobs
        SET {_QUARANTINE_SET}, last_error_code = '{code}'
        WHERE id = :id AND {condition}
        RETURNING id, attempts, state AS ends_as, workflow_id
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'quarantined', attempts, '{code}' FROM q
    ){_dependents_of("q")}
    SELECT id FROM q
    """


# --- workflows: what a job's end does to the jobs waiting on it (docs/workflows.md) ----------

_CANCELLED_WORKFLOW = (
    "EXISTS (SELECT 1 FROM jobrelay.workflows w WHERE w.id = {0} AND w.cancelled_at IS NOT NULL)"
)


def _not_in_cancelled_workflow(job: str) -> str:
    """A claim's condition: a job of a cancelled workflow starts nothing (it is cancelled as
    soon as the workflow's cancel reaches its row)."""
    return f"({job}.workflow_id IS NULL OR NOT {_CANCELLED_WORKFLOW.format(job + '.workflow_id')})"


def _dependents_of(ended: str) -> str:
    """CTEs that follow a statement's CTE ``ended`` (its jobs that changed state, with columns
    ``id``, ``ends_as``, ``workflow_id``) through the workflows' edges, in the same statement:

    - each waiting child of a job that ``succeeded`` counts one parent fewer to wait for, and
      is queued (PARENTS_SUCCEEDED, with its outbox row) when none is left. Its row lock makes
      that exact: of two statements that finish its last two parents, the second waits for the
      first and re-reads ``waiting_for`` (EvalPlanQual), and one statement that finishes both
      counts both at once (``counted``);
    - every job waiting, directly or not, on one that ended ``quarantined`` or ``cancelled`` in
      a ``cancel_dependents`` workflow is cancelled (DEPENDENCY_FAILED, code
      ``dependency_failed``), and so is a child that would be queued in a cancelled workflow.

    One UPDATE makes both moves (a child may have a parent of each kind in one group), on rows
    locked in id order first, so two statements never wait for each other's children in a cycle.
    A statement with no job of a workflow finds no edge: two index probes per job."""
    return f""", counted AS (
        SELECT d.job_id, count(*) AS n
        FROM jobrelay.job_dependencies d JOIN {ended} e ON d.parent_id = e.id
        WHERE e.workflow_id IS NOT NULL AND e.ends_as = '{JobState.SUCCEEDED}'
        GROUP BY d.job_id
    ), failed_roots AS (
        SELECT e.id, e.ends_as FROM {ended} e JOIN jobrelay.workflows w ON w.id = e.workflow_id
        WHERE e.ends_as IN ('{JobState.QUARANTINED}', '{JobState.CANCELLED}')
          AND w.on_failure = '{OnFailure.CANCEL_DEPENDENTS}'
    ), doomed AS (
        WITH RECURSIVE below(id, root, root_state) AS (
            SELECT d.job_id, r.id, r.ends_as FROM jobrelay.job_dependencies d
            JOIN failed_roots r ON d.parent_id = r.id
            UNION
            SELECT d.job_id, b.root, b.root_state FROM jobrelay.job_dependencies d
            JOIN below b ON d.parent_id = b.id
        )
        SELECT DISTINCT ON (id) id, root, root_state FROM below ORDER BY id, root
    ), dependents AS (
        SELECT j.id FROM jobrelay.jobs j
        WHERE j.id IN (SELECT job_id FROM counted UNION ALL SELECT id FROM doomed)
          AND j.{_state_in(PARENTS_SUCCEEDED.source)}
        ORDER BY j.id FOR UPDATE
    ), decided_dependents AS (
        SELECT dp.id, coalesce(c.n, 0) AS n, dm.root, dm.root_state,
               {_CANCELLED_WORKFLOW.format("j.workflow_id")} AS workflow_cancelled
        FROM dependents dp JOIN jobrelay.jobs j ON j.id = dp.id
        LEFT JOIN counted c ON c.job_id = dp.id LEFT JOIN doomed dm ON dm.id = dp.id
    ), moved_dependents AS (
        UPDATE jobrelay.jobs c
        SET state = CASE
                WHEN dd.root IS NOT NULL
                     OR (c.waiting_for <= dd.n AND dd.workflow_cancelled)
                    THEN '{DEPENDENCY_FAILED.target}'
                WHEN c.waiting_for <= dd.n THEN '{PARENTS_SUCCEEDED.target}'
                ELSE c.state END,
            waiting_for = CASE WHEN dd.root IS NOT NULL THEN 0
                               ELSE greatest(c.waiting_for - dd.n, 0) END,
            available_at = now(),
            finished_at = CASE WHEN dd.root IS NOT NULL
                                    OR (c.waiting_for <= dd.n AND dd.workflow_cancelled)
                               THEN now() END,
            last_error_code = CASE WHEN dd.root IS NOT NULL THEN '{DEPENDENCY_FAILED_CODE}'
                                   ELSE c.last_error_code END,
            last_error = CASE
                WHEN dd.root IS NOT NULL
                    THEN 'job ' || dd.root || ', which it depends on, ended ' || dd.root_state
                WHEN c.waiting_for <= dd.n AND dd.workflow_cancelled
                    THEN 'its workflow was cancelled'
                ELSE c.last_error END,
            updated_at = now()
        FROM decided_dependents dd
        WHERE c.id = dd.id AND c.{_guard(PARENTS_SUCCEEDED)}
        RETURNING c.id, c.state, c.attempts, c.available_at, c.priority, c.client_id, c.type,
                  c.last_error_code, c.last_error
    ), dependents_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM moved_dependents
        WHERE state = '{PARENTS_SUCCEEDED.target}'
    ), dependents_event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id,
               CASE WHEN state = '{PARENTS_SUCCEEDED.target}' THEN 'parents_succeeded'
                    ELSE 'cancelled' END,
               attempts,
               CASE WHEN state = '{PARENTS_SUCCEEDED.target}'
                        THEN 'the jobs it waits for have all succeeded'
                    ELSE coalesce(last_error_code || ': ', '') || last_error END
        FROM moved_dependents WHERE state <> '{JobState.WAITING}'
    )"""


PING: TextClause = text("SELECT 1 AS ok")

# --- clients --------------------------------------------------------------------------------

INSERT_CLIENT: TextClause = text(
    """
    INSERT INTO jobrelay.clients (id, name, token_hash, is_admin, type_patterns)
    VALUES (:id, :name, :token_hash, :is_admin, CAST(:type_patterns AS text[]))
    ON CONFLICT (name) DO NOTHING
    RETURNING id
    """
)

# The API's caches of token lookups listen on this channel: every statement below that changes
# which token opens which client notifies it, so a disabled client or a rotated token is refused
# at once by every API process.
CLIENTS_CHANNEL = "jobrelay_clients"
LISTEN_CLIENTS = f"LISTEN {CLIENTS_CHANNEL}"
# A job entered a finished state (trigger jobs_notify_finished, migration 0005); the payload is
# its id. ``GET /v1/jobs/{id}?wait=`` answers on it.
FINISHED_CHANNEL = "jobrelay_jobs_finished"
LISTEN_API = f"LISTEN {CLIENTS_CHANNEL}; LISTEN {FINISHED_CHANNEL}"

# A client's current token, or its previous one until the rotation's grace period ends
# (``valid_for_seconds``: how long the previous token still works; NULL for the current one).
CLIENT_BY_TOKEN_HASH: TextClause = text(
    """
    SELECT id, name, is_admin, rate_limit_per_second, rate_limit_burst, type_patterns,
           CASE WHEN token_hash = :token_hash THEN NULL
                ELSE EXTRACT(EPOCH FROM previous_token_expires_at - now())::float8
           END AS valid_for_seconds
    FROM jobrelay.clients
    WHERE disabled_at IS NULL
      AND (token_hash = :token_hash
           OR (previous_token_hash = :token_hash AND previous_token_expires_at > now()))
    """
)

# Disable (:disable true) or enable a client by name. One row per existing client: whether it
# was disabled before, and whether this statement changed it; no row for an unknown name.
SET_CLIENT_DISABLED: TextClause = text(
    f"""
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
           pg_notify('{CLIENTS_CHANNEL}', t.id::text)::text AS notified
    FROM target t
    """
)

# A new token for the same client row (its jobs stay its own). With a grace period the old
# token keeps working until then (SET sees the row's old values: the old hash moves over);
# without one it stops at once.
ROTATE_CLIENT_TOKEN: TextClause = text(
    f"""
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
           pg_notify('{CLIENTS_CHANNEL}', id::text)::text AS notified
    FROM rotated
    """
)

# A client's own submission limit, or (both NULL) back to the API's settings. Notified like a
# token change: every API process drops its cached client and reads the new limit.
SET_CLIENT_RATE_LIMIT: TextClause = text(
    f"""
    WITH changed AS (
        UPDATE jobrelay.clients
        SET rate_limit_per_second = CAST(:per_second AS float8),
            rate_limit_burst = CAST(:burst AS int)
        WHERE name = :name
        RETURNING id
    ), forgotten AS (  -- the old limit's bucket state no longer applies
        DELETE FROM jobrelay.rate_limits r USING changed c WHERE r.client_id = c.id
    )
    SELECT id, pg_notify('{CLIENTS_CHANNEL}', id::text)::text AS notified FROM changed
    """
)

# The types a client may submit (NULL: the default rule). Notified like a token change: every
# API process drops its cached client and reads the new patterns.
SET_CLIENT_TYPE_PATTERNS: TextClause = text(
    f"""
    UPDATE jobrelay.clients SET type_patterns = CAST(:type_patterns AS text[])
    WHERE name = :name
    RETURNING id, pg_notify('{CLIENTS_CHANNEL}', id::text)::text AS notified
    """
)

# --- rate limits (docs/overload.md) ---------------------------------------------------------

# Take ``count`` submissions from a client's limit: the generic cell rate algorithm.
# ``allowed_from`` is when the client's limit is next back to empty; submissions fit while that
# lies at most ``:window`` (burst x interval) ahead, and push it ``:cost`` (count x interval)
# further. One row per client, in an UNLOGGED table: the update commits without waiting for the
# WAL flush, and concurrent API processes serialize on the row, so the limit holds across all
# of them exactly. ``retry_after``: seconds until they would fit (meaningful when not allowed).
TAKE_RATE_TOKEN: TextClause = text(
    """
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
            FROM jobrelay.rate_limits WHERE client_id = :client_id) AS retry_after
    """
)

LIST_CLIENTS: TextClause = text(
    """
    SELECT id, name, is_admin, disabled_at, created_at,
           rate_limit_per_second, rate_limit_burst, type_patterns,
           CASE WHEN previous_token_expires_at > now() THEN previous_token_expires_at END
               AS previous_token_expires_at
    FROM jobrelay.clients ORDER BY created_at, name
    """
)

# The client ``jobrelay.enqueue`` names by id (:id, NULL when not a uuid) or name (:name, NULL
# when given a uuid); a name that is also another client's id means the id's client.
CLIENT_BY_ID_OR_NAME: TextClause = text(
    """
    SELECT id, name, disabled_at IS NOT NULL AS disabled, type_patterns
    FROM jobrelay.clients
    WHERE id = CAST(:id AS uuid) OR name = CAST(:name AS text)
    ORDER BY (id = CAST(:id AS uuid)) IS TRUE DESC
    LIMIT 1
    """
)

# --- accept (docs/life-of-a-job.md, "1. Accept") --------------------------------------------

# What every accept writes beside the jobs it inserted (CTE ``j``): their outbox rows, due when
# they are and with the job's priority, client and type (migration 0007), and their `received`
# events.
_OUTBOX_ROW_AND_RECEIVED = """, new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM j
    ), new_event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt) SELECT id, 'received', 0 FROM j
    )"""

# One statement writes the job, its outbox row and the `received` event: they commit together
# or not at all. ON CONFLICT DO NOTHING waits for a concurrent insert of the same key to finish,
# so of N identical concurrent requests exactly one inserts and the others see its row. It has
# no conflict target, so a live job of the same client, type and unique key
# (ux_jobs_live_unique_key) also makes it insert nothing: of N concurrent unique submissions one
# inserts, and the others find that job (LIVE_JOB_BY_UNIQUE_KEY).
# The caller knows every column of the new job but the database's times: only those come back
# (reading back the whole row, its payload parsed again, was a fifth of the accept's driver CPU).
ACCEPT_JOB: TextClause = text(
    f"""
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
    ){_OUTBOX_ROW_AND_RECEIVED}
    SELECT created_at, updated_at, available_at FROM j
    """
)

# A batch's new jobs in one statement (``POST /v1/jobs/batch``): the same rows as ACCEPT_JOB,
# one per element of the arrays. A key that exists (or repeats within the batch) inserts
# nothing and comes back in no row; the caller reads those jobs with JOBS_BY_KEYS. The jobs of
# one request share its trace context (:traceparent).
ACCEPT_JOBS: TextClause = text(
    f"""
    WITH asked AS (
        SELECT a.*, coalesce(a.run_at, now() + make_interval(secs => a.delay_seconds)) AS due
        FROM unnest(CAST(:ids AS uuid[]), CAST(:idempotency_keys AS text[]),
                    CAST(:request_hashes AS text[]), CAST(:types AS text[]),
                    CAST(:payloads AS jsonb[]), CAST(:max_attempts AS int[]),
                    CAST(:run_ats AS timestamptz[]), CAST(:delays AS float8[]),
                    CAST(:priorities AS smallint[]), CAST(:concurrency_keys AS text[]),
                    CAST(:unique_keys AS text[]))
             AS a(id, idempotency_key, request_hash, type, payload, max_attempts, run_at,
                  delay_seconds, priority, concurrency_key, unique_key)
    ), j AS (
        INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
                          max_attempts, run_at, available_at, traceparent, priority,
                          concurrency_key, unique_key)
        SELECT id, :client_id, idempotency_key, request_hash, type, payload, max_attempts,
               due, coalesce(due, now()), CAST(:traceparent AS text), priority,
               concurrency_key, unique_key
        FROM asked
        ON CONFLICT DO NOTHING  -- a used key, or a live job of a unique key (ACCEPT_JOB)
        RETURNING id, idempotency_key, created_at, available_at, priority, client_id, type
    ){_OUTBOX_ROW_AND_RECEIVED}
    SELECT id, idempotency_key, created_at, available_at FROM j
    """
)

JOBS_BY_KEYS: TextClause = text(
    f"""
    SELECT {_JOB_COLUMNS}, r.result
    FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
    WHERE j.client_id = :client_id AND j.idempotency_key = ANY(CAST(:idempotency_keys AS text[]))
    """
)

JOB_BY_KEY: TextClause = text(
    f"""
    SELECT {_JOB_COLUMNS}, r.result
    FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
    WHERE j.client_id = :client_id AND j.idempotency_key = :idempotency_key
    """
)

# --- flow control: submission (unique jobs; db/accept.py) ------------------------------------

# The live job that holds a client's unique key of a type (ux_jobs_live_unique_key): the answer
# to a unique submission whose insert found it. None when it finished meanwhile: the accept
# then inserts again.
LIVE_JOB_BY_UNIQUE_KEY: TextClause = text(
    f"""
    SELECT {_JOB_COLUMNS}, NULL::jsonb AS result
    FROM jobrelay.jobs j
    WHERE j.client_id = :client_id AND j.type = :type AND j.unique_key = :unique_key
      AND {_state_in(frozenset(JobState) - TERMINAL_STATES)}
    """
)

# --- periodic schedules (jobrelay/dispatcher/scheduler.py) -------------------------------------

# The built-in client that owns the jobs of schedules (migration 0005), by name.
SCHEDULER_CLIENT_ID: TextClause = text("SELECT id FROM jobrelay.clients WHERE name = :name")

# The database's clock: every dispatcher reads the ticks of schedules on the same one.
DATABASE_NOW: TextClause = text("SELECT clock_timestamp() AS now")

# --- reading jobs ---------------------------------------------------------------------------

# A live job of a type that no consumer serves now (docs/job-types.md, "Where a job goes"): one
# primary-key read of job_types.
_NO_CONSUMER = """
    (j.state IN ('queued', 'retrying') AND NOT EXISTS (
        SELECT 1 FROM jobrelay.job_types t WHERE t.name = j.type AND t.served_until > now()))
"""

# :client_id NULL means "any client" (operators and the CLI); the API always passes its caller.
JOB_BY_ID: TextClause = text(
    f"""
    SELECT {_JOB_COLUMNS}, r.result, {_NO_CONSUMER} AS no_consumer
    FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
    WHERE j.id = :id AND (CAST(:client_id AS uuid) IS NULL OR j.client_id = :client_id)
    """
)

JOB_EVENTS: TextClause = text(
    """
    SELECT e.id, e.at, e.event, e.attempt, e.detail, e.error
    FROM jobrelay.job_events e
    WHERE e.job_id = :job_id
    ORDER BY e.id
    """
)

# Keyset pagination, newest first: the cursor is the (created_at, id) of the last row seen.
LIST_JOBS: TextClause = text(
    f"""
    SELECT {_JOB_COLUMNS}, r.result
    FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
    WHERE j.client_id = :client_id
      AND (CAST(:state AS text) IS NULL OR j.state = :state)
      AND (CAST(:type AS text) IS NULL OR j.type = :type)
      AND (CAST(:after_created_at AS timestamptz) IS NULL
           OR (j.created_at, j.id)
              < (CAST(:after_created_at AS timestamptz), CAST(:after_id AS uuid)))
    ORDER BY j.created_at DESC, j.id DESC
    LIMIT :limit
    """
)

CANCEL_JOB: TextClause = text(
    f"""
    WITH cancelled AS (
        UPDATE jobrelay.jobs SET state = '{CANCEL.target}', waiting_for = 0, finished_at = now(),
                        updated_at = now()
        WHERE id = :id AND (CAST(:client_id AS uuid) IS NULL OR client_id = :client_id)
          AND {_guard(CANCEL)}
        RETURNING id, attempts, state AS ends_as, workflow_id
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'cancelled', attempts, :detail FROM cancelled
    ){_dependents_of("cancelled")}
    SELECT id FROM cancelled
    """
)

# A cancel of a running job is a request its worker carries out (docs/states.md,
# `cancel_running`): ``cancel_requested_at`` and a `cancel_requested` event, the first time
# only. Not a transition: the state is the worker's to change. Its row comes back whether
# the request is new (``first``) or was made before; no row: the job is not running.
REQUEST_CANCEL: TextClause = text(
    """
    WITH running AS (
        SELECT id, attempts, cancel_requested_at IS NULL AS first FROM jobrelay.jobs
        WHERE id = :id AND (CAST(:client_id AS uuid) IS NULL OR client_id = :client_id)
          AND state = 'running'
        FOR UPDATE
    ), requested AS (
        UPDATE jobrelay.jobs j SET cancel_requested_at = now(), updated_at = now()
        FROM running r WHERE j.id = r.id AND r.first
        RETURNING j.id, j.attempts
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'cancel_requested', attempts, :detail FROM requested
    )
    SELECT id, first FROM running
    """
)

# --- stats ----------------------------------------------------------------------------------

# The stats read in time that does not grow with the jobs kept: live jobs are counted through
# the partial index that holds them alone; finished ones are ``job_totals`` plus the deltas
# the triggers appended since the dispatcher last folded them in (migration 0003).
_LIVE = _state_in(frozenset(JobState) - TERMINAL_STATES)
_FINISHED_COUNTS = """(
    SELECT state, code, n FROM jobrelay.job_totals
    UNION ALL
    SELECT state, code, n FROM jobrelay.job_count_deltas
) AS finished"""

JOBS_BY_STATE: TextClause = text(
    f"""
    SELECT state, count(*) AS n FROM jobrelay.jobs WHERE {_LIVE} GROUP BY state
    UNION ALL
    SELECT state, sum(n)::bigint FROM {_FINISHED_COUNTS} GROUP BY state
    """
)

# The deltas folded into the totals, in one statement: the rows it deletes are exactly the
# rows it adds (a delta appended meanwhile waits for the next fold; two dispatchers folding
# at once never add a delta twice, as each deletes only rows it locked).
FOLD_JOB_COUNTS: TextClause = text(
    """
    WITH folded AS (DELETE FROM jobrelay.job_count_deltas RETURNING state, code, n)
    INSERT INTO jobrelay.job_totals AS t (state, code, n)
    SELECT state, code, sum(n) FROM folded GROUP BY state, code
    ON CONFLICT (state, code) DO UPDATE SET n = t.n + excluded.n
    RETURNING 1
    """
)

OUTBOX_BACKLOG: TextClause = text(
    """
    SELECT count(*) AS unpublished,
           count(*) FILTER (WHERE available_at <= now()) AS due,
           EXTRACT(EPOCH FROM now() - min(available_at) FILTER (WHERE available_at <= now()))
               AS oldest_due_seconds
    FROM jobrelay.outbox WHERE published_at IS NULL
    """
)

EXPIRED_LEASES: TextClause = text(f"SELECT count(*) AS n FROM jobrelay.jobs WHERE {_LEASE_EXPIRED}")

RETRYING_SUMMARY: TextClause = text(
    """
    SELECT count(*) AS n, min(available_at) AS next_due_at
    FROM jobrelay.jobs WHERE state = 'retrying'
    """
)

QUARANTINED_BY_CODE: TextClause = text(
    f"""
    SELECT CASE code WHEN '' THEN 'unknown' ELSE code END AS code, sum(n)::bigint AS n
    FROM {_FINISHED_COUNTS} WHERE state = 'quarantined'
    GROUP BY 1 HAVING sum(n) > 0 ORDER BY 2 DESC
    """
)

# Jobs not quarantined that met an error on the way: finished ones from the totals, live ones
# (retrying, or deferred for an unknown type) counted.
FAILED_BY_CODE: TextClause = text(
    f"""
    SELECT code, sum(n)::bigint AS n FROM (
        SELECT code, n FROM {_FINISHED_COUNTS} WHERE state <> 'quarantined' AND code <> ''
        UNION ALL
        SELECT last_error_code, 1 FROM jobrelay.jobs WHERE {_LIVE} AND last_error_code IS NOT NULL
    ) AS failed
    GROUP BY 1 HAVING sum(n) > 0 ORDER BY 2 DESC
    """
)

# Stranded: due long ago, every outbox row published before the threshold, and still waiting
# for a consumer. Its message may have been lost (a purged queue, a broker that lost it); the
# same condition drives `jobrelay jobs redispatch` and the dispatcher's healing of lost messages.
_STRANDED = """
    j.state IN ('queued', 'retrying')
    AND j.available_at < now() - make_interval(secs => :older_than_seconds)
    AND EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id)
    AND NOT EXISTS (
        SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id
        AND (o.published_at IS NULL
             OR o.published_at >= now() - make_interval(secs => :older_than_seconds)))
"""

# The types of the stranded jobs: the dispatcher reads the queues of these only.
STRANDED_TYPES: TextClause = text(
    f"SELECT DISTINCT j.type FROM jobrelay.jobs j WHERE {_STRANDED} ORDER BY 1 LIMIT :limit"
)

PUBLISHED_NEVER_CLAIMED: TextClause = text(
    f"SELECT count(*) AS n FROM jobrelay.jobs j WHERE {_STRANDED}"
)

# The console's chart (docs/console.md): jobs that finished succeeded or quarantined in each of
# the last 60 minutes, the current one included, one row per minute (zeros too). Read through
# ix_jobs_state_finished_at, so it costs the last hour's finishes, never the history. The span
# is written out rather than a parameter: the planner then estimates it from now() every time
# (a generic plan guesses a third of the table). A job counts in its current state: a
# quarantined job replayed since counts where it ended.
FINISHED_PER_MINUTE: TextClause = text(
    """
    SELECT m.minute, coalesce(f.succeeded, 0) AS succeeded,
           coalesce(f.quarantined, 0) AS quarantined
    FROM generate_series(date_trunc('minute', now()) - interval '59 minutes',
                         date_trunc('minute', now()), interval '1 minute') AS m(minute)
    LEFT JOIN (
        SELECT date_trunc('minute', finished_at) AS minute,
               count(*) FILTER (WHERE state = 'succeeded') AS succeeded,
               count(*) FILTER (WHERE state = 'quarantined') AS quarantined
        FROM jobrelay.jobs
        WHERE state IN ('succeeded', 'quarantined') AND finished_at IS NOT NULL
          AND finished_at >= date_trunc('minute', now()) - interval '59 minutes'
        GROUP BY 1
    ) AS f ON f.minute = m.minute
    ORDER BY m.minute
    """
)

# --- relay (docs/life-of-a-job.md, "2. Relay") ----------------------------------------------

# A statement trigger on the outbox (migration 0001) notifies this channel on every insert. The
# dispatcher's listening connection (``jobrelay.db.listener``) runs these two on psycopg itself:
# LISTEN once per connection, the ping after a quiet period to notice a half-open connection,
# and a server that went into recovery under it (a demoted primary hears no NOTIFY: they are
# sent on the new primary), so the listener reconnects, to the primary.
OUTBOX_CHANNEL = "jobrelay_outbox"
LISTEN_OUTBOX = f"LISTEN {OUTBOX_CHANNEL}"
LISTENER_PING = "SELECT pg_is_in_recovery() AS in_recovery"

# The pool-mode probe at start (db/pooler.py): the pid of the server session that runs it,
# compared with the one the connection was told at login.
SERVER_PID = "SELECT pg_backend_pid() AS pid"

# What each leased row's `published` journal entry will say (MARK_PUBLISHED writes it once the
# broker confirmed). The journal reads in id order, and a consumer can claim the job before the
# confirm is recorded: so the entry's id is drawn here, in the lease's transaction, which
# commits before the message exists, and it is dated by the lease (the database's clock, like
# every journal entry). It carries the attempt the message delivers: the job's next one while
# it is due and has one left (a lease-expired or exhausted job's message delivers no new one).
_DELIVERY = f"""nextval('jobrelay.job_events_id_seq') AS journal_id, now() AS leased_at,
    CASE WHEN j.{_state_in(CLAIM.source)} AND j.attempts < j.max_attempts
         THEN j.attempts + 1 ELSE j.attempts END AS delivers_attempt"""

# Lease a batch of due rows: lock them briefly, push their available_at past the publish
# timeout, and commit at once. The broker round trip happens with no transaction open; another
# dispatcher skips these rows until the lease passes, and a crashed dispatcher's rows simply
# come due again (a duplicate publish, never a lost one).
LEASE_OUTBOX_BATCH: TextClause = text(
    f"""
    WITH due AS (
        SELECT id FROM jobrelay.outbox
        WHERE published_at IS NULL AND available_at <= now()
        ORDER BY available_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    UPDATE jobrelay.outbox o
    SET available_at = now() + make_interval(secs => :lease_seconds),
        publish_attempts = o.publish_attempts + 1
    FROM due, jobrelay.jobs j
    WHERE o.id = due.id AND j.id = o.job_id
    RETURNING o.id, o.job_id, j.type, o.publish_attempts, j.traceparent, {_DELIVERY}
    """
)

# The confirmed rows of a batch, each as LEASE returned it: its `published` entry takes the
# journal id and the time its lease drew, and the attempt it delivers (see _DELIVERY).
MARK_PUBLISHED: TextClause = text(
    """
    WITH confirmed AS (
        SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:journal_ids AS bigint[]),
                             CAST(:attempts AS integer[]), CAST(:leased_at AS timestamptz[]))
            AS c(id, journal_id, attempt, leased_at)
    ), done AS (
        UPDATE jobrelay.outbox o SET published_at = now(), last_error = NULL
        FROM confirmed c
        WHERE o.id = c.id AND o.published_at IS NULL
        RETURNING o.id, o.job_id, c.journal_id, c.attempt, c.leased_at
    )
    INSERT INTO jobrelay.job_events (id, job_id, event, attempt, detail, at)
    SELECT coalesce(d.journal_id, nextval('jobrelay.job_events_id_seq')), d.job_id, 'published',
           d.attempt, 'outbox ' || d.id, coalesce(d.leased_at, now())
    FROM done d
    RETURNING job_id
    """
)

MARK_PUBLISH_FAILED: TextClause = text(
    """
    UPDATE jobrelay.outbox
    SET last_error = :error, available_at = now() + make_interval(secs => :retry_in_seconds)
    WHERE id = ANY(:ids) AND published_at IS NULL
    """
)

NEXT_OUTBOX_DUE_IN: TextClause = text(
    """
    SELECT EXTRACT(EPOCH FROM min(available_at) - now()) AS seconds
    FROM jobrelay.outbox WHERE published_at IS NULL
    """
)

# For the dispatcher's gauge: how long the oldest due, unpublished row has waited (0 if none).
# Rows leased by a dispatcher are not due (their available_at moved forward), so a healthy relay
# keeps this near zero however large its throughput.
OLDEST_DUE_OUTBOX_AGE: TextClause = text(
    """
    SELECT coalesce(EXTRACT(EPOCH FROM now() - min(available_at)), 0) AS seconds
    FROM jobrelay.outbox WHERE published_at IS NULL AND available_at <= now()
    """
)

# Back to `queued` with a new outbox row and one `lease_expired` event. The row lock and the
# re-checked WHERE make it happen once per expiry however many dispatchers run.
RESCUE_EXPIRED_LEASES: TextClause = text(
    f"""
    WITH expired AS (
        SELECT id FROM jobrelay.jobs
        WHERE {_guard(RESCUE)}
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
        SET state = '{RESCUE.target}', lease_token = NULL, lease_until = NULL,
            available_at = now(), updated_at = now()
        FROM expired e WHERE j.id = e.id
        RETURNING j.id, j.attempts, j.priority, j.client_id, j.type
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, priority, client_id, type)
        SELECT id, priority, client_id, type FROM rescued
    )
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'lease_expired', attempts, :detail FROM rescued
    RETURNING job_id
    """
)

DELETE_PUBLISHED_OUTBOX: TextClause = text(
    """
    DELETE FROM jobrelay.outbox WHERE id IN (
        SELECT id FROM jobrelay.outbox
        WHERE published_at IS NOT NULL
          AND published_at < now() - make_interval(secs => :retention_seconds)
        LIMIT :limit
    )
    """
)

# Retention of finished jobs: the oldest of one state, a batch at a time, through the index on
# (state, finished_at); their outbox rows, journal and result go with them (ON DELETE
# CASCADE, each through its job_id index) and ``job_totals`` is kept by its trigger. A live
# job is never deleted: it keeps its whole story. A row being changed right now is skipped.
DELETE_FINISHED_JOBS: TextClause = text(
    """
    DELETE FROM jobrelay.jobs WHERE id IN (
        SELECT id FROM jobrelay.jobs
        WHERE state = :state AND finished_at IS NOT NULL
          AND finished_at < now() - make_interval(secs => :retention_seconds)
        ORDER BY finished_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    )
    """
)

# --- flow control: the relay's pick and the queues' figures (docs/flow-control.md) -----------


# Whether the type expression ``t`` is routed to the picked queue: one of ``:queue_types`` (the
# types JOBRELAY_TYPE_QUEUES sends there), or, for ``default``, any type not sent elsewhere
# (``:other_types``).
def _in_queue(t: str) -> str:
    return (
        f"({t} = ANY(CAST(:queue_types AS text[])) OR (CAST(:is_default AS boolean) "
        f"AND NOT ({t} = ANY(CAST(:other_types AS text[])))))"
    )


# The key a row of type ``t`` counts under: its job's concurrency key when its limit is per key
# ('' without one), else '' (core/flow.py::limit_key). ``key`` reads the job's key.
def _limit_key(t: str, key: str) -> str:
    return (
        f"CASE WHEN {t} = ANY(CAST(:per_key_types AS text[])) THEN coalesce({key}, '') ELSE '' END"
    )


# The flow pick of one work queue: due rows in priority order (higher first), round-robin among
# the clients with due rows within a priority, then due order. A recursive skip scan finds the
# clients with due rows (ix_outbox_client_priority_due, one probe per client), a LATERAL pick
# per client reads that client's best ``:limit`` rows from the same index, and ``turn`` (the
# row's rank within its client and priority) interleaves them. Rows whose (type, key) is at its
# concurrency limit (running jobs holding a live lease, through ix_jobs_running_type_key) or
# over its rate (type_rate_buckets) are skipped; within the pick at most the free slots (and one
# period's rate) of a (type, key) are taken. Rows written before migration 0007 carry no type or
# client: they are read with their job (ix_outbox_legacy_unpublished), as one more client.
# Limits are approximate here: the consumer enforces them exactly at claim. Each row returns its
# place (priority, turn, due time): the relay publishes in that order. The lease itself is
# LEASE_OUTBOX_BATCH's: locked with SKIP LOCKED and re-checked under the lock, so several
# dispatchers never lease a row twice.
def _flow_pick(limited: bool) -> TextClause:
    """LEASE_FLOW_PICK, or with ``limited`` LEASE_FLOW_PICK_LIMITED: the same pick that also
    reads each candidate's key (its job's, for a per-key limit) and skips blocked keys. The
    per-client pick is an ordered index scan either way: a type blocked as a whole is filtered
    in it (no join), a blocked key among the client's next ``:lookahead`` rows after it."""
    key = (
        _limit_key(
            "s.type", "(SELECT j.concurrency_key FROM jobrelay.jobs j WHERE j.id = s.job_id)"
        )
        if limited
        else "''"
    )
    skip_blocked = (
        "AND NOT EXISTS (SELECT 1 FROM blocked b WHERE b.type = s.type AND b.key = k.key)"
        if limited
        else ""
    )
    # Without limits there is nothing to filter: the filter alone would make the planner
    # misjudge the scan (a bitmap scan and a sort of the client's whole backlog).
    skip_blocked_types = (
        "AND NOT (o.type = ANY(ARRAY(SELECT b.type FROM blocked b WHERE b.key = '' "
        "AND NOT (b.type = ANY(CAST(:per_key_types AS text[]))))))"
        if limited
        else ""
    )
    return text(
        f"""
    WITH RECURSIVE limits AS (
        SELECT * FROM unnest(
            CAST(:limit_types AS text[]), CAST(:limit_concurrency AS integer[]),
            CAST(:limit_burst AS integer[])
        ) AS l(type, concurrency, burst)
    ), running AS (
        SELECT r.type, {_limit_key("r.type", "r.concurrency_key")} AS key, count(*) AS n
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
                  AND o.available_at <= now() AND o.type IS NOT NULL AND {_in_queue("o.type")}
                  {skip_blocked_types}
                ORDER BY o.priority DESC, o.available_at
                LIMIT :lookahead
            ) s CROSS JOIN LATERAL (SELECT {key} AS key) k
            WHERE TRUE {skip_blocked}
            ORDER BY s.priority DESC, s.available_at
            LIMIT :limit
        ) p
        WHERE c.client_id IS NOT NULL
        UNION ALL
        (SELECT o.id, o.client_id, o.priority, o.available_at, j.type, k.key
         FROM jobrelay.outbox o JOIN jobrelay.jobs j ON j.id = o.job_id
         CROSS JOIN LATERAL (SELECT {_limit_key("j.type", "j.concurrency_key")} AS key) k
         WHERE o.published_at IS NULL AND (o.type IS NULL OR o.client_id IS NULL)
           AND o.available_at <= now() AND {_in_queue("j.type")}
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
    FROM top, jobrelay.jobs j
    WHERE o.id = ANY(ARRAY(SELECT id FROM due)) AND top.id = o.id AND j.id = o.job_id
    RETURNING o.id, o.job_id, j.type, o.publish_attempts, j.traceparent, {_DELIVERY},
              top.priority, top.turn, top.available_at AS due_at
    """
    )


LEASE_FLOW_PICK: TextClause = _flow_pick(limited=False)
LEASE_FLOW_PICK_LIMITED: TextClause = _flow_pick(limited=True)

# The operators' controls the dispatcher obeys, read every couple of seconds: the paused queues,
# the runtime limits, and the types a running consumer serves (one row each; ``kind`` tells
# which).
FLOW_CONTROLS: TextClause = text(
    """
    SELECT 'paused' AS kind, name, NULL::integer AS concurrency, NULL::integer AS rate_count,
           NULL::integer AS rate_period_seconds, false AS per_key
    FROM jobrelay.queues WHERE paused_at IS NOT NULL
    UNION ALL
    SELECT 'limit', type, concurrency, rate_count, rate_period_seconds, per_key
    FROM jobrelay.type_limits
    UNION ALL
    SELECT 'served', name, NULL, NULL, NULL, false
    FROM jobrelay.job_types WHERE served_until > now()
    """
)

REGISTER_QUEUES: TextClause = text(
    """
    INSERT INTO jobrelay.queues (name) SELECT unnest(CAST(:names AS text[]))
    ON CONFLICT (name) DO NOTHING
    """
)

# Per work queue (short name; ``:route_types``/``:route_queues`` is JOBRELAY_TYPE_QUEUES), the
# due, unpublished rows not leased right now: the backlog the window, a pause or a limit holds.
QUEUE_BACKLOGS: TextClause = text(
    """
    SELECT coalesce(r.queue, 'default') AS queue, count(*) AS n
    FROM jobrelay.outbox o
    LEFT JOIN jobrelay.jobs j ON o.type IS NULL AND j.id = o.job_id
    LEFT JOIN unnest(CAST(:route_types AS text[]), CAST(:route_queues AS text[]))
              AS r(type, queue) ON r.type = coalesce(o.type, j.type)
    WHERE o.published_at IS NULL AND o.available_at <= now()
    GROUP BY 1
    """
)

# Running jobs per work queue (through ix_jobs_running_type_key).
QUEUE_RUNNING: TextClause = text(
    """
    SELECT coalesce(r.queue, 'default') AS queue, count(*) AS n
    FROM jobrelay.jobs j
    LEFT JOIN unnest(CAST(:route_types AS text[]), CAST(:route_queues AS text[]))
              AS r(type, queue) ON r.type = j.type
    WHERE j.state = 'running'
    GROUP BY 1
    """
)

QUEUES: TextClause = text(
    "SELECT name, paused_at IS NOT NULL AS paused FROM jobrelay.queues ORDER BY name"
)

# --- execution (docs/life-of-a-job.md, "3. Claim, run, finish, ack") ------------------------

# The consumer's hot path runs as group commits (``db/group_commit.py``): one statement claims,
# or finishes, the jobs of every delivery that arrived together, each row fenced on its own.
# The requests come as parallel arrays; a row the statement cannot move is simply not returned,
# and its caller alone finds out why. Rows are locked in id order, so two groups that share a
# job (duplicate deliveries) wait for each other instead of deadlocking.

# Claim: due queued/retrying, or running with an expired lease, and attempts left. The previous
# state comes back so a re-claim of an expired lease is journaled as such. Two requests for one
# job in a group: one wins (its token is returned), the other is refused as a duplicate.
# Nothing of the consumer's queue (:queue, NULL: none) is claimed while it is paused: its row is
# share-locked first (FOR KEY SHARE, before any job row), so a pause (PAUSE_QUEUE locks the row
# FOR UPDATE) waits for the claims under way, and a claim that waited for a pause sees it.
# A request not :checked (its type's limit checked by the caller's transaction, "flow control:
# claim" below) claims only a job of a type without a runtime limit (``type_limits``).
CLAIM_JOBS: TextClause = text(
    f"""
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
        SELECT id, state AS previous_state FROM jobrelay.jobs
        WHERE id IN (SELECT job_id FROM asked)
          AND coalesce((SELECT open FROM queue), true)  -- no row: no pause to keep
        -- NO KEY: the journal rows other transactions insert for these jobs (their foreign
        -- key takes FOR KEY SHARE, in no particular order) neither wait nor deadlock on it.
        ORDER BY id FOR NO KEY UPDATE
    ), claimed AS (
        UPDATE jobrelay.jobs j
        SET state = '{CLAIM.target}', attempts = j.attempts + 1, lease_token = a.asked_token,
            lease_until = now() + make_interval(secs => a.asked_seconds), updated_at = now(),
            type_unknown_since = NULL  -- a consumer that knows the type has it now
        FROM before b JOIN asked a ON a.job_id = b.id
        WHERE j.id = b.id AND j.attempts < j.max_attempts
          -- a consumer claims only a job it can run (NULL: any type)
          AND (a.asked_type IS NULL OR j.type = a.asked_type)
          AND (a.limit_checked
               OR NOT EXISTS (SELECT 1 FROM jobrelay.type_limits l WHERE l.type = j.type))
          AND {_not_in_cancelled_workflow("j")}
          AND (({_guard(CLAIM)} AND available_at <= now()) OR {_guard(RECLAIM)})
        RETURNING {_JOB_COLUMNS}, b.previous_state, a.asked_detail
    ), new_events AS (
        -- One INSERT, so the journal reads in order: the expiry first, then the new claim.
        -- At the statement's clock, not its transaction's start: a claim under a limit waits
        -- for its slot's lock within its transaction, and the journal must not date it before
        -- the finish that freed the slot.
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail, at)
        SELECT id, 'lease_expired', attempts - 1, 'lease expired; re-claimed by a consumer',
               clock_timestamp()
        FROM claimed WHERE previous_state = 'running'
        UNION ALL
        SELECT id, 'claimed', attempts, asked_detail, clock_timestamp() FROM claimed
    )
    SELECT * FROM claimed
    """
)

# A job that cannot be claimed because it has no attempts left is quarantined here.
QUARANTINE_EXHAUSTED: TextClause = text(
    _quarantine_unclaimed(
        QuarantineMarker.ATTEMPTS_EXHAUSTED, f"attempts >= max_attempts AND {_guard(EXHAUST)}"
    )
)

RECORD_EVENT: TextClause = text(
    """
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, :event, CAST(:attempt AS integer), :detail FROM jobrelay.jobs WHERE id = :job_id
    """
)

RENEW_LEASE: TextClause = text(
    """
    UPDATE jobrelay.jobs SET lease_until = now() + make_interval(secs => :lease_seconds)
    WHERE id = :id AND lease_token = :lease_token AND state = 'running' AND lease_until > now()
    RETURNING lease_until, cancel_requested_at IS NOT NULL AS cancel_requested
    """
)

# The heartbeat's poll between renewals, for a group of running jobs: which of them (by id and
# lease token) have a cancel requested. Read only: no row version, no WAL, no dead tuple.
CANCELS_REQUESTED: TextClause = text(
    """
    SELECT id, lease_token FROM jobrelay.jobs
    WHERE id = ANY(CAST(:ids AS uuid[])) AND cancel_requested_at IS NOT NULL
    """
)

_WORKER_EXITS = (COMPLETE, RETRY, QUARANTINE, CANCEL_RUNNING)


def _targets_of(transitions: tuple[Transition, ...]) -> str:
    return ", ".join(f"'{t.target}'" for t in transitions if t.target is not None)


# Every exit of a worker from `running`, for a group of jobs: each row's decided outcome (its
# :targets entry: succeeded, retrying, quarantined or cancelled) with its state, result or retry
# (due :retry_delays seconds after the database's now(), a new outbox row), error (cleared by a
# success) and journal entry, all in one statement, and only while that row's
# lease is the worker's and alive. A retry of a job whose client asked to cancel it meanwhile
# ends it `cancelled` instead (``ends_as``; no outbox row). The rows moved come back as (id,
# asked_token, target, ends_as): two reports on one job in a group (a stale worker's and the
# owner's) are told apart by token and target. A row not moved (a stale lease) is looked into
# by its own caller.
# Arrays unused by an outcome hold NULL for its row.
FINISH_JOBS: TextClause = text(
    f"""
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
        SELECT a.*, CASE WHEN a.target = '{RETRY.target}' AND l.cancel_requested
                         THEN '{CANCEL_RUNNING.target}' ELSE a.target END AS ends_as
        FROM locked l JOIN asked a ON a.job_id = l.id
    ), moved AS (
        UPDATE jobrelay.jobs j
        SET state = a.ends_as,
            lease_token = NULL, lease_until = NULL,
            available_at = CASE WHEN a.ends_as = '{RETRY.target}'
                                THEN now() + make_interval(secs => a.retry_delay)
                                ELSE j.available_at END,
            -- A success clears an earlier attempt's error (the journal keeps it).
            last_error_code = CASE WHEN a.ends_as <> '{COMPLETE.target}'
                                   THEN coalesce(a.error_code, j.last_error_code) END,
            last_error = CASE WHEN a.ends_as <> '{COMPLETE.target}'
                              THEN coalesce(a.error, j.last_error) END,
            finished_at = CASE WHEN a.ends_as <> '{RETRY.target}' THEN now() END,
            updated_at = now()
        FROM decided a
        WHERE j.id = a.job_id
          AND {_shared_guard(_WORKER_EXITS, "a.asked_token")}
          AND a.ends_as IN ({_targets_of(_WORKER_EXITS)})  -- only the moves declared
        RETURNING j.id, j.attempts, j.available_at, a.asked_token, a.target, a.ends_as,
                  a.result, a.error_code, a.failure, j.priority, j.client_id, j.type,
                  j.workflow_id
    ), stored AS (
        INSERT INTO jobrelay.job_results (job_id, result, attempt)
        SELECT id, CAST(result AS jsonb), attempts FROM moved
        WHERE ends_as = '{COMPLETE.target}'
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM moved
        WHERE ends_as = '{RETRY.target}'
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail, error)
        SELECT id, CASE ends_as WHEN '{COMPLETE.target}' THEN 'succeeded'
                                WHEN '{RETRY.target}' THEN 'retry_scheduled'
                                WHEN '{QUARANTINE.target}' THEN 'quarantined'
                                WHEN '{CANCEL_RUNNING.target}' THEN 'cancelled' END,
               attempts,
               CASE
                   WHEN ends_as = '{RETRY.target}' THEN
                       error_code || ': retry at '
                       || to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
                   WHEN target = '{RETRY.target}' THEN
                       error_code || ': not retried, its cancel was requested'
                   WHEN target = '{QUARANTINE.target}' THEN error_code
                   WHEN target = '{CANCEL_RUNNING.target}' THEN 'its cancel was requested'
               END,
               CAST(failure AS jsonb)
        FROM moved
    ){_dependents_of("moved")}
    SELECT id, asked_token, target, ends_as FROM moved
    """
)

# A consumer that does not know the job's type (its message says which) never claims it: one
# statement puts the job back, due after :delay_seconds with a new outbox row and a `deferred`
# event, and attempts untouched; or, once the type has stayed unknown past :patience_seconds,
# quarantines it (unknown_job_type). Guarded like a claim: queued or retrying, and due.
DEFER_UNKNOWN_TYPE: TextClause = text(
    f"""
    WITH met AS (
        SELECT id, coalesce(type_unknown_since, now()) AS since,
               coalesce(type_unknown_since <= now() - make_interval(secs => :patience_seconds),
                        false) AS patience_over
        FROM jobrelay.jobs
        WHERE id = :id AND type = :type AND {_guard(DEFER)} AND available_at <= now()
        FOR UPDATE
    ), moved AS (
        UPDATE jobrelay.jobs j
        SET state = CASE WHEN m.patience_over THEN '{UNKNOWN_TYPE.target}' ELSE j.state END,
            available_at = CASE WHEN m.patience_over THEN j.available_at
                                ELSE now() + make_interval(secs => :delay_seconds) END,
            finished_at = CASE WHEN m.patience_over THEN now() END,
            type_unknown_since = m.since,
            last_error_code = '{QuarantineMarker.UNKNOWN_JOB_TYPE}',
            last_error = CASE WHEN m.patience_over THEN :quarantined_error
                              ELSE :deferred_error END,
            updated_at = now()
        FROM met m WHERE j.id = m.id
        RETURNING j.id, j.attempts, j.available_at, j.type_unknown_since, m.patience_over,
                  j.priority, j.client_id, j.type, j.state AS ends_as, j.workflow_id
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM moved WHERE NOT patience_over
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, CASE WHEN patience_over THEN 'quarantined' ELSE 'deferred' END, attempts,
               CASE WHEN patience_over THEN '{QuarantineMarker.UNKNOWN_JOB_TYPE}'
                    ELSE '{QuarantineMarker.UNKNOWN_JOB_TYPE}: ' || :detail || '; due again at '
                         || to_char(available_at AT TIME ZONE 'UTC',
                                    'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') END
        FROM moved
    ){_dependents_of("moved")}
    SELECT id, attempts, available_at, type_unknown_since, patience_over FROM moved
    """
)

# Shutdown gives a running job back: `queued` again (its message is requeued), attempt counted.
RELEASE_LEASE: TextClause = text(
    f"""
    WITH released AS (
        UPDATE jobrelay.jobs
        SET state = '{RELEASE.target}', lease_token = NULL, lease_until = NULL,
            available_at = now(), updated_at = now()
        WHERE id = :id AND {_guard(RELEASE)}
        RETURNING id, attempts
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'lease_expired', attempts, :detail FROM released
    )
    SELECT id FROM released
    """
)

# What a finished attempt left behind, to tell "my earlier COMMIT landed but its answer was
# lost" (the attempt number is unique per claim) from "a newer attempt owns the job".
ATTEMPT_TRACE: TextClause = text(
    """
    SELECT j.state, j.attempts, r.attempt AS result_attempt
    FROM jobrelay.jobs j LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
    WHERE j.id = :id
    """
)

# --- flow control: claim (the consumer's exact checks; db/execution_store.py) ----------------
# A job of a type with a limit in force is claimed in one transaction (docs/flow-control.md):
# CLAIM_CANDIDATE locks the consumer's queue row (FOR KEY SHARE, as CLAIM_JOBS) and the job's
# row, and reads the type's runtime limit; with a concurrency limit, TAKE_SLOT_LOCK serializes
# the claims of the type (or key) and RUNNING_IN_SLOT counts its slots in use, in a statement
# of its own so its snapshot sees every claim that held the lock before; TAKE_TYPE_TOKEN takes a
# start from the type's rate; then CLAIM_JOBS claims it (:checked). Or HOLD_JOB puts it back.
# A slot is a running job under a live lease: a consumer that dies frees it as the lease
# expires, with nothing to clean up.

CLAIM_CANDIDATE: TextClause = text(
    f"""
    WITH queue AS MATERIALIZED (
        SELECT paused_at IS NOT NULL AS paused FROM jobrelay.queues
        WHERE name = CAST(:queue AS text) FOR KEY SHARE
    )
    SELECT {_JOB_COLUMNS}, j.concurrency_key,
           coalesce((SELECT paused FROM queue), false) AS queue_paused,
           j.attempts < j.max_attempts
               AND (({_guard(CLAIM)} AND available_at <= now()) OR {_guard(RECLAIM)})
               AND {_not_in_cancelled_workflow("j")}
               AS claimable,
           l.type IS NOT NULL AS has_runtime_limit, l.concurrency, l.rate_count,
           l.rate_period_seconds, l.per_key
    FROM jobrelay.jobs j LEFT JOIN jobrelay.type_limits l ON l.type = j.type
    WHERE j.id = :id
      AND (SELECT count(*) FROM queue) >= 0  -- the queue's row is locked before the job's
    FOR UPDATE OF j
    """
)

# One lock per type and limit key ('' for the whole type), released at COMMIT (a transaction's
# lock, never a session's: a pooler such as PgBouncer may hand the session to another client).
TAKE_SLOT_LOCK: TextClause = text(
    "SELECT pg_advisory_xact_lock(hashtext(CAST(:type AS text)), hashtext(CAST(:key AS text)))"
)

# The slots in use: running jobs of the type (and key, when per key; '' is a job without one)
# under a live lease (ix_jobs_running_type_key).
RUNNING_IN_SLOT: TextClause = text(
    """
    SELECT count(*) AS running FROM jobrelay.jobs
    WHERE type = :type AND state = 'running' AND lease_until > now()
      AND (NOT CAST(:per_key AS boolean) OR concurrency_key = CAST(:key AS text)
           OR (CAST(:key AS text) = '' AND concurrency_key IS NULL))
    """
)

# A start from the type's (or key's) rate: the generic cell rate algorithm of TAKE_RATE_TOKEN
# with no burst, so starts are at least :interval seconds apart by the database's clock (the
# statement's, as the claim's journal entry) and at most the rate's count start in any period,
# over every consumer. Concurrent takers serialize on the row (ON CONFLICT DO UPDATE waits, then
# sees the latest). Not taken: the row stays locked by this transaction, and TYPE_TOKEN_WAIT
# reads when the next start is free.
TAKE_TYPE_TOKEN: TextClause = text(
    """
    INSERT INTO jobrelay.type_rate_buckets AS b (type, key, allowed_from)
    VALUES (:type, :key, clock_timestamp() + make_interval(secs => CAST(:interval AS float8)))
    ON CONFLICT (type, key) DO UPDATE
    SET allowed_from = greatest(b.allowed_from, clock_timestamp())
                       + make_interval(secs => CAST(:interval AS float8))
    WHERE b.allowed_from <= clock_timestamp()
    RETURNING allowed_from
    """
)

TYPE_TOKEN_WAIT: TextClause = text(
    """
    SELECT greatest(EXTRACT(EPOCH FROM allowed_from - clock_timestamp())::float8, 0)
           AS wait_seconds
    FROM jobrelay.type_rate_buckets WHERE type = :type AND key = :key
    """
)

# A due job put back without a claim (its queue paused, its type or key at a limit): due again
# after :delay_seconds with a new outbox row, a `held` event saying why, attempts untouched; a
# job whose lease expired is `queued` again (its expiry journaled first).
HOLD_JOB: TextClause = text(
    f"""
    WITH before AS (
        SELECT id, state AS previous_state FROM jobrelay.jobs WHERE id = :id FOR UPDATE
    ), held AS (
        UPDATE jobrelay.jobs j
        SET state = CASE WHEN b.previous_state = '{JobState.RUNNING}'
                         THEN '{HOLD_ABANDONED.target}' ELSE j.state END,
            lease_token = NULL, lease_until = NULL,
            available_at = clock_timestamp()
                           + make_interval(secs => CAST(:delay_seconds AS float8)),
            updated_at = now()
        FROM before b
        WHERE j.id = b.id AND j.attempts < j.max_attempts
          AND (({_guard(HOLD)} AND available_at <= now()) OR {_guard(HOLD_ABANDONED)})
        RETURNING j.id, j.attempts, j.available_at, j.priority, j.client_id, j.type,
                  b.previous_state
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM held
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'lease_expired', attempts, 'lease expired; held by a consumer'
        FROM held WHERE previous_state = '{JobState.RUNNING}'
        UNION ALL
        SELECT id, 'held', attempts,
               CAST(:detail AS text) || '; due again at '
               || to_char(available_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        FROM held
    )
    SELECT id, available_at FROM held
    """
)

# --- operations (docs/life-of-a-job.md, "Quarantine and replay") ----------------------------

# A fresh run: max_attempts = attempts + the type's limit, so attempt numbers stay unique, and
# replayed_attempts = attempts, from which the run counts its attempts and its backoff. The
# journal's entry names the attempts used before (docs/states.md, "Attempts and replays").
REPLAY_JOB: TextClause = text(
    f"""
    WITH r AS (
        UPDATE jobrelay.jobs
        SET state = '{REPLAY.target}', max_attempts = attempts + :budget, available_at = now(),
            replayed_attempts = attempts,
            finished_at = NULL, updated_at = now(), type_unknown_since = NULL,
            cancel_requested_at = NULL  -- a cancel asked of an earlier attempt is not the replay's
        WHERE id = :id AND {_guard(REPLAY)}
          -- Not while another live job holds its unique key (ux_jobs_live_unique_key).
          AND NOT EXISTS (
              SELECT 1 FROM jobrelay.jobs o
              WHERE o.client_id = jobs.client_id AND o.type = jobs.type
                AND o.unique_key = jobs.unique_key AND o.id <> jobs.id
                AND o.{_state_in(frozenset(JobState) - TERMINAL_STATES)}
          )
          -- Nothing of a cancelled workflow starts again.
          AND NOT {_CANCELLED_WORKFLOW.format("jobs.workflow_id")}
        RETURNING id, attempts, available_at, priority, client_id, type
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM r
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'replayed', attempts,
               :detail || ' after ' || attempts || ' attempt(s); a fresh run of '
               || CAST(:budget AS integer) || ' attempt(s)'
        FROM r
    ), below AS (
        -- Its dependents that its failure cancelled, directly or not, wait for it again
        -- (RESTORE): each for its parents that have not succeeded, the replayed job among them.
        WITH RECURSIVE below(id) AS (
            SELECT d.job_id FROM jobrelay.job_dependencies d JOIN r ON d.parent_id = r.id
            UNION
            SELECT d.job_id FROM jobrelay.job_dependencies d JOIN below b ON d.parent_id = b.id
        )
        SELECT id FROM below
    ), restored AS (
        UPDATE jobrelay.jobs c
        SET state = '{RESTORE.target}', finished_at = NULL, last_error_code = NULL,
            last_error = NULL, updated_at = now(),
            waiting_for = (SELECT count(*)
                           FROM jobrelay.job_dependencies d
                           JOIN jobrelay.jobs p ON p.id = d.parent_id
                           WHERE d.job_id = c.id AND p.state <> '{JobState.SUCCEEDED}')
        FROM below b
        WHERE c.id = b.id AND c.{_guard(RESTORE)}
          AND c.last_error_code = '{DEPENDENCY_FAILED_CODE}'
        RETURNING c.id, c.attempts
    ), restored_event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'restored', attempts, 'a job it depends on was replayed' FROM restored
    )
    SELECT id FROM r
    """
)

LIST_QUARANTINED: TextClause = text(
    f"""
    SELECT {_JOB_COLUMNS}, NULL::jsonb AS result
    FROM jobrelay.jobs j
    WHERE j.state = 'quarantined'
      AND (CAST(:code AS text) IS NULL OR j.last_error_code = :code)
    ORDER BY j.finished_at DESC, j.id
    LIMIT :limit
    """
)

OUTBOX_ROWS_OF_JOB: TextClause = text(
    """
    SELECT id, available_at, created_at, published_at, publish_attempts, last_error
    FROM jobrelay.outbox WHERE job_id = :job_id ORDER BY id
    """
)

REDISPATCH_STRANDED: TextClause = text(
    f"""
    WITH stranded AS (
        SELECT j.id, j.attempts, j.priority, j.client_id, j.type
        FROM jobrelay.jobs j WHERE {_STRANDED}
        ORDER BY j.available_at
        LIMIT :limit
        FOR UPDATE SKIP LOCKED
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, priority, client_id, type)
        SELECT id, priority, client_id, type FROM stranded
    )
    INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
    SELECT id, 'redispatched', attempts, :detail FROM stranded
    RETURNING job_id
    """
)

# The broker dead-lettered a job's message on its own (x-delivery-limit): the job is marked
# quarantined so that it shows up, and can be replayed, like any other. A job that is running
# under a live lease, or already finished, is left alone.
QUARANTINE_DELIVERY_LIMITED: TextClause = text(
    _quarantine_unclaimed(QuarantineMarker.DELIVERY_LIMIT, _guard(DELIVERY_LIMIT))
)

CLIENT_NAME_OF_JOB: TextClause = text(
    "SELECT c.name FROM jobrelay.clients c JOIN jobrelay.jobs j ON j.client_id = c.id "
    "WHERE j.id = :job_id"
)

RESULT_OF_JOB: TextClause = text(
    "SELECT result, attempt, created_at FROM jobrelay.job_results WHERE job_id = :job_id"
)

QUARANTINED_IDS: TextClause = text(
    """
    SELECT id FROM jobrelay.jobs
    WHERE state = 'quarantined' AND (CAST(:code AS text) IS NULL OR last_error_code = :code)
    ORDER BY finished_at
    """
)


# --- the quarantine's keeper and lost messages (docs/invariants.md, invariant 8) -------------

# Transaction-scoped advisory locks: released by COMMIT, ROLLBACK or a dropped connection, so a
# crashed holder can never keep one. ``SET_LOCK_TIMEOUT`` bounds the wait of the blocking form.
SET_LOCK_TIMEOUT: TextClause = text("SELECT set_config('lock_timeout', :timeout, true) AS v")
ADVISORY_XACT_LOCK: TextClause = text("SELECT pg_advisory_xact_lock(:key)::text AS locked")
TRY_ADVISORY_XACT_LOCK: TextClause = text("SELECT pg_try_advisory_xact_lock(:key) AS locked")

# The states of the jobs named by the messages in the quarantine queue.
JOB_STATES: TextClause = text("SELECT id, state FROM jobrelay.jobs WHERE id = ANY(:ids)")

# Quarantined jobs none of whose messages the sweep holds (:held, the job ids of every message
# in the quarantine queue), oldest quarantine first: what their message would say (the latest
# outbox row's id, its trace context) and the database's clock, which decides the grace.
QUARANTINED_WITHOUT_MESSAGE: TextClause = text(
    """
    SELECT j.id, j.type, j.finished_at, j.traceparent, now() AS read_at,
           (SELECT max(o.id) FROM jobrelay.outbox o WHERE o.job_id = j.id) AS outbox_id
    FROM jobrelay.jobs j
    WHERE j.state = 'quarantined' AND j.id <> ALL(CAST(:held AS uuid[]))
    ORDER BY j.finished_at, j.id
    LIMIT :limit
    """
)

QUARANTINED_COUNT: TextClause = text(
    f"SELECT coalesce(sum(n), 0)::bigint AS n FROM {_FINISHED_COUNTS} WHERE state = 'quarantined'"
)

# Lost messages, healed by the dispatcher: stranded jobs (as above: due, every outbox row
# published over :older_than_seconds ago, unclaimed since) routed to a work queue the caller
# has just seen empty — :default_empty for the default queue (every type but :own_types),
# :empty_own_types for the types bound to their own queue — get a new outbox row and a
# `redispatched` event. At most :cap times in a row without a claim in between, so that a
# misconfigured route can never make copies without end.
HEAL_LOST_MESSAGES: TextClause = text(
    f"""
    WITH lost AS (
        SELECT j.id, j.type, j.attempts, j.priority, j.client_id FROM jobrelay.jobs j
        WHERE {_STRANDED}
          AND ((CAST(:default_empty AS boolean)
                AND j.type <> ALL(CAST(:own_types AS text[])))
               OR j.type = ANY(CAST(:empty_own_types AS text[])))
          AND (SELECT count(*) FROM jobrelay.job_events e
               WHERE e.job_id = j.id AND e.event = 'redispatched'
                 AND e.id > coalesce((SELECT max(c.id) FROM jobrelay.job_events c
                                      WHERE c.job_id = j.id AND c.event = 'claimed'), 0))
              < :cap
        ORDER BY j.available_at
        LIMIT :limit
        FOR UPDATE OF j SKIP LOCKED
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, priority, client_id, type)
        SELECT id, priority, client_id, type FROM lost
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'redispatched', attempts, :detail FROM lost
    )
    SELECT id AS job_id, type FROM lost
    """
)

# For `stats`: how many messages were published again (by the dispatcher or an operator).
REDISPATCHED_RECENTLY: TextClause = text(
    """
    SELECT count(*) AS n FROM jobrelay.job_events
    WHERE at > now() - interval '1 hour' AND event = 'redispatched'
    """
)


# --- workflows (docs/workflows.md) -----------------------------------------------------------

# A workflow and all its jobs in one statement: the workflow row (nothing else when its key was
# used: the caller reads that one, WORKFLOW_BY_KEY), its jobs (waiting while they have parents,
# else queued with their outbox rows), their edges and their `received` events. The jobs' keys
# are the workflow's (core/workflows.py::job_key); their request hash is the workflow's.
ACCEPT_WORKFLOW: TextClause = text(
    f"""
    WITH w AS (
        INSERT INTO jobrelay.workflows (id, client_id, idempotency_key, request_hash, on_failure)
        VALUES (:id, :client_id, :idempotency_key, :request_hash, :on_failure)
        ON CONFLICT (client_id, idempotency_key) DO NOTHING
        RETURNING id, created_at
    ), asked AS (
        SELECT * FROM unnest(CAST(:job_ids AS uuid[]), CAST(:refs AS text[]),
                             CAST(:job_keys AS text[]), CAST(:types AS text[]),
                             CAST(:payloads AS jsonb[]), CAST(:max_attempts AS int[]),
                             CAST(:priorities AS smallint[]), CAST(:concurrency_keys AS text[]),
                             CAST(:waiting_for AS int[]))
                      AS a(id, ref, job_key, type, payload, max_attempts, priority,
                           concurrency_key, waiting_for)
    ), j AS (
        INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
                          max_attempts, traceparent, priority, concurrency_key, workflow_id,
                          workflow_ref, waiting_for, state)
        SELECT a.id, :client_id, a.job_key, :request_hash, a.type, a.payload, a.max_attempts,
               CAST(:traceparent AS text), a.priority, a.concurrency_key, w.id, a.ref,
               a.waiting_for,
               CASE WHEN a.waiting_for > 0 THEN '{JobState.WAITING}'
                    ELSE '{JobState.QUEUED}' END
        FROM asked a CROSS JOIN w
        RETURNING id, state, available_at, priority, client_id, type
    ), edges AS (
        INSERT INTO jobrelay.job_dependencies (job_id, parent_id)
        SELECT e.job_id, e.parent_id
        FROM unnest(CAST(:child_ids AS uuid[]), CAST(:parent_ids AS uuid[]))
             AS e(job_id, parent_id)
        WHERE EXISTS (SELECT 1 FROM w)
    ), new_outbox AS (
        INSERT INTO jobrelay.outbox (job_id, available_at, priority, client_id, type)
        SELECT id, available_at, priority, client_id, type FROM j
        WHERE state = '{JobState.QUEUED}'
    ), new_event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt) SELECT id, 'received', 0 FROM j
    )
    SELECT id, created_at FROM w
    """
)

# The first statement of a transaction whose reads must see one snapshot.
ONE_SNAPSHOT: TextClause = text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")

_WORKFLOW_COLUMNS = "w.id, w.client_id, w.request_hash, w.on_failure, w.created_at, w.cancelled_at"

WORKFLOW_BY_KEY: TextClause = text(
    f"""
    SELECT {_WORKFLOW_COLUMNS} FROM jobrelay.workflows w
    WHERE w.client_id = :client_id AND w.idempotency_key = :idempotency_key
    """
)

# :client_id NULL: any client's (operators and the CLI).
WORKFLOW_BY_ID: TextClause = text(
    f"""
    SELECT {_WORKFLOW_COLUMNS} FROM jobrelay.workflows w
    WHERE w.id = :id AND (CAST(:client_id AS uuid) IS NULL OR w.client_id = :client_id)
    """
)

# A workflow's jobs in the order they were submitted (their ids are time-ordered), each with the
# refs of its parents.
WORKFLOW_JOBS: TextClause = text(
    """
    SELECT j.id, j.workflow_ref AS ref, j.type, j.state, j.last_error_code, j.progress,
           coalesce(ARRAY(SELECT p.workflow_ref FROM jobrelay.job_dependencies d
                          JOIN jobrelay.jobs p ON p.id = d.parent_id
                          WHERE d.job_id = j.id ORDER BY p.id), '{}') AS after
    FROM jobrelay.jobs j WHERE j.workflow_id = :id
    ORDER BY j.id
    """
)

# Keyset pagination, newest first (ix_workflows_created_at_id), of one client's workflows or
# (:client_id NULL) everyone's, and of one workflow state (:state NULL: any): each with its jobs
# counted by state (through ix_jobs_workflow_id) and its state, as
# ``core/workflows.py::workflow_state`` derives it from them (a test holds the two together).
_CAN_RUN = _state_in(frozenset(JobState) - TERMINAL_STATES - {JobState.WAITING})
LIST_WORKFLOWS: TextClause = text(
    f"""
    SELECT w.id, w.client_id, w.on_failure, w.created_at, w.cancelled_at, c.counts, st.state
    FROM jobrelay.workflows w
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_object_agg(s.state, s.n), '{{}}'::jsonb) AS counts,
               coalesce(bool_or(s.state <> '{JobState.SUCCEEDED}'), false) AS unsucceeded,
               coalesce(bool_or(s.{_CAN_RUN}), false) AS can_run
        FROM (SELECT j.state, count(*) AS n FROM jobrelay.jobs j
              WHERE j.workflow_id = w.id GROUP BY j.state) s
    ) c
    CROSS JOIN LATERAL (
        SELECT CASE WHEN NOT c.unsucceeded THEN '{WorkflowState.SUCCEEDED}'
                    WHEN w.cancelled_at IS NOT NULL THEN '{WorkflowState.CANCELLED}'
                    WHEN c.can_run THEN '{WorkflowState.RUNNING}'
                    ELSE '{WorkflowState.FAILED}' END AS state
    ) st
    WHERE (CAST(:client_id AS uuid) IS NULL OR w.client_id = :client_id)
      AND (CAST(:state AS text) IS NULL OR st.state = CAST(:state AS text))
      AND (CAST(:after_created_at AS timestamptz) IS NULL
           OR (w.created_at, w.id)
              < (CAST(:after_created_at AS timestamptz), CAST(:after_id AS uuid)))
    ORDER BY w.created_at DESC, w.id DESC
    LIMIT :limit
    """
)

# The cancel of a workflow, first step: from now on nothing of it is claimed, replayed or
# queued (``_not_in_cancelled_workflow``, ``_dependents_of``). The first cancel's time is kept.
MARK_WORKFLOW_CANCELLED: TextClause = text(
    """
    UPDATE jobrelay.workflows SET cancelled_at = coalesce(cancelled_at, now())
    WHERE id = :id AND (CAST(:client_id AS uuid) IS NULL OR client_id = :client_id)
    RETURNING id
    """
)

_LIVE_NOT_ASKED = f"""{_state_in(frozenset(JobState) - TERMINAL_STATES)}
          AND NOT (state = '{JobState.RUNNING}' AND cancel_requested_at IS NOT NULL)"""

# Then its jobs: those that have not started cancelled (CANCEL), the running ones asked to stop
# (as REQUEST_CANCEL). Rows another statement holds (a finish, a claim) are skipped rather than
# waited for, so this never waits in a cycle with a finish that holds a parent and wants its
# children; ``skipped`` says how many, and the caller runs it again until none is left.
CANCEL_WORKFLOW_JOBS: TextClause = text(
    f"""
    WITH targets AS (
        SELECT id FROM jobrelay.jobs
        WHERE workflow_id = :id AND {_LIVE_NOT_ASKED}
        ORDER BY id FOR UPDATE SKIP LOCKED
    ), cancelled AS (
        UPDATE jobrelay.jobs j SET state = '{CANCEL.target}', waiting_for = 0, finished_at = now(),
                          updated_at = now()
        FROM targets t WHERE j.id = t.id AND j.{_guard(CANCEL)}
        RETURNING j.id, j.attempts
    ), requested AS (
        UPDATE jobrelay.jobs j SET cancel_requested_at = now(), updated_at = now()
        FROM targets t
        WHERE j.id = t.id AND j.state = '{JobState.RUNNING}' AND j.cancel_requested_at IS NULL
        RETURNING j.id, j.attempts
    ), event AS (
        INSERT INTO jobrelay.job_events (job_id, event, attempt, detail)
        SELECT id, 'cancelled', attempts, :detail FROM cancelled
        UNION ALL
        SELECT id, 'cancel_requested', attempts, :detail FROM requested
    )
    SELECT (SELECT count(*) FROM cancelled) AS cancelled,
           (SELECT count(*) FROM requested) AS requested,
           (SELECT count(*) FROM jobrelay.jobs
            WHERE workflow_id = :id AND {_LIVE_NOT_ASKED}
              AND id NOT IN (SELECT id FROM targets)) AS skipped
    """
)

# A claimed job's parents' results, by ref: ``context.parent_results``.
PARENT_RESULTS: TextClause = text(
    """
    SELECT p.workflow_ref AS ref, r.result
    FROM jobrelay.job_dependencies d JOIN jobrelay.jobs p ON p.id = d.parent_id
    LEFT JOIN jobrelay.job_results r ON r.job_id = p.id
    WHERE d.job_id = :job_id
    """
)

# What handlers last reported of their progress, for a group of running jobs (at most a few
# times a second each: consumer/progress.py), fenced by each row's lease token. Not a
# transition: the state is untouched.
REPORT_PROGRESS: TextClause = text(
    f"""
    UPDATE jobrelay.jobs j SET progress = a.progress
    FROM unnest(CAST(:ids AS uuid[]), CAST(:lease_tokens AS uuid[]),
                CAST(:progress AS jsonb[])) AS a(id, lease_token, progress)
    WHERE j.id = a.id AND j.lease_token = a.lease_token AND j.state = '{JobState.RUNNING}'
    RETURNING j.id
    """
)


# --- which statement makes which move (tests/unit/test_transitions.py checks each is guarded by
# its transitions, tests/integration/test_transition_guards.py what the guards let through)

# The moves a workflow's dependents make in a statement that ends one of their parents
# (``_dependents_of``): every statement that can end a job of a workflow makes them too.
_DEPENDENT_MOVES = (PARENTS_SUCCEEDED, DEPENDENCY_FAILED)

STATE_WRITES: dict[str, tuple[Transition, ...]] = {
    "CANCEL_JOB": (CANCEL, *_DEPENDENT_MOVES),
    "RESCUE_EXPIRED_LEASES": (RESCUE,),
    "CLAIM_JOBS": (CLAIM, RECLAIM),
    "QUARANTINE_EXHAUSTED": (EXHAUST, *_DEPENDENT_MOVES),
    "FINISH_JOBS": (*_WORKER_EXITS, *_DEPENDENT_MOVES),
    "DEFER_UNKNOWN_TYPE": (DEFER, UNKNOWN_TYPE, *_DEPENDENT_MOVES),
    "RELEASE_LEASE": (RELEASE,),
    "HOLD_JOB": (HOLD, HOLD_ABANDONED),
    "REPLAY_JOB": (REPLAY, RESTORE),
    "QUARANTINE_DELIVERY_LIMITED": (DELIVERY_LIMIT, *_DEPENDENT_MOVES),
    "CANCEL_WORKFLOW_JOBS": (CANCEL,),
}
# The transitions more than one statement makes: the dependents' moves, in every statement that
# can end a parent, and a cancel, of one job or of a workflow's.
SHARED_TRANSITIONS = frozenset({*_DEPENDENT_MOVES, CANCEL})


# --- broker blocks (docs/overload.md) ---------------------------------------------------------

# A dispatcher the broker blocks says so while it lasts: ``since`` stays from the first report,
# ``seen_at`` moves with every one, so a dispatcher that stopped while blocked fades from the
# stats (BROKER_BLOCKS) instead of being shown blocked forever.
REPORT_BROKER_BLOCK: TextClause = text(
    """
    INSERT INTO jobrelay.broker_blocks AS b (dispatcher, reason, since, seen_at)
    VALUES (:dispatcher, :reason, now(), now())
    ON CONFLICT (dispatcher) DO UPDATE
    SET reason = excluded.reason, seen_at = now(),
        since = CASE WHEN b.reason = excluded.reason THEN b.since ELSE now() END
    """
)

CLEAR_BROKER_BLOCK: TextClause = text(
    "DELETE FROM jobrelay.broker_blocks WHERE dispatcher = :dispatcher"
)

BROKER_BLOCKS: TextClause = text(
    """
    SELECT dispatcher, reason, since FROM jobrelay.broker_blocks
    WHERE seen_at > now() - make_interval(secs => CAST(:fresh_seconds AS float8))
    ORDER BY since, dispatcher
    """
)


# --- the console (docs/console.md) -----------------------------------------------------------

# The key the console signs its cookies and forms with (migration 0006 made it), read once per
# API process unless JOBRELAY_CONSOLE_SECRET is set.
CONSOLE_KEY: TextClause = text("SELECT secret FROM jobrelay.console_keys WHERE id = 1")


# --- flow control: admin (queues, pause and resume, runtime limits; db/flow_store.py) ---------

QUEUE_ROWS: TextClause = text(
    "SELECT name, paused_at, paused_by FROM jobrelay.queues ORDER BY name"
)

PAUSED_QUEUE_ROWS: TextClause = text(
    "SELECT name, paused_at, paused_by FROM jobrelay.queues "
    "WHERE paused_at IS NOT NULL ORDER BY name"
)

# The pause is exact at claim: a claim holds the queue's row (FOR KEY SHARE, CLAIM_JOBS and
# CLAIM_CANDIDATE) while it checks paused_at and claims, so this lock waits for the claims under
# way and every claim after it sees the pause. Pausing a paused queue keeps its first time and
# operator. (The figures of the queues: QUEUE_BACKLOGS and QUEUE_RUNNING, the relay's.)
PAUSE_QUEUE: TextClause = text(
    """
    WITH locked AS (SELECT name FROM jobrelay.queues WHERE name = :name FOR UPDATE)
    UPDATE jobrelay.queues AS q
    SET paused_at = coalesce(q.paused_at, now()),
        paused_by = CASE WHEN q.paused_at IS NULL THEN :paused_by ELSE q.paused_by END
    FROM locked
    WHERE q.name = locked.name
    RETURNING q.name, q.paused_at, q.paused_by
    """
)

# A resume wakes the dispatchers (the outbox's channel) so the queue's backlog is published at
# once, not at the next poll.
RESUME_QUEUE: TextClause = text(
    f"""
    WITH resumed AS (
        UPDATE jobrelay.queues SET paused_at = NULL, paused_by = NULL WHERE name = :name
        RETURNING name, paused_at, paused_by
    )
    SELECT name, paused_at, paused_by, pg_notify('{OUTBOX_CHANNEL}', '')::text AS notified
    FROM resumed
    """
)

_TYPE_LIMIT_COLUMNS = "type, concurrency, rate_count, rate_period_seconds, per_key"

TYPE_LIMIT_ROWS: TextClause = text(
    f"SELECT {_TYPE_LIMIT_COLUMNS} FROM jobrelay.type_limits ORDER BY type"
)

TYPE_LIMIT_ROW: TextClause = text(
    f"SELECT {_TYPE_LIMIT_COLUMNS} FROM jobrelay.type_limits WHERE type = :type"
)

SET_TYPE_LIMIT: TextClause = text(
    f"""
    INSERT INTO jobrelay.type_limits AS t ({_TYPE_LIMIT_COLUMNS}, updated_at)
    VALUES (:type, :concurrency, :rate_count, :rate_period_seconds, :per_key, now())
    ON CONFLICT (type) DO UPDATE
    SET concurrency = excluded.concurrency, rate_count = excluded.rate_count,
        rate_period_seconds = excluded.rate_period_seconds, per_key = excluded.per_key,
        updated_at = now()
    RETURNING {_TYPE_LIMIT_COLUMNS}
    """
)

CLEAR_TYPE_LIMIT: TextClause = text(
    "DELETE FROM jobrelay.type_limits WHERE type = :type RETURNING type"
)

# --- Django's Tasks framework (jobrelay/django, docs/django.md) ----------------------------

# One job as a Django TaskResult shows it, if :client (a client's name or id) owns it: the job
# and its stored result, when each attempt started (the journal's claims, whose detail names
# the consumer: Django's worker_ids), and every failed attempt's error document.
DJANGO_TASK_RESULT: TextClause = text(
    """
    SELECT j.id, j.type, j.payload, j.state, j.attempts, j.created_at, j.finished_at,
           r.result,
           coalesce((SELECT array_agg(e.at ORDER BY e.id) FROM jobrelay.job_events e
                     WHERE e.job_id = j.id AND e.event = 'claimed'), '{}') AS claimed_at,
           coalesce((SELECT array_agg(coalesce(e.detail, '') ORDER BY e.id)
                     FROM jobrelay.job_events e
                     WHERE e.job_id = j.id AND e.event = 'claimed'), '{}') AS claimed_by,
           coalesce((SELECT jsonb_agg(e.error ORDER BY e.id) FROM jobrelay.job_events e
                     WHERE e.job_id = j.id AND e.error IS NOT NULL), '[]') AS errors
    FROM jobrelay.jobs j
    JOIN jobrelay.clients c ON c.id = j.client_id
    LEFT JOIN jobrelay.job_results r ON r.job_id = j.id
    WHERE j.id = CAST(:id AS uuid) AND (c.name = :client OR CAST(c.id AS text) = :client)
    """
)


# --- job types registered by the consumers (db/type_store.py; docs/job-types.md) -------------

# A consumer registered types: every API process reloads its catalog (core/type_catalog.py).
TYPES_CHANNEL = "jobrelay_job_types"
# The API's listening connection hears the registrations too (api/notifications.py).
LISTEN_API_TYPES = f"{LISTEN_API}; LISTEN {TYPES_CHANNEL}"

_JOB_TYPE_COLUMNS = """
    name, payload_schema, max_attempts, priority, timeout_seconds, concurrency, rate_count,
    rate_period_seconds, per_key, description, registered_by, api
"""

# Every type of a consumer's registry in one statement, one array per column, in name order
# (two consumers registering the same types lock their rows in the same order). The last
# writer wins each row; no row is ever deleted here. One notification for the whole set.
# Every registered type's name: the queues `jobrelay queues list` reads beside the named ones.
JOB_TYPE_NAMES: TextClause = text("SELECT name FROM jobrelay.job_types ORDER BY name")

# A consumer consuming the queues of :names says so until :seconds from now (the latest of its
# peers' wins); rows locked in name order, so that consumers of overlapping types never deadlock.
MARK_TYPES_SERVED: TextClause = text(
    """
    UPDATE jobrelay.job_types t
    SET served_until = greatest(t.served_until, now() + make_interval(secs => :seconds))
    FROM (SELECT name FROM jobrelay.job_types WHERE name = ANY(CAST(:names AS text[]))
          ORDER BY name FOR UPDATE) AS locked
    WHERE t.name = locked.name
    """
)

# Live jobs of the types no consumer serves now, by type: what `jobrelay stats` and the console
# show as no_consumer.
NO_CONSUMER_BY_TYPE: TextClause = text(
    f"""
    SELECT j.type, count(*) AS n FROM jobrelay.jobs j
    WHERE {_NO_CONSUMER} GROUP BY 1 ORDER BY 2 DESC, 1
    """
)

REGISTER_JOB_TYPES: TextClause = text(
    f"""
    WITH registered AS (
        INSERT INTO jobrelay.job_types AS t ({_JOB_TYPE_COLUMNS}, registered_at)
        SELECT {_JOB_TYPE_COLUMNS}, now()
        FROM unnest(
            CAST(:names AS text[]), CAST(:payload_schemas AS jsonb[]),
            CAST(:max_attempts AS int[]), CAST(:priorities AS smallint[]),
            CAST(:timeouts AS float8[]), CAST(:concurrencies AS int[]),
            CAST(:rate_counts AS int[]), CAST(:rate_periods AS int[]),
            CAST(:per_keys AS boolean[]), CAST(:descriptions AS text[]),
            CAST(:registered_by AS text[]), CAST(:apis AS boolean[])
        ) AS r({_JOB_TYPE_COLUMNS})
        ORDER BY name
        ON CONFLICT (name) DO UPDATE
        SET payload_schema = excluded.payload_schema, max_attempts = excluded.max_attempts,
            priority = excluded.priority, timeout_seconds = excluded.timeout_seconds,
            concurrency = excluded.concurrency, rate_count = excluded.rate_count,
            rate_period_seconds = excluded.rate_period_seconds, per_key = excluded.per_key,
            description = excluded.description, registered_by = excluded.registered_by,
            api = excluded.api, registered_at = now()
        RETURNING t.name
    )
    SELECT count(*) AS registered, pg_notify('{TYPES_CHANNEL}', '')::text AS notified
    FROM registered
    """
)

JOB_TYPE_ROWS: TextClause = text(
    f"SELECT {_JOB_TYPE_COLUMNS}, registered_at FROM jobrelay.job_types ORDER BY name"
)
