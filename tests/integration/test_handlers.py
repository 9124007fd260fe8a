"""Handlers as their authors meet them, against real PostgreSQL (and RabbitMQ where a message
must travel): a failure tells why, a plain ``def`` runs in a thread, a consumer that does not
know a type waits for one that does, and no known secret is stored or logged.

The job types below are also loadable: ``tests.integration.test_handlers:registry``.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from pydantic import BaseModel
from sqlalchemy import func

from jobrelay.core.masking import Masker
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.topology import type_queue_name
from jobrelay.db.engine import libpq_url
from jobrelay.db.quarantine_store import QuarantineStore
from jobrelay.db.store import Store
from jobrelay.handlers import builtin
from jobrelay.handlers.loading import load_registry
from jobrelay.logs import JsonFormatter
from tests.conftest import MakeSettings, api_client, auth, make_client
from tests.support.consumer_kit import (
    StandInDelivery,
    events,
    new_client,
    quarantined_messages,
    rows,
    running_consumer,
    submit,
    wait_state,
    worker,
)
from tests.support.factories import job_row, results_of, set_job
from tests.support.processes import run_cli, service_env
from tests.support.queues import depth_is, queue_depth
from tests.support.relay import running_relay
from tests.support.servers import Servers
from tests.support.waiting import eventually

HANDLERS = "tests.integration.test_handlers:registry"
DB_PASSWORD = "pg-SENTINEL-7d41c0"
TOKEN = "jr_SENTINELtoken0123456789abcdef"

registry = Registry()


class Note(BaseModel):
    text: str = ""


class Nap(BaseModel):
    seconds: float = 0.0


@registry.job("handlers.boom", Note)
async def boom(context: JobContext, payload: Note) -> dict[str, Any]:
    """Fails every attempt with an ordinary exception."""
    raise RuntimeError(f"the upstream said no: {payload.text}")


@registry.job("handlers.leaky", Note)
async def leaky(context: JobContext, payload: Note) -> dict[str, Any]:
    """Fails with the database password and a token in its message, and logs them too."""
    try:
        raise ConnectionError(
            f"cannot log in with password {DB_PASSWORD} (postgresql://app:{DB_PASSWORD}@db/x), "
            f"Authorization: Bearer {TOKEN}"
        )
    except ConnectionError:
        context.logger.exception("upstream login failed with %s and %s", DB_PASSWORD, TOKEN)
        raise


@registry.job("handlers.plain", Note)
def plain(context: JobContext, payload: Note) -> dict[str, Any]:
    """A plain def: where does it run?"""
    try:
        asyncio.get_running_loop()
        on_loop = True
    except RuntimeError:
        on_loop = False
    return {"thread": threading.current_thread().name, "on_loop": on_loop}


# handlers.plain_nap blocks until this is set (or its seconds pass), then says it woke.
NAP_RELEASE = threading.Event()
NAP_WOKE = threading.Event()


@registry.job("handlers.plain_nap", Nap, timeout_seconds=0.3)
def plain_nap(context: JobContext, payload: Nap) -> dict[str, Any]:
    """Blocks its thread longer than its timeout when asked to."""
    NAP_RELEASE.wait(payload.seconds)
    NAP_WOKE.set()
    return {"slept": payload.seconds}


@registry.job("handlers.plain_long", Nap)
def plain_long(context: JobContext, payload: Nap) -> dict[str, Any]:
    """Blocks its thread longer than a lease."""
    time.sleep(payload.seconds)
    return {"slept": payload.seconds}


known = load_registry(HANDLERS, builtins=True)  # with the built-in types, as the tests load them


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    """Every log line, formatted as the services format them (masking the test's password)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    masker = Masker.for_urls([f"postgresql://u:{DB_PASSWORD}@h/d"])
    handler.setFormatter(JsonFormatter("consumer", masker))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


async def make_due(store: Store, job_id: uuid.UUID) -> None:
    await set_job(store, job_id, available_at=func.now())


async def failures(store: Store, job_id: uuid.UUID) -> list[Any]:
    return await rows(
        store,
        "SELECT event, attempt, error FROM jobrelay.job_events WHERE job_id = :id AND error IS "
        "NOT NULL "
        "ORDER BY id",
        id=job_id,
    )


# --- a failing handler says why ----------------------------------------------------------------


async def test_a_failing_handler_stores_its_message_and_traceback_with_the_failed_attempt(
    make_settings: MakeSettings, store: Store, log_lines: io.StringIO
) -> None:
    cfg = make_settings(handlers=HANDLERS)  # the API and the CLI load this module's types
    alice = await make_client(store, "alice")
    admin = await make_client(store, "ops", admin=True)
    async with api_client(cfg, store) as api:
        # The API validates with the same registry as the consumers (JOBRELAY_HANDLERS).
        submitted = await api.post(
            "/v1/jobs",
            json={"type": "handlers.boom", "payload": {"text": "order 42"}, "max_attempts": 2},
            headers=auth(alice, "boom-1"),
        )
        assert submitted.status_code == 202, submitted.text
        job_id = uuid.UUID(submitted.json()["id"])

        first = StandInDelivery(job_id, "handlers.boom")
        assert (await worker(store, cfg, known).handle(first)).outcome == "retried"
        [(event, attempt, error)] = await failures(store, job_id)
        assert (event, attempt) == ("retry_scheduled", 1)
        assert error["class"] == "RuntimeError"
        assert error["message"] == "the upstream said no: order 42"
        assert "in boom" in error["traceback"]
        assert 'raise RuntimeError(f"the upstream said no: {payload.text}")' in error["traceback"]
        assert error["traceback"].rstrip().endswith("RuntimeError: the upstream said no: order 42")

        # The owner sees the code and the message, never the traceback.
        view = (await api.get(f"/v1/jobs/{job_id}", headers=auth(alice))).json()
        assert view["last_error_code"] == "unexpected_error"
        assert view["last_error"] == "RuntimeError: the upstream said no: order 42"
        own_trace = await api.get(f"/v1/jobs/{job_id}/trace", headers=auth(alice))
        assert own_trace.json()["last_failure"]["error"] == {
            "class": "RuntimeError",
            "message": "the upstream said no: order 42",
        }
        assert "Traceback" not in own_trace.text and "in boom" not in own_trace.text

        await make_due(store, job_id)
        last = StandInDelivery(job_id, "handlers.boom")
        assert (await worker(store, cfg, known).handle(last)).outcome == "quarantined"
        assert [(e, a) for e, a, _ in await failures(store, job_id)] == [
            ("retry_scheduled", 1),
            ("quarantined", 2),
        ]

        # Operators see the traceback: the admin trace...
        admin_trace = (await api.get(f"/v1/admin/jobs/{job_id}/trace", headers=auth(admin))).json()
        assert admin_trace["last_failure"]["attempt"] == 2
        assert "in boom" in admin_trace["last_failure"]["error"]["traceback"]
        assert admin_trace["why"].startswith("quarantined: attempts_exhausted")

    # ...and `jobrelay jobs trace`.
    shown = run_cli(service_env(cfg), "jobs", "trace", str(job_id))
    assert shown.returncode == 0, shown.stderr
    assert "RuntimeError: the upstream said no: order 42" in shown.stdout
    assert "Traceback (most recent call last)" in shown.stdout and "in boom" in shown.stdout

    # The consumer logged it with its traceback, as one JSON object per line.
    logged = [json.loads(line) for line in log_lines.getvalue().splitlines()]
    failed = [line for line in logged if line.get("msg", "").startswith("attempt failed")]
    assert len(failed) == 2
    assert failed[0]["error"] == "RuntimeError" and "in boom" in failed[0]["traceback"]
    assert failed[0]["job_id"] == str(job_id) and failed[0]["attempt"] == 1


@pytest.fixture
def sentinel_database_url(servers: Servers, database_url: str) -> str:
    """The test's database, reached as a role whose password is a sentinel."""
    role = f"sentinel_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(libpq_url(servers.database_url), autocommit=True) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{DB_PASSWORD}'")
    db = urllib.parse.urlsplit(database_url)
    return f"postgresql+psycopg://{role}:{DB_PASSWORD}@{db.hostname}:{db.port}{db.path}"


