"""``jobrelay.enqueue`` / ``enqueue_async`` inside the caller's transaction, on each of the six
kinds of connection it takes, against real PostgreSQL (and, for "the job runs", RabbitMQ and a
real dispatcher and consumer)."""

from __future__ import annotations

import asyncio
import inspect
import math
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

import jobrelay
from jobrelay.core.errors import DuplicateJob, InvalidPayload, Throttled, UnknownJobType
from jobrelay.core.fingerprint import token_hash
from jobrelay.core.flow import parse_throttle
from jobrelay.core.jobs import Job
from jobrelay.core.registry import JobType, Registry
from jobrelay.core.states import JobState
from jobrelay.core.trace import OutboxEntry
from jobrelay.db.client_store import ClientStore
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.transactional import UnknownClient
from tests.support import factories
from tests.support.system import System

SYNC_KINDS = ["psycopg", "sqlalchemy-connection", "sqlalchemy-session"]
ASYNC_KINDS = ["psycopg-async", "sqlalchemy-async-connection", "sqlalchemy-async-session"]
KINDS = SYNC_KINDS + ASYNC_KINDS

EXPORT: dict[str, Any] = {"type": "catalog.export", "payload": {"course": "JavaScript"}}


async def _settle(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Tx:
    """One open transaction on one kind of connection: enqueue in it, write the test's own rows
    in it, commit or roll it back. Leaving ``transaction()`` without either rolls it back."""

    def __init__(self, connection: Any, *, is_async: bool, is_psycopg: bool) -> None:
        self.connection = connection
        self.is_async = is_async
        self.is_psycopg = is_psycopg

    async def enqueue(self, **options: Any) -> Job:
        if self.is_async:
            return await jobrelay.enqueue_async(self.connection, **options)
        return jobrelay.enqueue(self.connection, **options)

    async def execute(self, sql: str) -> None:
        await _settle(self.connection.execute(sql if self.is_psycopg else text(sql)))

    async def commit(self) -> None:
        await _settle(self.connection.commit())

    async def rollback(self) -> None:
        await _settle(self.connection.rollback())


@asynccontextmanager
async def transaction(kind: str, database_url: str) -> AsyncIterator[Tx]:
    alchemy_url = make_url(database_url).set(drivername="postgresql+psycopg")
    if kind == "psycopg":
        raw = psycopg.connect(libpq_url(database_url))
        try:
            yield Tx(raw, is_async=False, is_psycopg=True)
        finally:
            raw.close()
    elif kind == "psycopg-async":
        raw_async = await psycopg.AsyncConnection.connect(libpq_url(database_url))
        try:
            yield Tx(raw_async, is_async=True, is_psycopg=True)
        finally:
            await raw_async.close()
    elif kind in ("sqlalchemy-connection", "sqlalchemy-session"):
        engine = create_engine(alchemy_url, poolclass=NullPool)
        try:
            if kind == "sqlalchemy-connection":
                with engine.connect() as connection:
                    yield Tx(connection, is_async=False, is_psycopg=False)
            else:
                with Session(engine) as session:
                    yield Tx(session, is_async=False, is_psycopg=False)
        finally:
            engine.dispose()
    else:
        async_engine = create_async_engine(alchemy_url, poolclass=NullPool)
        try:
            if kind == "sqlalchemy-async-connection":
                async with async_engine.connect() as async_connection:
                    yield Tx(async_connection, is_async=True, is_psycopg=False)
            else:
                assert kind == "sqlalchemy-async-session", kind
                async with AsyncSession(async_engine) as async_session:
                    yield Tx(async_session, is_async=True, is_psycopg=False)
        finally:
            await async_engine.dispose()


async def rows(store: Store, table: str) -> int:
    return await factories.count(store, factories.table_named(table))


async def everything(store: Store) -> dict[str, int]:
    """How many jobs, outbox rows and journal entries (job_journal) there are."""
    counts = {name: await rows(store, name) for name in ("jobs", "outbox")}
    journal = await store.fetch_all(text("SELECT count(*) AS n FROM jobrelay.job_journal"))
    return {**counts, "journal": int(journal[0].n)}


@pytest.fixture
async def orders(store: Store) -> None:
    """The application's own table, in jobrelay's database."""
    async with store.transaction() as connection:
        await connection.execute(text("CREATE TABLE orders (id text PRIMARY KEY)"))


async def order_ids(store: Store) -> list[str]:
    async with store.transaction() as connection:
        return list((await connection.execute(text("SELECT id FROM orders ORDER BY id"))).scalars())


async def outbox_of(store: Store, job_id: uuid.UUID) -> list[OutboxEntry]:
    trace = await store.trace(job_id)
    assert trace is not None
    return trace.outbox


async def client_id(store: Store, name: str) -> uuid.UUID:
    [listed] = [client for client in await ClientStore(store).list_clients() if client.name == name]
    return listed.id


# --- rolled back: nothing; committed: the job, its outbox row and its event --------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_rolled_back_transaction_leaves_no_job_no_outbox_row_and_no_event(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    async with transaction(kind, database_url) as tx:
        job = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        assert job.state is JobState.QUEUED
        await tx.rollback()

    assert await everything(store) == {"jobs": 0, "outbox": 0, "journal": 0}
    assert await store.get_job(job.id) is None


@pytest.mark.parametrize("kind", KINDS)
async def test_a_committed_job_has_its_outbox_row_and_received_event(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    async with transaction(kind, database_url) as tx:
        job = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        await tx.commit()

    stored = await store.get_job(job.id)
    assert stored is not None
    assert stored.client_id == job.client_id == await client_id(store, "alice")
    assert (stored.type, stored.payload, stored.idempotency_key) == (
        "catalog.export",
        {"course": "JavaScript"},
        "export-js",
    )
    assert stored.state is JobState.QUEUED and stored.attempts == 0
    assert stored.max_attempts == job.max_attempts == 3
    assert stored.available_at == job.available_at and stored.created_at == job.created_at
    assert stored.run_at is None and job.run_at is None
    [outbox] = await outbox_of(store, job.id)
    assert outbox.available_at == job.available_at and outbox.published_at is None
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}
    assert [entry.event for entry in await store.job_events(job.id)] == ["received"]


@pytest.mark.parametrize("kind", KINDS)
async def test_the_job_and_the_callers_own_rows_commit_or_roll_back_together(
    kind: str, database_url: str, store: Store, alice: str, orders: None
) -> None:
    async with transaction(kind, database_url) as tx:
        await tx.execute("INSERT INTO orders (id) VALUES ('order-1')")
        dropped = await tx.enqueue(client="alice", key="order-1", **EXPORT)
        await tx.rollback()
    async with transaction(kind, database_url) as tx:
        await tx.execute("INSERT INTO orders (id) VALUES ('order-2')")
        kept = await tx.enqueue(client="alice", key="order-2", **EXPORT)
        await tx.execute("UPDATE orders SET id = 'order-2b' WHERE id = 'order-2'")
        await tx.commit()

    assert await order_ids(store) == ["order-2b"]
    assert await store.get_job(dropped.id) is None
    assert await store.get_job(kept.id) is not None
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}


