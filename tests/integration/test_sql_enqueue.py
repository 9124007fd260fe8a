"""``jobrelay.jobrelay_enqueue(...)``, the SQL function of migration 0010, against real
PostgreSQL: from psycopg and from a real psql session, beside ``jobrelay.enqueue`` and the API
under the same idempotency keys, and (for "the job runs") with a real dispatcher and consumer.

Its canonical JSON and request hash are checked against the Python ones they must equal
(``core/fingerprint.py``, ``core/idempotency.py``) on many generated payloads."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

import jobrelay
from jobrelay.core.fingerprint import canonical_json
from jobrelay.core.idempotency import Submission
from jobrelay.core.jobs import Flow, JobRequest
from jobrelay.core.states import JobState
from jobrelay.core.type_catalog import RegisteredType
from jobrelay.db.client_store import ClientStore
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore
from tests.conftest import auth
from tests.support.system import System

EXPORT_TYPE = "catalog.export"
EXPORT = '{"course": "JavaScript"}'

ENQUEUE = "SELECT jobrelay.jobrelay_enqueue(%s, %s, %s::jsonb, %s)"
ENQUEUE_AT = "SELECT jobrelay.jobrelay_enqueue(%s, %s, %s::jsonb, %s, run_at => %s, priority => %s)"

# Many examples, each one round trip to the server: the functions under test are pure, so one
# connection serves them all.
MANY = hypothesis_settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture
def sql(database_url: str) -> Iterator[psycopg.Connection[Any]]:
    """A plain psycopg connection on the test's database, as another service would open."""
    with psycopg.connect(libpq_url(database_url)) as connection:
        yield connection


def enqueue(
    connection: psycopg.Connection[Any],
    key: str,
    payload: str = EXPORT,
    *,
    client: str = "alice",
    job_type: str = EXPORT_TYPE,
    run_at: datetime | None = None,
    priority: int | None = None,
) -> uuid.UUID:
    row = connection.execute(
        ENQUEUE_AT, (client, job_type, payload, key, run_at, priority)
    ).fetchone()
    assert row is not None
    job_id: uuid.UUID = row[0]
    return job_id


def everything(database_url: str) -> dict[str, int]:
    """How many jobs, outbox rows and journal entries there are, seen from outside."""
    with psycopg.connect(libpq_url(database_url), autocommit=True) as connection:
        row = connection.execute(
            "SELECT (SELECT count(*) FROM jobrelay.jobs), (SELECT count(*) FROM jobrelay.outbox), "
            "(SELECT count(*) FROM jobrelay.job_journal)"
        ).fetchone()
    assert row is not None
    return dict(zip(("jobs", "outbox", "journal"), row, strict=True))


def refused(error: psycopg.Error) -> tuple[str | None, str]:
    """The SQLSTATE of an error and the code word its message starts with."""
    return error.sqlstate, (error.diag.message_primary or "").split(":")[0]


# --- committed: the job, its outbox row and its event; rolled back: nothing ---------------------


async def test_a_committed_job_is_queued_with_its_outbox_row_and_seen_by_the_api(
    database_url: str,
    sql: psycopg.Connection[Any],
    store: Store,
    api: httpx.AsyncClient,
    alice: str,
) -> None:
    job_id = enqueue(sql, "export-js")
    assert everything(database_url) == {"jobs": 0, "outbox": 0, "journal": 0}  # not yet
    sql.commit()

    stored = await store.get_job(job_id)
    assert stored is not None
    assert stored.state is JobState.QUEUED and stored.attempts == 0 and stored.max_attempts == 3
    assert (stored.type, stored.payload, stored.idempotency_key) == (
        EXPORT_TYPE,
        {"course": "JavaScript"},
        "export-js",
    )
    assert stored.run_at is None and stored.priority == 0
    trace = await store.trace(job_id)
    assert trace is not None
    [outbox] = trace.outbox
    assert outbox.available_at == stored.available_at and outbox.published_at is None
    assert [entry.event for entry in await store.job_events(job_id)] == ["received"]
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}

    response = await api.get(f"/v1/jobs/{job_id}", headers=auth(alice))
    assert response.status_code == 200, response.text
    view = response.json()
    assert (view["id"], view["state"], view["payload"]) == (
        str(job_id),
        "queued",
        {"course": "JavaScript"},
    )


