"""Preload a migrated jobrelay database with finished jobs, fast: set-based SQL in chunks.

Every job looks like one that went through the real path (accept → relay → claim → finish):

- a ``jobs`` row: ``succeeded`` with ``attempts`` 1, or (``QUARANTINE_MODULUS``: about 3%)
  ``quarantined`` with one of ``QUARANTINE_CODES`` and its ``last_error``;
- its ``outbox`` row, published (one publish attempt), which is its ``published`` entry;
- its claim and, succeeded, its success in its row (the lean journal, migration 0018), and,
  quarantined, one ``job_events`` row (an ``unexpected_error`` carries its failure document as
  the consumer stores it);
- a ``job_results`` row for each succeeded job.

Jobs are spread round-robin over ``FILL_CLIENTS`` clients (with known tokens, so a benchmark can
list a client's jobs through the API) and ``JOB_TYPES``. Times are backdated: the first
``1 - RECENT_FRACTION`` of the jobs were created over one day ending ``OLD_AGE`` ago (older than
the dispatcher's default retention of 7 days), the rest over the last hour. Rows go in in
creation order, as a live system appends them.

One chunk (``CHUNK`` jobs) is one statement and one transaction. Every trigger fires as in
production: the schema's own (e.g. counters of finished jobs) must see the rows, and foreign-key
checks come with them (turning all triggers off with ``session_replication_role = replica`` was
1.7x faster, and wrong).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

from jobrelay.core.fingerprint import request_hash, token_hash
from jobrelay.db import queries
from jobrelay.db.engine import libpq_url

FILL_CLIENTS = 4
CLIENT_PREFIX = "storage-fill-"
JOB_TYPES = ("demo.sleep", "catalog.export", "report.render", "mail.send")
PAYLOAD = {"seconds": 0}
RESULT = {"slept": 0}
MAX_ATTEMPTS = 3
# Job n is quarantined when n mod QUARANTINE_MODULUS < QUARANTINED (3 of 97: 3.1%); a prime
# modulus, so quarantined jobs are spread over every client and type.
QUARANTINE_MODULUS = 97
QUARANTINED = 3
QUARANTINE_CODES = ("unexpected_error", "attempts_exhausted", "delivery_limit")
QUARANTINE_ERRORS = (
    "RuntimeError: report template missing",
    f"no attempts left ({MAX_ATTEMPTS} of {MAX_ATTEMPTS})",
    "the broker dead-lettered the message after 50 death(s)",
)
FAILURE = {
    "class": "RuntimeError",
    "message": "report template missing",
    "traceback": (
        "Traceback (most recent call last):\n"
        '  File "/app/jobrelay/consumer/worker.py", line 301, in _call_handler\n'
        "    return await handler(context, payload)\n"
        '  File "/app/handlers/reports.py", line 42, in render\n'
        "    template = templates[payload.name]\n"
        "RuntimeError: report template missing\n"
    ),
}
OLD_AGE = timedelta(days=10)
OLD_SPAN = timedelta(days=1)
RECENT_SPAN = timedelta(hours=1)
RECENT_FRACTION = 0.01
CHUNK = 100_000


# A UUIDv7 of the job's creation time, as ``jobrelay.core.ids.uuid7_at`` makes it: 48 bits of
# Unix milliseconds over the first six bytes of a random UUIDv4 (``r``), the version nibble set
# to 7 (the v4's variant bits are already RFC 4122's).
_UUID7_OF_CREATED = """CAST(encode(set_byte(
    overlay(r PLACING substring(int8send(CAST(floor(extract(epoch FROM created) * 1000) AS bigint))
                                FROM 3) FROM 1 FOR 6),
    6, (get_byte(r, 6) & 15) | 112), 'hex') AS uuid)"""


def job_id_sql(*, time_ordered: bool = True) -> str:
    """The SQL expression that makes a job's id from its ``created`` time (and ``r``, 16 random
    bytes): a UUIDv7 of the creation time, laid out as ``jobrelay.core.ids`` makes them, or
    (``time_ordered=False``) a random UUIDv4 as jobrelay made them before."""
    return _UUID7_OF_CREATED if time_ordered else "gen_random_uuid()"


def client_token(index: int) -> str:
    """The bearer token of fill client ``index`` (a benchmark database's clients only)."""
    return f"jr_storage_fill_{index}"


def client_name(index: int) -> str:
    return f"{CLIENT_PREFIX}{index}"


# One chunk: jobs lo..hi with their outbox rows, results and journal. ``g`` computes each job's
# values once (ids included: the outbox id comes from its sequence here, so that the
# `published` event can name it); every INSERT reads it in creation order.
_CHUNK_SQL = """
WITH g AS MATERIALIZED (
    SELECT n, created, {job_id} AS id,
           nextval(pg_get_serial_sequence('outbox', 'id')) AS outbox_id,
           nextval('jobrelay.job_events_id_seq') AS journal_id,
           nextval('jobrelay.job_events_id_seq') AS claim_seq,
           nextval('jobrelay.job_events_id_seq') AS end_seq,
           (CAST(%(clients)s AS uuid[]))[1 + mod(n, CAST(%(client_count)s AS bigint))] AS client_id,
           1 + mod(n / %(client_count)s, %(type_count)s) AS t,
           CASE WHEN mod(n, %(modulus)s) < %(quarantined)s
                THEN 1 + mod(n / %(modulus)s, %(code_count)s) END AS q
    FROM (
        SELECT n, uuid_send(gen_random_uuid()) AS r,
               CASE WHEN n <= %(old)s
                    THEN %(old_start)s + (n - 1) * CAST(%(old_step)s AS interval)
                    ELSE %(recent_start)s + (n - %(old)s - 1) * CAST(%(recent_step)s AS interval)
               END AS created
        FROM generate_series(CAST(%(lo)s AS bigint), CAST(%(hi)s AS bigint)) AS n
    ) AS s
), j AS (
    SELECT *, created + interval '30 ms' AS finished,
           CASE WHEN q = 2 THEN %(max_attempts)s ELSE 1 END AS attempts,
           (CAST(%(codes)s AS text[]))[q] AS code
    FROM g
), jobs_in AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload, state,
                      attempts, max_attempts, available_at, last_error_code, last_error,
                      created_at, updated_at, finished_at, claimed_seq, claimed_at, claimed_by,
                      finished_seq)
    SELECT id, client_id, 'fill-' || n, (CAST(%(hashes)s AS text[]))[t],
           (CAST(%(types)s AS text[]))[t], CAST(%(payload)s AS jsonb),
           CASE WHEN q IS NULL THEN 'succeeded' ELSE 'quarantined' END,
           attempts, %(max_attempts)s, created, code, (CAST(%(errors)s AS text[]))[q],
           created, finished, finished, claim_seq, created + interval '10 ms',
           'consumer storage-fill:1', CASE WHEN q IS NULL THEN end_seq END
    FROM j
), outbox_in AS (
    INSERT INTO jobrelay.outbox (id, job_id, available_at, created_at, published_at,
        publish_attempts, journal_id, leased_at, delivers_attempt)
    SELECT outbox_id, id, created, created, created + interval '5 ms', 1, journal_id,
           created + interval '4 ms', 1 FROM j
), results_in AS (
    INSERT INTO jobrelay.job_results (job_id, result, attempt, created_at)
    SELECT id, CAST(%(result)s AS jsonb), attempts, finished FROM j WHERE q IS NULL
)
INSERT INTO jobrelay.job_events (id, job_id, at, event, attempt, detail, error)
SELECT end_seq, id, finished, 'quarantined', attempts, code,
       CASE WHEN q = 1 THEN CAST(%(failure)s AS jsonb) END
FROM j WHERE q IS NOT NULL
"""


@dataclass(frozen=True)
class FillReport:
    jobs: int
    seconds: float
    job_id: str  # the SQL expression the ids came from

    @property
    def id_kind(self) -> str:
        return "UUIDv7 of created_at" if self.job_id == _UUID7_OF_CREATED else self.job_id

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


def create_clients(conn: psycopg.Connection) -> list[str]:
    """The fill's clients (created if missing); their ids, as text, in index order."""
    ids = []
    for index in range(FILL_CLIENTS):
        conn.execute(
            "INSERT INTO jobrelay.clients (id, name, token_hash) VALUES (gen_random_uuid(), %s, "
            "%s) "
            "ON CONFLICT (name) DO NOTHING",
            (client_name(index), token_hash(client_token(index))),
        )
        row = conn.execute("SELECT id FROM jobrelay.clients WHERE name = %s", (client_name(index),))
        ids.append(str(row.fetchone()[0]))  # type: ignore[index]
    return ids


def fill(
    url: str,
    jobs: int,
    *,
    chunk: int = CHUNK,
    time_ordered: bool = True,
    progress: Callable[[int, float], None] | None = None,
) -> FillReport:
    """Insert ``jobs`` finished jobs into the migrated, empty database at ``url``."""
    now = datetime.now(UTC)
    recent = max(1, round(jobs * RECENT_FRACTION)) if jobs > 1 else 0
    old = jobs - recent
    params: dict[str, object] = {
        "client_count": FILL_CLIENTS,
        "type_count": len(JOB_TYPES),
        "modulus": QUARANTINE_MODULUS,
        "quarantined": QUARANTINED,
        "code_count": len(QUARANTINE_CODES),
        "old": old,
        "old_start": now - OLD_AGE - OLD_SPAN,
        "old_step": OLD_SPAN / max(old, 1),
        "recent_start": now - RECENT_SPAN,
        "recent_step": RECENT_SPAN / max(recent, 1),
        "max_attempts": MAX_ATTEMPTS,
        "codes": list(QUARANTINE_CODES),
        "errors": list(QUARANTINE_ERRORS),
        "types": list(JOB_TYPES),
        "hashes": [request_hash(job_type, PAYLOAD) for job_type in JOB_TYPES],
        "payload": json.dumps(PAYLOAD),
        "result": json.dumps(RESULT),
        "failure": json.dumps(FAILURE),
    }
    started = time.perf_counter()
    with psycopg.connect(libpq_url(url)) as conn:
        params["clients"] = create_clients(conn)
        conn.commit()
        id_expression = job_id_sql(time_ordered=time_ordered)
        statement = _CHUNK_SQL.format(job_id=id_expression)
        for lo in range(1, jobs + 1, chunk):
            hi = min(jobs, lo + chunk - 1)
            conn.execute(statement, {**params, "lo": lo, "hi": hi})
            conn.commit()
            if progress:
                progress(hi, time.perf_counter() - started)
    return FillReport(jobs, time.perf_counter() - started, id_expression)


def settle(url: str) -> float:
    """Fold the finished-job count deltas (as the dispatcher's maintenance does), VACUUM
    ANALYZE the database, then CHECKPOINT (as after a quiet period: visibility map set,
    statistics fresh, dirty pages written). Returns the seconds it took."""
    started = time.perf_counter()
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        deltas = conn.execute("SELECT to_regclass('jobrelay.job_count_deltas')").fetchone()
        if deltas and deltas[0]:  # the schema keeps counts (revision 0003 on)
            conn.execute(queries.FOLD_JOB_COUNTS.text)
        conn.execute("VACUUM ANALYZE")
        conn.execute("CHECKPOINT")
    return time.perf_counter() - started


def filled_jobs(conn: psycopg.Connection) -> int:
    """How many jobs the fill's clients own (a database filled earlier, kept with --keep)."""
    row = conn.execute(
        "SELECT count(*) FROM jobrelay.jobs j JOIN jobrelay.clients c ON c.id = j.client_id WHERE "
        "c.name LIKE %s",
        (CLIENT_PREFIX + "%",),
    ).fetchone()
    return int(row[0]) if row else 0


def fill_client_ids(conn: psycopg.Connection) -> list[str]:
    rows = conn.execute(
        "SELECT id FROM jobrelay.clients WHERE name LIKE %s ORDER BY name", (CLIENT_PREFIX + "%",)
    ).fetchall()
    return [str(row[0]) for row in rows]