# --- idempotency --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_the_same_key_twice_in_one_transaction_is_one_job(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    async with transaction(kind, database_url) as tx:
        first = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        again = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        await tx.commit()

    assert again.id == first.id
    assert (again.state, again.payload, again.max_attempts) == (
        JobState.QUEUED,
        {"course": "JavaScript"},
        3,
    )
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}


@pytest.mark.parametrize("kind", KINDS)
async def test_the_same_key_in_a_later_transaction_returns_the_committed_job(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    async with transaction(kind, database_url) as tx:
        first = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        await tx.commit()
    # The key's job moved on meanwhile: the job comes back as it is now.
    await factories.set_job(store, first.id, state=JobState.SUCCEEDED, result={"rows": 3})
    async with transaction(kind, database_url) as tx:
        again = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        await tx.commit()

    assert again.id == first.id and again.created_at == first.created_at
    assert again.state is JobState.SUCCEEDED and again.result == {"rows": 3}
    assert again.payload == {"course": "JavaScript"}
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}


@pytest.mark.parametrize("kind", KINDS)
async def test_another_payload_under_the_key_raises_and_the_transaction_goes_on(
    kind: str, database_url: str, store: Store, alice: str, orders: None
) -> None:
    async with transaction(kind, database_url) as tx:
        first = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        with pytest.raises(jobrelay.IdempotencyConflict) as raised:
            await tx.enqueue(
                client="alice", key="export-js", type="catalog.export", payload={"course": "Go"}
            )
        # The caller's transaction is not aborted: it writes and commits as if nothing happened.
        await tx.execute("INSERT INTO orders (id) VALUES ('order-1')")
        await tx.commit()

    error = raised.value
    assert error.job_id == first.id
    assert (error.status, error.code) == (409, "idempotency_conflict")
    assert isinstance(error, jobrelay.ApiError)  # the HTTP client's class: one except for both
    assert await order_ids(store) == ["order-1"]
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}
    stored = await store.get_job(first.id)
    assert stored is not None and stored.payload == {"course": "JavaScript"}