async def test_a_rolled_back_transaction_leaves_no_job_and_the_callers_rows_go_with_it(
    database_url: str, sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    sql.execute("CREATE TABLE orders (id text PRIMARY KEY)")
    sql.commit()
    sql.execute("INSERT INTO orders VALUES ('order-1')")
    dropped = enqueue(sql, "order-1")
    sql.rollback()
    sql.execute("INSERT INTO orders VALUES ('order-2')")
    kept = enqueue(sql, "order-2")
    sql.commit()

    assert await store.get_job(dropped) is None
    assert await store.get_job(kept) is not None
    assert sql.execute("SELECT id FROM orders").fetchall() == [("order-2",)]
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_ids_are_uuidv7_in_the_order_they_were_made(
    sql: psycopg.Connection[Any], alice: str
) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    ids = [enqueue(sql, f"k{number}") for number in range(5)]
    sql.commit()

    assert {job_id.version for job_id in ids} == {7}
    assert {job_id.variant for job_id in ids} == {uuid.RFC_4122}
    made_at = [datetime.fromtimestamp((job_id.int >> 80) / 1000, UTC) for job_id in ids]
    assert made_at == sorted(made_at) and before <= made_at[0] <= datetime.now(UTC)


# --- idempotency --------------------------------------------------------------------------------


async def test_the_same_key_and_request_again_is_the_same_job(
    database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    first = enqueue(sql, "export-js")
    in_the_same_transaction = enqueue(sql, "export-js", '{ "course" : "JavaScript" }')
    sql.commit()
    later = enqueue(sql, "export-js")
    sql.commit()

    assert first == in_the_same_transaction == later
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


@pytest.mark.parametrize(
    "other",
    [
        {"payload": '{"course": "Go"}'},
        {"job_type": "catalog.import"},
        {"priority": 0},  # a priority given is part of the request, 0 too (Flow.given)
        {"run_at": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
    ids=lambda other: next(iter(other)),
)
async def test_another_request_under_the_key_raises_idempotency_conflict_and_writes_nothing(
    other: dict[str, Any], database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    first = enqueue(sql, "export-js")
    sql.commit()

    with pytest.raises(psycopg.errors.UniqueViolation) as raised:
        enqueue(sql, "export-js", **other)
    sql.rollback()

    assert refused(raised.value) == ("23505", "idempotency_conflict")
    assert raised.value.diag.message_detail == f"job_id={first}"
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_a_savepoint_keeps_the_transaction_going_after_a_conflict(
    database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    sql.execute("CREATE TABLE orders (id text PRIMARY KEY)")
    first = enqueue(sql, "export-js")
    with pytest.raises(psycopg.errors.UniqueViolation), sql.transaction():  # SAVEPOINT
        enqueue(sql, "export-js", '{"course": "Go"}')
    sql.execute("INSERT INTO orders VALUES ('order-1')")
    sql.commit()

    assert sql.execute("SELECT id FROM orders").fetchall() == [("order-1",)]
    assert enqueue(sql, "export-js") == first
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_a_key_another_open_transaction_holds_waits_for_its_end(
    outcome: str, database_url: str, alice: str
) -> None:
    url = libpq_url(database_url)
    async with (
        await psycopg.AsyncConnection.connect(url) as first,
        await psycopg.AsyncConnection.connect(url) as second,
    ):
        made = await first.execute(ENQUEUE, ("alice", EXPORT_TYPE, EXPORT, "export-js"))
        [made_id] = await made.fetchall()
        waiting = asyncio.create_task(
            second.execute(ENQUEUE, ("alice", EXPORT_TYPE, EXPORT, "export-js"))
        )
        await asyncio.sleep(0.3)
        assert not waiting.done()  # ON CONFLICT waits for the first transaction
        await (first.commit() if outcome == "commit" else first.rollback())
        [seen_id] = await (await asyncio.wait_for(waiting, 10)).fetchall()
        await second.commit()

    assert (seen_id == made_id) is (outcome == "commit")
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


# --- a sequence (migration 0020) ---------------------------------------------------------------

ENQUEUE_IN_SEQUENCE = "SELECT jobrelay.jobrelay_enqueue(%s, %s, %s::jsonb, %s, sequence_key => %s)"


def relayable(database_url: str, job_id: uuid.UUID) -> tuple[bool, bool]:
    """(waits in its sequence, has an outbox row) of a job, seen from outside."""
    with psycopg.connect(libpq_url(database_url)) as connection:
        row = connection.execute(
            "SELECT sequence_waits, EXISTS (SELECT 1 FROM jobrelay.outbox o WHERE o.job_id = j.id) "
            "FROM jobrelay.jobs j WHERE id = %s",
            (job_id,),
        ).fetchone()
    assert row is not None
    return bool(row[0]), bool(row[1])


async def test_a_sequences_second_job_from_sql_waits_behind_the_first_from_python(
    database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    ahead = jobrelay.enqueue(
        sql, client="alice", key="a", sequence_key="s", type=EXPORT_TYPE, payload=json.loads(EXPORT)
    )
    [behind] = sql.execute(ENQUEUE_IN_SEQUENCE, ("alice", EXPORT_TYPE, EXPORT, "b", "s")).fetchone()
    [other] = sql.execute(ENQUEUE_IN_SEQUENCE, ("alice", EXPORT_TYPE, EXPORT, "c", "t")).fetchone()
    [again] = sql.execute(ENQUEUE_IN_SEQUENCE, ("alice", EXPORT_TYPE, EXPORT, "b", "s")).fetchone()
    sql.commit()

    assert relayable(database_url, ahead.id) == (False, True)
    assert relayable(database_url, behind) == (True, False)  # no outbox row until released
    assert relayable(database_url, other) == (False, True)  # another key runs in parallel
    assert again == behind


async def test_a_sequences_lock_from_sql_is_held_until_the_transaction_ends(
    database_url: str, alice: str
) -> None:
    url = libpq_url(database_url)
    async with (
        await psycopg.AsyncConnection.connect(url) as first,
        await psycopg.AsyncConnection.connect(url) as second,
    ):
        made = await first.execute(ENQUEUE_IN_SEQUENCE, ("alice", EXPORT_TYPE, EXPORT, "a", "s"))
        [ahead] = await made.fetchone() or ()
        waiting = asyncio.create_task(
            second.execute(ENQUEUE_IN_SEQUENCE, ("alice", EXPORT_TYPE, EXPORT, "b", "s"))
        )
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the sequence's advisory lock, the first's until it ends
        await first.commit()
        [behind] = await (await asyncio.wait_for(waiting, 10)).fetchone() or ()
        await second.commit()

    # Read after the lock was granted: the first job, committed meanwhile, is ahead of it.
    assert relayable(database_url, ahead) == (False, True)
    assert relayable(database_url, behind) == (True, False)


async def test_a_sequence_key_too_long_raises_invalid_request(
    database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    with pytest.raises(psycopg.Error) as raised:
        sql.execute(ENQUEUE_IN_SEQUENCE, ("alice", EXPORT_TYPE, EXPORT, "k", "s" * 201))
    sql.rollback()

    assert refused(raised.value) == ("22023", "invalid_request")
    assert everything(database_url) == {"jobs": 0, "outbox": 0, "journal": 0}


# --- one key, two paths: Python or the API first, then SQL -------------------------------------


async def test_a_key_enqueued_from_python_is_the_same_job_from_sql(
    database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    payload = {"b": 1.5, "a": [1, "ü", {"y": None, "x": True}], "n": 12345678901234567890}
    job = jobrelay.enqueue(sql, client="alice", type=EXPORT_TYPE, payload=payload, key="k")
    sql.commit()
    # The same JSON written otherwise: other key order, spaces, an escape, 1.50 for 1.5.
    spelled_otherwise = (
        '{"n": 12345678901234567890, "a": [1, "\\u00fc", {"x": true, "y": null}], "b": 1.50}'
    )

    assert enqueue(sql, "k", spelled_otherwise) == job.id
    with pytest.raises(psycopg.errors.UniqueViolation):
        enqueue(sql, "k", '{"b": 1.5}')
    sql.rollback()
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_a_key_enqueued_from_sql_is_the_same_job_from_python(
    database_url: str, sql: psycopg.Connection[Any], alice: str
) -> None:
    run_at = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone(timedelta(hours=-5)))
    job_id = enqueue(sql, "later", '{"to": "ops"}', run_at=run_at, priority=7)
    sql.commit()

    again = jobrelay.enqueue(
        sql,
        client="alice",
        type=EXPORT_TYPE,
        payload={"to": "ops"},
        key="later",
        run_at=run_at.astimezone(UTC),
        priority=7,
    )
    with pytest.raises(jobrelay.IdempotencyConflict) as raised:
        jobrelay.enqueue(
            sql, client="alice", type=EXPORT_TYPE, payload={"to": "ops"}, key="later", priority=7
        )
    sql.commit()

    assert again.id == job_id and raised.value.job_id == job_id
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_a_key_submitted_to_the_api_is_the_same_job_from_sql(
    database_url: str, sql: psycopg.Connection[Any], api: httpx.AsyncClient, alice: str
) -> None:
    body = {"type": "demo.sleep", "payload": {"seconds": 1.5}, "priority": 3}
    response = await api.post("/v1/jobs", json=body, headers=auth(alice, "nap"))
    assert response.status_code == 202, response.text

    same = enqueue(sql, "nap", '{"seconds": 1.50}', job_type="demo.sleep", priority=3)
    sql.commit()
    assert str(same) == response.json()["id"]
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


# --- the same rows as the Python accept, column by column ----------------------------------------

# What may differ between two jobs of one request under two keys: their identity and the
# database's clock. Everything else the accept writes (every column a later revision adds too)
# must be the same, or jobrelay_enqueue has drifted from ACCEPT_JOB (db/queries.py).
_OWN_COLUMNS = {
    "jobs": ("id", "idempotency_key", "created_at", "updated_at"),
    "outbox": ("id", "job_id", "created_at"),
    "job_events": ("id", "job_id", "at"),
}


def written_for(connection: psycopg.Connection[Any], job_id: uuid.UUID) -> dict[str, Any]:
    """Every row the accept wrote for the job, as JSON, without the columns of _OWN_COLUMNS."""
    rows: dict[str, Any] = {}
    for table, own in _OWN_COLUMNS.items():
        column = "id" if table == "jobs" else "job_id"
        found = connection.execute(
            f"SELECT to_jsonb(t) - CAST(%s AS text[]) FROM jobrelay.{table} t "
            f"WHERE t.{column} = %s ORDER BY t.id",
            (list(own), job_id),
        ).fetchall()
        rows[table] = [row for (row,) in found]
    return rows


async def test_a_job_from_sql_has_the_rows_of_one_from_python_and_the_api_column_by_column(
    sql: psycopg.Connection[Any], api: httpx.AsyncClient, alice: str
) -> None:
    run_at = datetime(2031, 5, 6, 7, 8, 9, 250000, tzinfo=UTC)  # due then on every path
    payload = {"seconds": 1.5}
    from_sql = enqueue(
        sql, "sql", json.dumps(payload), job_type="demo.sleep", run_at=run_at, priority=4
    )
    from_python = jobrelay.enqueue(
        sql,
        client="alice",
        type="demo.sleep",
        payload=payload,
        key="python",
        run_at=run_at,
        priority=4,
    ).id
    sql.commit()
    body = {"type": "demo.sleep", "payload": payload, "run_at": run_at.isoformat(), "priority": 4}
    response = await api.post("/v1/jobs", json=body, headers=auth(alice, "api"))
    assert response.status_code == 202, response.text
    from_api = uuid.UUID(response.json()["id"])

    written = written_for(sql, from_sql)
    assert written["jobs"] and written["outbox"]
    assert written["job_events"] == []  # a plain job's received entry is its row (job_journal)
    assert written_for(sql, from_python) == written
    assert written_for(sql, from_api) == written


async def test_a_caller_whose_search_path_leads_elsewhere_still_writes_jobrelays_tables(
    database_url: str, sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    """An application schema with its own "jobs" table first on the path, and a temporary
    "outbox": the function (called by its schema) writes jobrelay's rows, not theirs."""
    sql.execute("CREATE SCHEMA app")
    sql.execute("CREATE TABLE app.jobs (LIKE jobrelay.jobs INCLUDING ALL)")
    # Both for this transaction only: behind PgBouncer in transaction mode a session's SET and
    # temporary table would stay on the server connection the pool hands the store next.
    sql.execute("CREATE TEMPORARY TABLE outbox (LIKE jobrelay.outbox INCLUDING ALL) ON COMMIT DROP")
    sql.execute("SET LOCAL search_path = app, pg_temp")
    job_id = sql.execute(
        "SELECT jobrelay.jobrelay_enqueue(%s, %s, %s::jsonb, %s)",
        ("alice", EXPORT_TYPE, EXPORT, "elsewhere"),
    ).fetchone()
    counts = sql.execute(
        "SELECT (SELECT count(*) FROM app.jobs), (SELECT count(*) FROM pg_temp.outbox)"
    ).fetchone()
    sql.commit()

    assert job_id is not None and counts == (0, 0)
    job = await store.get_job(job_id[0])
    assert job is not None and job.idempotency_key == "elsewhere"
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


# --- the client ---------------------------------------------------------------------------------


async def test_an_unknown_or_disabled_client_raises_unknown_client(
    database_url: str, sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    await ClientStore(store).create_client("carol", "hash-of-carol", is_admin=False)
    await ClientStore(store).set_client_disabled("carol", disabled=True)
    for unknown, state in (
        ("mallory", "does not exist"),
        (str(uuid.uuid4()), "does not exist"),
        ("", "does not exist"),
        ("carol", "is disabled"),
    ):
        with pytest.raises(psycopg.errors.UndefinedObject) as raised:
            enqueue(sql, "export-js", client=unknown)
        sql.rollback()
        assert refused(raised.value) == ("42704", "unknown_client")
        assert (raised.value.diag.message_primary or "").endswith(state)
    assert everything(database_url) == {"jobs": 0, "outbox": 0, "journal": 0}


async def test_the_client_may_be_named_by_its_id_which_wins_over_a_name(
    sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    [alice_id] = [c.id for c in await ClientStore(store).list_clients() if c.name == "alice"]
    await ClientStore(store).create_client(str(alice_id), "hash-of-impostor", is_admin=False)

    by_id = enqueue(sql, "a", client=str(alice_id))
    by_bare_hex = enqueue(sql, "a", client=alice_id.hex.upper())
    by_name = enqueue(sql, "a", client="alice")
    sql.commit()

    assert by_id == by_bare_hex == by_name
    assert sql.execute("SELECT client_id FROM jobrelay.jobs").fetchall() == [(alice_id,)]


# --- arguments ----------------------------------------------------------------------------------

BEYOND_A_DOUBLE = '{"x": 1' + "0" * 309 + ".5}"  # Python reads it as infinity
# Python's json reads integers of up to 4,300 digits (sys.int_info.default_max_str_digits).
LONGEST_INTEGER = "9" * 4300


@pytest.mark.parametrize(
    ("arguments", "sqlstate"),
    [
        ({"client": None}, "22004"),
        ({"job_type": None}, "22004"),
        ({"payload": None}, "22004"),
        ({"key": None}, "22004"),
        ({"key": ""}, "22023"),
        ({"key": "has space"}, "22023"),
        ({"key": "k" * 201}, "22023"),
        ({"key": "schlüssel"}, "22023"),
        ({"job_type": ""}, "22023"),
        ({"job_type": "t" * 201}, "22023"),
        ({"payload": '["a", "list"]'}, "22023"),
        ({"payload": '"text"'}, "22023"),
        ({"payload": "null"}, "22023"),
        ({"payload": BEYOND_A_DOUBLE}, "22003"),
        ({"payload": '{"x": [-1' + LONGEST_INTEGER + "]}"}, "22003"),
        ({"priority": 101}, "22003"),
        ({"priority": -101}, "22003"),
        ({"run_at": "infinity"}, "22008"),
        ({"run_at": "10000-01-01 00:00:00+00"}, "22008"),
    ],
    ids=lambda value: repr(value)[:40] if isinstance(value, dict) else value,
)
async def test_a_bad_argument_raises_invalid_request_and_writes_nothing(
    arguments: dict[str, Any],
    sqlstate: str,
    database_url: str,
    sql: psycopg.Connection[Any],
    alice: str,
) -> None:
    call = {"client": "alice", "job_type": EXPORT_TYPE, "payload": EXPORT, "key": "k"}
    call |= {"run_at": None, "priority": None} | arguments
    with pytest.raises(psycopg.Error) as raised:
        sql.execute(
            "SELECT jobrelay.jobrelay_enqueue(%(client)s, %(job_type)s, %(payload)s::jsonb, "
            "%(key)s, "
            "%(run_at)s::timestamptz, %(priority)s)",
            call,
        )
    sql.rollback()

    assert refused(raised.value) == (sqlstate, "invalid_request")
    assert everything(database_url) == {"jobs": 0, "outbox": 0, "journal": 0}


async def test_an_integer_as_long_as_python_reads_is_taken_and_read_back(
    sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    job_id = enqueue(sql, "long", '{"n": -' + LONGEST_INTEGER + "}")
    sql.commit()

    job = await store.get_job(job_id)  # read back through Python's json, as a consumer reads it
    assert job is not None and job.payload == {"n": -int(LONGEST_INTEGER)}


# --- the schedule and the priority --------------------------------------------------------------


async def test_run_at_in_the_future_is_not_due_yet_and_the_priority_is_stored(
    sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    run_at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    later = enqueue(sql, "later", run_at=run_at, priority=-20)
    now = enqueue(sql, "now", priority=100)
    default = enqueue(sql, "default")
    sql.commit()

    stored = {job_id: await store.get_job(job_id) for job_id in (later, now, default)}
    assert {job_id: (job.priority if job else None) for job_id, job in stored.items()} == {
        later: -20,
        now: 100,
        default: 0,
    }
    job = stored[later]
    assert job is not None and job.run_at == job.available_at == run_at
    outbox = sql.execute(
        "SELECT job_id, available_at > now(), priority FROM jobrelay.outbox ORDER BY priority"
    ).fetchall()
    assert outbox == [(later, True, -20), (default, False, 0), (now, False, 100)]


async def test_a_job_of_a_registered_type_without_a_priority_gets_the_types_defaults(
    sql: psycopg.Connection[Any], store: Store, alice: str
) -> None:
    # As a consumer registers its types at start (core/type_catalog.py): the API gives their
    # submissions the type's priority and max_attempts, and so does SQL.
    registered = RegisteredType("shop.charge", {"type": "object"}, max_attempts=7, priority=40)
    await PgTypeStore(store).register_types([registered])
    default = enqueue(sql, "charge-1", job_type="shop.charge")
    own = enqueue(sql, "charge-2", job_type="shop.charge", priority=-5)
    unregistered = enqueue(sql, "export-1")
    sql.commit()

    rows = sql.execute(
        "SELECT id, priority, max_attempts FROM jobrelay.jobs WHERE id = ANY(%s)",
        [[default, own, unregistered]],
    ).fetchall()
    assert {row[0]: row[1:] for row in rows} == {
        default: (40, 7),
        own: (-5, 7),
        unregistered: (0, 3),
    }
    # The default is not part of the request: the same call again is the same job.
    assert enqueue(sql, "charge-1", job_type="shop.charge") == default


# --- from a real psql session -------------------------------------------------------------------


def psql(database_url: str, script: str) -> subprocess.CompletedProcess[str]:
    """``script`` through the psql binary, as an operator or a shell script would run it."""
    binary = shutil.which("psql") or "/usr/lib/postgresql/15/bin/psql"
    assert Path(binary).exists(), "the psql binary is needed for this test"
    return subprocess.run(
        [binary, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", libpq_url(database_url)],
        input=script,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


async def test_a_psql_session_enqueues_on_commit_and_nothing_on_rollback(
    database_url: str, store: Store, alice: str
) -> None:
    committed = psql(
        database_url,
        "BEGIN;\n"
        "SELECT jobrelay.jobrelay_enqueue('alice', 'catalog.export', '{\"course\": \"SQL\"}', "
        "'psql-1');\n"
        "COMMIT;\n",
    )
    rolled_back = psql(
        database_url,
        "BEGIN;\n"
        "SELECT jobrelay.jobrelay_enqueue('alice', 'catalog.export', '{\"course\": \"SQL\"}', "
        "'psql-2');\n"
        "ROLLBACK;\n",
    )

    assert committed.returncode == 0 and rolled_back.returncode == 0, committed.stderr
    job = await store.get_job(uuid.UUID(committed.stdout.strip()))
    assert job is not None and job.payload == {"course": "SQL"} and job.idempotency_key == "psql-1"
    assert await store.get_job(uuid.UUID(rolled_back.stdout.strip())) is None
    assert everything(database_url) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_psql_shows_a_conflict_with_its_code_word_and_the_holding_job(
    database_url: str, alice: str
) -> None:
    made = psql(database_url, "SELECT jobrelay.jobrelay_enqueue('alice', 't', '{}', 'k');")
    conflict = psql(
        database_url, "SELECT jobrelay.jobrelay_enqueue('alice', 't', '{\"a\": 1}', 'k');"
    )

    assert made.returncode == 0, made.stderr
    assert conflict.returncode == 3  # ON_ERROR_STOP: the script stopped at the error
    assert "ERROR:  idempotency_conflict: the key 'k' was used for another" in conflict.stderr
    assert f"DETAIL:  job_id={made.stdout.strip()}" in conflict.stderr


# --- committed, the job runs ---------------------------------------------------------------------


async def test_a_job_enqueued_from_sql_is_relayed_and_run(
    database_url: str, sql: psycopg.Connection[Any], system: System
) -> None:
    job_id = enqueue(sql, "sleep", '{"seconds": 0}', job_type="demo.sleep")
    sql.commit()
    queued = await stats(system)

    with system.running("sql"):
        await system.wait_for("succeeded", job_id, what="the job enqueued from SQL to succeed")

    events = [entry.event for entry in await system.store.job_events(job_id)]
    assert events[0] == "received" and "claimed" in events and events[-1] == "succeeded"
    assert events.count("published") == 1
    # Counted in the stats as a job the API accepted is (the finished ones by their trigger).
    assert queued["jobs_by_state"].get("queued") == 1
    assert (await stats(system))["jobs_by_state"].get("succeeded") == 1


async def test_a_sequence_enqueued_from_sql_runs_in_order_released_by_the_end_of_the_first(
    database_url: str, sql: psycopg.Connection[Any], system: System
) -> None:
    sleep = ("alice", "demo.sleep", '{"seconds": 0.2}')
    [ahead] = sql.execute(ENQUEUE_IN_SEQUENCE, (*sleep, "a", "s")).fetchone() or ()
    [behind] = sql.execute(ENQUEUE_IN_SEQUENCE, (*sleep, "b", "s")).fetchone() or ()
    sql.commit()

    with system.running("sql-sequence"):
        await system.wait_for("succeeded", behind, what="the second job of the sequence")

    with psycopg.connect(libpq_url(database_url)) as connection:
        first_end, second_claim = connection.execute(
            "SELECT (SELECT finished_at FROM jobrelay.jobs WHERE id = %s), "
            "(SELECT claimed_at FROM jobrelay.jobs WHERE id = %s)",
            (ahead, behind),
        ).fetchone() or (None, None)
    assert first_end is not None and second_claim is not None and second_claim >= first_end
    events = [entry.event for entry in await system.store.job_events(behind)]
    assert "released" in events and events.index("released") < events.index("claimed")


async def stats(system: System) -> dict[str, Any]:
    answer = await system.api.get("/v1/admin/stats", headers=auth(system.admin))
    assert answer.status_code == 200, answer.text
    document: dict[str, Any] = answer.json()
    return document


# --- the fingerprint equals Python's ------------------------------------------------------------

# Text without lone surrogates (PostgreSQL's text has none) and without NUL (jsonb has none).
_text = st.text(alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"))
# Floats that JSON writes with a fraction or a negative exponent: those jsonb tells from
# integers (docs/submitting.md, "From any language: SQL", on numbers).
_float = st.floats(allow_nan=False, allow_infinity=False).filter(
    lambda x: abs(x) < 1e16 and not (x == 0 and str(x).startswith("-"))
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | _float | _text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=16,
)
_payload = st.dictionaries(_text, _json, max_size=6)


def canonical_in_sql(connection: psycopg.Connection[Any], document: str) -> str:
    row = connection.execute(
        "SELECT jobrelay.jobrelay_canonical_json(%s::jsonb)", (document,)
    ).fetchone()
    assert row is not None
    text: str = row[0]
    return text


@MANY
@given(value=_json, ascii_only=st.booleans())
def test_the_sql_canonical_json_is_pythons(
    value: Any, ascii_only: bool, sql: psycopg.Connection[Any]
) -> None:
    sent = json.dumps(value, ensure_ascii=ascii_only)  # the JSON another language sends
    assert canonical_in_sql(sql, sent) == canonical_json(value)


@MANY
@given(number=st.floats(allow_nan=False, allow_infinity=False))
def test_a_number_with_a_fraction_is_written_as_pythons_float(
    number: float, sql: psycopg.Connection[Any]
) -> None:
    exact = f"{Decimal(number):f}"  # every digit of the double, 750 of them at the smallest
    with_fraction = exact if "." in exact else exact + ".0"
    row = sql.execute(
        "SELECT jobrelay.jobrelay_json_number(%s::numeric)", (with_fraction,)
    ).fetchone()
    assert row is not None
    assert row[0] == repr(abs(number) if number == 0 else number)


def test_the_numbers_jsonb_cannot_tell_from_integers_are_written_as_integers(
    sql: psycopg.Connection[Any],
) -> None:
    """What docs/submitting.md says differs from Python: a number whose exponent leaves no
    fraction, and a negative zero."""
    for sent, python, written in (
        ("1e3", "1000.0", "1000"),
        ("2.5e20", "2.5e+20", "250000000000000000000"),
        ("-0.0", "-0.0", "0.0"),
    ):
        assert canonical_json(json.loads(sent)) == python
        assert canonical_in_sql(sql, sent) == written
    for sent, both in (("1.0", "1.0"), ("0.10", "0.1"), ("1e-7", "1e-07"), ("-0", "0")):
        assert canonical_json(json.loads(sent)) == canonical_in_sql(sql, sent) == both


_offset = st.integers(-14 * 60, 14 * 60).map(lambda minutes: timezone(timedelta(minutes=minutes)))
_run_at = st.none() | st.datetimes(
    min_value=datetime(2, 1, 1), max_value=datetime(9998, 12, 31), timezones=_offset
)
_priority = st.none() | st.integers(-100, 100)


@MANY
@given(
    job_type=_text.filter(lambda name: 1 <= len(name) <= 200),
    payload=_payload,
    run_at=_run_at,
    priority=_priority,
)
def test_the_sql_request_hash_is_the_python_accepts(
    job_type: str,
    payload: dict[str, Any],
    run_at: datetime | None,
    priority: int | None,
    sql: psycopg.Connection[Any],
) -> None:
    request = JobRequest("k", job_type, payload, 3, run_at=run_at, flow=Flow(priority))
    row = sql.execute(
        "SELECT jobrelay.jobrelay_request_hash(%s, %s::jsonb, %s, %s)",
        (job_type, json.dumps(payload), run_at, priority),
    ).fetchone()
    assert row is not None
    assert row[0] == Submission.of(request).fingerprint