async def test_known_secrets_in_a_failure_reach_no_stored_row_and_no_log_line(
    make_settings: MakeSettings, sentinel_database_url: str, log_lines: io.StringIO
) -> None:
    cfg = make_settings(database_url=sentinel_database_url)
    store = Store.connect(sentinel_database_url, pool_size=4, pool_mode=cfg.pool_mode)
    try:
        client_id = await new_client(store)
        job_id = await submit(store, client_id, "handlers.leaky", {}, max_attempts=2)
        for _ in range(2):
            await make_due(store, job_id)
            await worker(store, cfg, known).handle(StandInDelivery(job_id, "handlers.leaky"))
        stored = await rows(
            store,
            "SELECT e::text FROM jobrelay.job_journal e WHERE job_id = :id "
            "UNION ALL SELECT j::text FROM jobrelay.jobs j WHERE id = :id",
            id=job_id,
        )
        row = await job_row(store, job_id)
        [(_, _, error), *_] = await failures(store, job_id)
    finally:
        await store.close()

    assert row.state == "quarantined"
    assert "password ***" in error["message"] and "Bearer jr_***" in error["message"]
    assert "password ***" in row.last_error
    logged = log_lines.getvalue()
    assert "upstream login failed" in logged and "Traceback" in logged
    for secret in (DB_PASSWORD, TOKEN):
        for text in [*(r[0] for r in stored), row.last_error, logged]:
            assert secret not in text