@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy-async-session"])
async def test_another_type_or_schedule_under_a_committed_key_conflicts_too(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    async with transaction(kind, database_url) as tx:
        first = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        await tx.commit()
    soon = datetime.now(UTC) + timedelta(hours=1)
    async with transaction(kind, database_url) as tx:
        for other in (
            {"type": "catalog.import", "payload": EXPORT["payload"]},
            {**EXPORT, "run_at": soon},
            {**EXPORT, "delay_seconds": 60},
        ):
            with pytest.raises(jobrelay.IdempotencyConflict) as raised:
                await tx.enqueue(client="alice", key="export-js", **other)
            assert raised.value.job_id == first.id
        # The same request still finds its job in this transaction.
        assert (await tx.enqueue(client="alice", key="export-js", **EXPORT)).id == first.id
        await tx.commit()
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_keys_of_different_clients_never_collide(
    database_url: str, store: Store, alice: str, bob: str
) -> None:
    async with transaction("psycopg", database_url) as tx:
        for_alice = await tx.enqueue(client="alice", key="export-js", **EXPORT)
        for_bob = await tx.enqueue(
            client="bob", key="export-js", type="catalog.export", payload={"course": "Go"}
        )
        await tx.commit()

    assert for_alice.id != for_bob.id
    assert for_bob.client_id == await client_id(store, "bob")
    assert await everything(store) == {"jobs": 2, "outbox": 2, "journal": 2}


@pytest.mark.parametrize("outcome", ["commit", "rollback"])
async def test_a_key_another_open_transaction_holds_waits_for_its_end(
    outcome: str, database_url: str, store: Store, alice: str
) -> None:
    async with (
        transaction("psycopg-async", database_url) as first,
        transaction("sqlalchemy-async-session", database_url) as second,
    ):
        made = await first.enqueue(client="alice", key="export-js", **EXPORT)
        waiting = asyncio.create_task(second.enqueue(client="alice", key="export-js", **EXPORT))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # ON CONFLICT waits for the first transaction
        await (first.commit() if outcome == "commit" else first.rollback())
        seen = await asyncio.wait_for(waiting, 10)
        await second.commit()

    assert (seen.id == made.id) is (outcome == "commit")
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}
    assert await store.get_job(seen.id) is not None


# --- the schedule and the attempts --------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_run_at_in_the_future_sets_available_at(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    run_at = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)
    async with transaction(kind, database_url) as tx:
        job = await tx.enqueue(client="alice", key="later", run_at=run_at, **EXPORT)
        await tx.commit()

    stored = await store.get_job(job.id)
    assert stored is not None
    assert stored.available_at == stored.run_at == run_at
    assert job.available_at == job.run_at == run_at
    [outbox] = await outbox_of(store, job.id)
    assert outbox.available_at == run_at


