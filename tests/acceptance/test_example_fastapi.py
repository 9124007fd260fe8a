"""The README's FastAPI setup (``examples/fastapi_app``): the app in this process, on the test's
database, enqueues in its own transaction; a real dispatcher and consumer, run from the
example's folder with its registry, run the job. An order whose enqueue fails leaves no order
and no job."""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from fastapi import FastAPI

import jobrelay
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, make_client
from tests.support.processes import ROOT, running, service_env
from tests.support.system import eventually

EXAMPLE = ROOT / "examples" / "fastapi_app"


@pytest.fixture
def example_app(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[FastAPI]:
    """The example's module, imported afresh against the test's database."""
    monkeypatch.setenv("JOBRELAY_DATABASE_URL", database_url)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    for name in ("app", "receipts"):
        sys.modules.pop(name, None)
    module = importlib.import_module("app")
    try:
        yield module.app
    finally:
        for name in ("app", "receipts"):
            sys.modules.pop(name, None)
        jobrelay.configure()  # the example configured the process: leave it as found


@pytest.fixture
async def orders(example_app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    async with example_app.router.lifespan_context(example_app):
        transport = httpx.ASGITransport(app=example_app, raise_app_exceptions=False)
        async with httpx.AsyncClient(transport=transport, base_url="http://orders") as client:
            yield client


async def test_an_order_and_its_receipt_job_commit_together_and_the_job_runs(
    orders: httpx.AsyncClient, make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    await make_client(store, "orders")
    response = await orders.post("/orders", json={"email": "ada@example.test"})
    assert response.status_code == 201, response.text
    created = response.json()
    cfg = make_settings(handlers="receipts:registry")
    with _services(cfg, tmp_path):

        async def finished() -> dict[str, Any] | None:
            row = _job(cfg, created["job_id"])
            return row if row is not None and row["state"] == "succeeded" else None

        job = await eventually(finished, within=60, what="the receipt job to succeed")
    assert job["type"] == "orders.send_receipt"
    assert job["payload"] == {"order_id": created["order_id"], "email": "ada@example.test"}
    assert job["result"] == {"sent_to": "ada@example.test"}


async def test_an_order_whose_enqueue_fails_is_rolled_back_with_no_job(
    orders: httpx.AsyncClient, database_url: str
) -> None:
    # No client "orders" exists: the enqueue raises inside the order's transaction.
    response = await orders.post("/orders", json={"email": "bob@example.test"})
    assert response.status_code == 500
    with psycopg.connect(jobrelay.libpq_url(database_url)) as connection:
        assert connection.execute("SELECT count(*) FROM orders").fetchone() == (0,)
        assert connection.execute("SELECT count(*) FROM jobrelay.jobs").fetchone() == (0,)


def _services(cfg: Settings, tmp_path: Path) -> ExitStack:
    env = service_env(cfg)
    stack = ExitStack()
    for name in ("dispatcher", "consumer"):
        stack.enter_context(running([name], env, tmp_path / f"{name}.log", cwd=EXAMPLE))
    return stack


def _job(cfg: Settings, job_id: str) -> dict[str, Any] | None:
    with psycopg.connect(jobrelay.libpq_url(cfg.database_url)) as connection:
        row = connection.execute(
            "SELECT type, state, payload, result FROM jobrelay.jobs LEFT JOIN "
            "jobrelay.job_results r ON r.job_id = id"
            " WHERE id = %s",
            [uuid.UUID(job_id)],
        ).fetchone()
    if row is None:
        return None
    return dict(zip(("type", "state", "payload", "result"), row, strict=True))