# --- a plain def handler --------------------------------------------------------------------------


async def test_a_plain_def_handler_runs_in_a_thread_off_the_event_loop(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "handlers.plain", {})
    delivery = StandInDelivery(job_id, "handlers.plain")
    assert (await worker(store, cfg, known).handle(delivery)).outcome == "succeeded"
    [(result, _)] = await results_of(store, job_id)
    assert result["on_loop"] is False
    assert result["thread"].startswith("jobrelay-handler-")


async def test_a_plain_def_handler_over_its_timeout_is_retried_with_the_code_timeout(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "handlers.plain_nap", {"seconds": 60})
    NAP_RELEASE.clear()
    NAP_WOKE.clear()
    try:
        delivery = StandInDelivery(job_id, "handlers.plain_nap")
        verdict = await asyncio.wait_for(worker(store, cfg, known).handle(delivery), 30)
        # The handler still blocks: the wait stopped at the timeout; the thread naps on, unheard.
        assert not NAP_WOKE.is_set()
    finally:
        NAP_RELEASE.set()
    assert verdict.outcome == "retried"
    row = await job_row(store, job_id)
    assert (row.state, row.last_error_code) == ("retrying", "timeout")


async def test_a_plain_def_handler_longer_than_its_lease_keeps_it_the_loop_is_not_blocked(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings(lease_seconds=1.0)
    job_id = await submit(store, await new_client(store), "handlers.plain_long", {"seconds": 2.5})
    delivery = StandInDelivery(job_id, "handlers.plain_long")
    assert (await worker(store, cfg, known).handle(delivery)).outcome == "succeeded"
    assert ("succeeded", 1) in await events(store, job_id)


# --- a consumer that does not know a type -------------------------------------------------------


async def test_a_consumer_that_does_not_know_a_type_defers_it_without_counting_an_attempt(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "handlers.plain", {})
    old = worker(store, cfg, builtin.registry)  # a consumer of the previous release

    delivery = StandInDelivery(job_id, "handlers.plain")
    verdict = await old.handle(delivery)
    assert (verdict.outcome, delivery.settled) == ("deferred", ["ack"])
    [job] = await rows(
        store,
        "SELECT state, attempts, last_error_code, type_unknown_since IS NOT NULL AS unknown, "
        "available_at > now() AS later FROM jobrelay.jobs WHERE id = :id",
        id=job_id,
    )
    assert (job.state, job.attempts, job.last_error_code) == ("queued", 0, "unknown_job_type")
    assert job.unknown and job.later
    assert await events(store, job_id) == [("received", 0), ("deferred", 0)]
    # A new outbox row, due when the job is: the dispatcher publishes it again then.
    outbox = await rows(
        store,
        "SELECT o.available_at = j.available_at AS due_with_job FROM jobrelay.outbox o "
        "JOIN jobrelay.jobs j ON j.id = o.job_id WHERE o.job_id = :id ORDER BY o.id",
        id=job_id,
    )
    assert [row.due_with_job for row in outbox] == [False, True]

    # Its old message again before it is due: a duplicate, acked, nothing counted.
    again = StandInDelivery(job_id, "handlers.plain")
    assert (await old.handle(again)).outcome == "duplicate" and again.settled == ["ack"]

    # Due again, a consumer that knows the type runs it: attempt 1, and the clock is cleared.
    await make_due(store, job_id)
    latest = StandInDelivery(job_id, "handlers.plain")
    assert (await worker(store, cfg, known).handle(latest)).outcome == "succeeded"
    row = await job_row(store, job_id)
    assert (row.state, row.type_unknown_since) == ("succeeded", None)
    assert (await job_row(store, job_id)).attempts == 1


async def test_a_type_unknown_past_the_patience_is_quarantined(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings(unknown_type_patience_seconds=3600)
    job_id = await submit(store, await new_client(store), "handlers.plain", {})
    old = worker(store, cfg, builtin.registry)
    assert (await old.handle(StandInDelivery(job_id, "handlers.plain"))).outcome == "deferred"

    # Still within the patience: deferred again, never quarantined.
    await make_due(store, job_id)
    assert (await old.handle(StandInDelivery(job_id, "handlers.plain"))).outcome == "deferred"

    # The type has now been unknown for two hours.
    hours_ago = func.now() - timedelta(hours=2)
    await set_job(store, job_id, type_unknown_since=hours_ago, available_at=func.now())
    delivery = StandInDelivery(job_id, "handlers.plain")
    verdict = await old.handle(delivery)
    assert (verdict.outcome, delivery.settled) == ("quarantined", ["dead_letter"])
    row = await job_row(store, job_id)
    assert (row.state, row.last_error_code) == ("quarantined", "unknown_job_type")
    assert "stayed unknown" in row.last_error
    assert (await job_row(store, job_id)).attempts == 0
    assert [e for e, _ in await events(store, job_id)] == [
        "received",
        "deferred",
        "deferred",
        "quarantined",
    ]

    # A replay starts the clock again: the next unknown-type consumer defers, not quarantines.
    assert await QuarantineStore(store).replay_job(job_id, budget=3, detail="test replay")
    assert (await job_row(store, job_id)).type_unknown_since is None
    assert (await old.handle(StandInDelivery(job_id, "handlers.plain"))).outcome == "deferred"


async def test_during_a_rolling_deploy_a_job_waits_for_a_consumer_that_knows_its_type(
    make_settings: MakeSettings, store: Store
) -> None:
    """It waits in its type's own queue, which only consumers that run the type take: no
    consumer of the old release receives it, so it is never deferred (the shared queue's
    deferral is for messages published before the upgrade: test_type_routing.py)."""
    cfg = make_settings()
    job_id = await submit(store, await new_client(store), "handlers.plain", {})
    own_queue = type_queue_name("handlers.plain")
    async with running_relay(cfg, store):
        async with running_consumer(cfg, builtin.registry):  # the old release only
            await eventually(
                lambda: depth_is(cfg.amqp_url, 1, own_queue), what="the job's message waiting"
            )
            row = await job_row(store, job_id)
            assert (row.state, row.attempts) == ("queued", 0)
        async with running_consumer(cfg, known):  # the new release
            await wait_state(store, job_id, "succeeded")
    assert (await job_row(store, job_id)).attempts == 1
    assert "deferred" not in [e for e, _ in await events(store, job_id)]
    assert await queue_depth(cfg.amqp_url, own_queue) == 0
    assert await quarantined_messages(cfg) == []


async def test_an_unknown_type_is_still_refused_by_an_api_that_does_not_know_it(
    settings: Settings, store: Store
) -> None:
    token = await make_client(store, "carol")
    async with api_client(settings, store) as api:  # JOBRELAY_HANDLERS not set: built-ins only
        answer = await api.post(
            "/v1/jobs", json={"type": "handlers.plain", "payload": {}}, headers=auth(token, "k")
        )
    assert (answer.status_code, answer.json()["code"]) == (422, "unknown_job_type")