async def test_delay_seconds_counts_from_the_database_clock(
    database_url: str, store: Store, alice: str
) -> None:
    async with transaction("sqlalchemy-session", database_url) as tx:
        job = await tx.enqueue(client="alice", key="later", delay_seconds=600, **EXPORT)
        await tx.commit()

    stored = await store.get_job(job.id)
    assert stored is not None
    assert stored.available_at == job.available_at == stored.created_at + timedelta(seconds=600)
    assert stored.run_at == stored.available_at


async def test_max_attempts_is_three_unless_given(
    database_url: str, store: Store, alice: str
) -> None:
    async with transaction("psycopg-async", database_url) as tx:
        default = await tx.enqueue(client="alice", key="a", **EXPORT)
        given = await tx.enqueue(client="alice", key="b", max_attempts=7, **EXPORT)
        await tx.commit()

    assert default.max_attempts == 3 and given.max_attempts == 7
    stored = [await store.get_job(job.id) for job in (default, given)]
    assert [job.max_attempts for job in stored if job is not None] == [3, 7]


# --- with a registry, or without ----------------------------------------------------------------


class Mail(BaseModel):
    to: str


def mail_registry() -> Registry:
    registry = Registry()
    registry.register(JobType("shop.mail", Mail, max_attempts=5))
    return registry


async def test_a_registry_checks_the_type_and_payload_and_gives_its_attempts(
    database_url: str, store: Store, alice: str
) -> None:
    registry = mail_registry()
    async with transaction("psycopg", database_url) as tx:
        with pytest.raises(UnknownJobType):
            await tx.enqueue(
                client="alice", key="a", type="shop.sms", payload={"to": "x"}, registry=registry
            )
        with pytest.raises(InvalidPayload):
            await tx.enqueue(
                client="alice", key="b", type="shop.mail", payload={}, registry=registry
            )
        job = await tx.enqueue(
            client="alice", key="c", type="shop.mail", payload={"to": "x"}, registry=registry
        )
        given = await tx.enqueue(
            client="alice",
            key="d",
            type="shop.mail",
            payload={"to": "y"},
            max_attempts=2,
            registry=registry,
        )
        await tx.commit()

    assert (job.max_attempts, given.max_attempts) == (5, 2)
    assert await everything(store) == {"jobs": 2, "outbox": 2, "journal": 2}


# --- the order and submission policies ----------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_sequence_and_a_reject_on_every_kind_of_connection(
    kind: str, database_url: str, store: Store, alice: str
) -> None:
    async with transaction(kind, database_url) as tx:
        ahead = await tx.enqueue(client="alice", key="a", sequence_key="customer-1", **EXPORT)
        behind = await tx.enqueue(client="alice", key="b", sequence_key="customer-1", **EXPORT)
        once = await tx.enqueue(
            client="alice", key="c", unique_key="once", on_duplicate="reject", **EXPORT
        )
        with pytest.raises(DuplicateJob) as refused:
            await tx.enqueue(
                client="alice", key="d", unique_key="once", on_duplicate="reject", **EXPORT
            )
        await tx.commit()  # the refusal wrote nothing and left the transaction usable

    assert refused.value.extra["job_id"] == str(once.id)
    assert (ahead.sequence_key, behind.sequence_key) == ("customer-1", "customer-1")
    assert len(await outbox_of(store, ahead.id)) == 1
    assert await outbox_of(store, behind.id) == []  # waits for the one ahead to end
    assert await everything(store) == {"jobs": 3, "outbox": 2, "journal": 3}


