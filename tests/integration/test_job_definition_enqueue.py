"""A job definition's ``enqueue`` (``core/registry.py::JobDefinition``) against real PostgreSQL:
inside the caller's psycopg transaction (committed: the job; rolled back: none), and through a
real ``jobrelay.Client`` on a served API and a real ``jobrelay.AsyncClient`` on the app."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from pydantic import BaseModel

import jobrelay
from jobrelay import JobContext, Registry
from jobrelay.core.errors import DuplicateJob
from jobrelay.core.registry import install_enqueuer
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.handlers.builtin import catalog_export

BASE_URL = "http://jobrelay.test"


class Charge(BaseModel):
    order_id: str
    amount_cents: int


registry = Registry()


@registry.job("shop.charge", Charge, max_attempts=7, priority=20)
async def charge(context: JobContext, payload: Charge) -> dict[str, Any]:
    return {"charged": payload.amount_cents}


@registry.job("shop.refund", Charge, unique=lambda payload: payload.order_id)
async def refund(context: JobContext, payload: Charge) -> dict[str, Any]:
    return {"refunded": payload.amount_cents}


@pytest.fixture(autouse=True)
def nothing_configured() -> Iterator[None]:
    previous = install_enqueuer(None)
    yield
    install_enqueuer(previous)


async def test_enqueued_on_a_committed_connection_the_job_exists_with_its_types_defaults(
    database_url: str, store: Store, alice: str
) -> None:
    jobrelay.configure(client_name="alice")
    with psycopg.connect(libpq_url(database_url)) as connection:
        job = charge.enqueue(
            Charge(order_id="o-1", amount_cents=1999), key="charge:o-1", connection=connection
        )
        assert await store.get_job(job.id) is None  # not before the commit
        connection.commit()
    stored = await store.get_job(job.id)
    assert stored is not None and stored.state is JobState.QUEUED
    assert (stored.type, stored.payload, stored.idempotency_key) == (
        "shop.charge",
        {"order_id": "o-1", "amount_cents": 1999},
        "charge:o-1",
    )
    assert (stored.max_attempts, stored.priority) == (7, 20)  # the registry's, passed along


async def test_enqueued_on_a_rolled_back_connection_there_is_no_job(
    database_url: str, store: Store, alice: str
) -> None:
    jobrelay.configure(client_name="alice")
    with psycopg.connect(libpq_url(database_url)) as connection:
        job = charge.enqueue({"order_id": "o-2", "amount_cents": 5}, connection=connection)
        connection.rollback()
    assert await store.get_job(job.id) is None


async def test_enqueue_async_on_an_async_connection_commits_with_the_callers_transaction(
    database_url: str, store: Store, alice: str
) -> None:
    jobrelay.configure(client_name="alice")
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as connection:
        made = await charge.enqueue_async(
            Charge(order_id="o-3", amount_cents=5), key="charge:o-3", connection=connection
        )
        again = await charge.enqueue_async(
            {"order_id": "o-3", "amount_cents": 5}, key="charge:o-3", connection=connection
        )
        with pytest.raises(jobrelay.IdempotencyConflict):
            await charge.enqueue_async(
                {"order_id": "o-3", "amount_cents": 6}, key="charge:o-3", connection=connection
            )
        await connection.commit()
    assert again.id == made.id
    stored = await store.get_job(made.id)
    assert stored is not None and stored.payload == {"order_id": "o-3", "amount_cents": 5}


def test_through_a_real_client_on_a_served_api_the_api_makes_the_job(
    settings: Settings, alice: str, tmp_path: Path
) -> None:
    from tests.support.processes import running_api

    with running_api(settings, tmp_path) as (_, _, base), jobrelay.Client(base, alice) as client:
        jobrelay.configure(client=client)
        made = catalog_export.enqueue({"course": "JavaScript"}, key="export-js")
        again = catalog_export.enqueue({"course": "JavaScript"}, key="export-js")
        with pytest.raises(jobrelay.IdempotencyConflict):
            catalog_export.enqueue({"course": "Markdown"}, key="export-js")
        fresh = catalog_export.enqueue({"course": "JavaScript"})
        shown = client.get(made.id)
    assert isinstance(made, jobrelay.Job)  # the API's view
    assert again.id == made.id == shown.id and fresh.id != made.id
    assert (shown.type, shown.payload, shown.idempotency_key, shown.state) == (
        "catalog.export",
        {"course": "JavaScript"},
        "export-js",
        "queued",
    )


async def test_through_a_real_async_client_on_the_app_with_the_apps_registry(
    settings: Settings, store: Store, alice: str
) -> None:
    from jobrelay.api.app import create_app

    app = create_app(settings, store=store, registry=registry)
    transport = httpx.ASGITransport(app=app)
    async with jobrelay.AsyncClient(BASE_URL, alice, transport=transport) as client:
        jobrelay.configure(async_client=client)
        job = await charge.enqueue_async(Charge(order_id="o-4", amount_cents=5), priority=-3)
    assert isinstance(job, jobrelay.Job)
    assert (job.type, job.priority, job.max_attempts, job.state) == ("shop.charge", -3, 7, "queued")
    stored = await store.get_job(job.id)
    assert stored is not None and stored.idempotency_key == job.idempotency_key


async def test_the_policies_go_through_a_connection_and_through_a_client(
    settings: Settings, database_url: str, store: Store, alice: str
) -> None:
    from jobrelay.api.app import create_app

    jobrelay.configure(client_name="alice")
    with psycopg.connect(libpq_url(database_url)) as connection:
        ahead = charge.enqueue(
            {"order_id": "o-5", "amount_cents": 1}, sequence_key="order-5", connection=connection
        )
        # The type's unique= gives the key the refusal is about.
        kept = refund.enqueue(
            {"order_id": "o-6", "amount_cents": 1}, on_duplicate="reject", connection=connection
        )
        with pytest.raises(DuplicateJob) as refused:
            refund.enqueue(
                {"order_id": "o-6", "amount_cents": 2}, on_duplicate="reject", connection=connection
            )
        connection.commit()
    app = create_app(settings, store=store, registry=registry)
    transport = httpx.ASGITransport(app=app)
    async with jobrelay.AsyncClient(BASE_URL, alice, transport=transport) as client:
        jobrelay.configure(async_client=client)
        behind = await charge.enqueue_async(
            {"order_id": "o-5", "amount_cents": 2}, sequence_key="order-5"
        )
    with pytest.raises(ValueError, match="debounce_seconds"):
        charge.enqueue({"order_id": "o-7", "amount_cents": 1}, debounce_seconds=-1)
    stored = await store.get_job(behind.id)
    assert stored is not None and stored.sequence_key == ahead.sequence_key == "order-5"
    assert refused.value.extra["job_id"] == str(kept.id)