async def test_a_type_throttled_in_code_refuses_the_excess_and_writes_nothing(
    database_url: str, store: Store, alice: str
) -> None:
    registry = Registry()
    registry.register(JobType("shop.mail", Mail, throttle=parse_throttle("1/h")))
    mail = {"type": "shop.mail", "payload": {"to": "x"}, "registry": registry}
    async with transaction("psycopg", database_url) as tx:
        await tx.enqueue(client="alice", key="a", **mail)
        with pytest.raises(Throttled) as throttled:
            await tx.enqueue(client="alice", key="b", **mail)
        retried = await tx.enqueue(client="alice", key="a", **mail)  # a key's retry: its job
        await tx.commit()

    assert 0 < throttled.value.retry_after_seconds <= 3600
    assert retried.idempotency_key == "a"
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_a_sequences_lock_is_held_until_the_caller_commits(
    database_url: str, store: Store, alice: str
) -> None:
    async with (
        transaction("psycopg-async", database_url) as first,
        transaction("sqlalchemy-async-session", database_url) as second,
    ):
        ahead = await first.enqueue(client="alice", key="a", sequence_key="s", **EXPORT)
        waiting = asyncio.create_task(
            second.enqueue(client="alice", key="b", sequence_key="s", **EXPORT)
        )
        await asyncio.sleep(0.3)
        assert not waiting.done()  # the sequence's advisory lock, taken by the first
        await first.commit()
        behind = await asyncio.wait_for(waiting, 10)
        await second.commit()

    # Read after the lock, the second saw the first (committed meanwhile): it waits behind it.
    assert len(await outbox_of(store, ahead.id)) == 1
    assert await outbox_of(store, behind.id) == []


async def test_without_a_registry_any_type_name_is_accepted(
    database_url: str, store: Store, alice: str
) -> None:
    async with transaction("psycopg", database_url) as tx:
        job = await tx.enqueue(client="alice", key="a", type="not.known.here", payload={})
        await tx.commit()
    assert (await store.get_job(job.id)) is not None


# --- the client ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_an_unknown_client_raises_and_writes_nothing(
    kind: str, database_url: str, store: Store, alice: str, orders: None
) -> None:
    async with transaction(kind, database_url) as tx:
        for unknown in ("mallory", uuid.uuid4(), str(uuid.uuid4())):
            with pytest.raises(UnknownClient) as raised:
                await tx.enqueue(client=unknown, key="export-js", **EXPORT)
            assert not raised.value.disabled
            assert isinstance(raised.value, ValueError)
        await tx.execute("INSERT INTO orders (id) VALUES ('order-1')")
        await tx.commit()

    assert jobrelay.UnknownClient is UnknownClient
    assert await order_ids(store) == ["order-1"]
    assert await everything(store) == {"jobs": 0, "outbox": 0, "journal": 0}


async def test_a_disabled_client_raises(database_url: str, store: Store, alice: str) -> None:
    await ClientStore(store).set_client_disabled("alice", disabled=True)
    async with transaction("sqlalchemy-async-connection", database_url) as tx:
        with pytest.raises(UnknownClient, match="disabled") as raised:
            await tx.enqueue(client="alice", key="export-js", **EXPORT)
    assert raised.value.disabled
    assert await everything(store) == {"jobs": 0, "outbox": 0, "journal": 0}


async def test_the_client_may_be_named_by_its_id(
    database_url: str, store: Store, alice: str
) -> None:
    alice_id = await client_id(store, "alice")
    # A client whose name is another client's id: the id wins.
    await ClientStore(store).create_client(str(alice_id), token_hash("other"), is_admin=False)
    async with transaction("sqlalchemy-session", database_url) as tx:
        by_uuid = await tx.enqueue(client=alice_id, key="a", **EXPORT)
        by_text = await tx.enqueue(client=str(alice_id), key="b", **EXPORT)
        by_name = await tx.enqueue(client="alice", key="a", **EXPORT)
        await tx.commit()

    assert by_uuid.client_id == by_text.client_id == alice_id
    assert by_name.id == by_uuid.id


# --- arguments ----------------------------------------------------------------------------------

NOW = datetime.now(UTC)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"key": ""}, ValueError),
        ({"key": "has space"}, ValueError),
        ({"key": "k" * 201}, ValueError),
        ({"type": ""}, ValueError),
        ({"type": "t" * 201}, ValueError),
        ({"type": "nul\x00"}, ValueError),
        ({"payload": ["a", "list"]}, TypeError),
        ({"payload": {"at": NOW}}, TypeError),
        ({"payload": {"x": math.nan}}, ValueError),
        ({"payload": {"x": "nul\x00"}}, ValueError),
        ({"max_attempts": 0}, ValueError),
        ({"max_attempts": 101}, ValueError),
        ({"max_attempts": True}, ValueError),
        ({"run_at": NOW.replace(tzinfo=None)}, ValueError),
        ({"run_at": NOW, "delay_seconds": 5}, ValueError),
        ({"delay_seconds": -1}, ValueError),
        ({"client": "nul\x00"}, UnknownClient),
        ({"client": 42}, TypeError),
    ],
    ids=lambda value: repr(value)[:40] if isinstance(value, dict) else value.__name__,
)
async def test_a_bad_argument_raises_before_anything_is_written(
    options: dict[str, Any], error: type[Exception], database_url: str, store: Store, alice: str
) -> None:
    arguments = {"client": "alice", "key": "export-js", **EXPORT, **options}
    async with transaction("psycopg", database_url) as tx:
        with pytest.raises(error):
            await tx.enqueue(**arguments)
        await tx.enqueue(client="alice", key="fine", **EXPORT)  # the transaction is usable
        await tx.commit()
    assert await everything(store) == {"jobs": 1, "outbox": 1, "journal": 1}


async def test_each_function_refuses_the_other_kind_of_connection(
    database_url: str, store: Store, alice: str
) -> None:
    options: dict[str, Any] = {"client": "alice", "key": "export-js", **EXPORT}
    for kind in ASYNC_KINDS:
        async with transaction(kind, database_url) as tx:
            with pytest.raises(TypeError, match="enqueue_async"):
                jobrelay.enqueue(tx.connection, **options)
    for kind in SYNC_KINDS:
        async with transaction(kind, database_url) as tx:
            with pytest.raises(TypeError, match="without await"):
                await jobrelay.enqueue_async(tx.connection, **options)
    with pytest.raises(TypeError, match="not str"):
        jobrelay.enqueue(database_url, **options)  # type: ignore[arg-type]
    assert await everything(store) == {"jobs": 0, "outbox": 0, "journal": 0}


# --- committed, the job runs ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["psycopg", "sqlalchemy-async-session"])
async def test_a_committed_job_runs_and_a_rolled_back_one_is_never_published(
    kind: str, database_url: str, system: System
) -> None:
    sleep: dict[str, Any] = {"type": "demo.sleep", "payload": {"seconds": 0}}
    async with transaction(kind, database_url) as tx:
        dropped = await tx.enqueue(client="alice", key="dropped", **sleep)
        await tx.rollback()
    async with transaction(kind, database_url) as tx:
        job = await tx.enqueue(client="alice", key="kept", **sleep)
        await tx.commit()

    with system.running("enqueue"):
        await system.wait_for("succeeded", job.id, what="the enqueued job to succeed")

    events = [entry.event for entry in await system.store.job_events(job.id)]
    # The relay writes `published` after the broker's confirm, and a fast consumer may finish the
    # job before that commit: the journal orders the job's own steps, not the relay's mark.
    steps = [event for event in events if event != "published"]
    assert steps[0] == "received" and "claimed" in steps and steps[-1] == "succeeded"
    assert events.count("published") == 1
    [outbox] = await outbox_of(system.store, job.id)
    assert outbox.published_at is not None
    assert await system.store.get_job(dropped.id) is None
    assert await everything(system.store) == {
        "jobs": 1,
        "outbox": 1,
        "journal": len(events),
    }
