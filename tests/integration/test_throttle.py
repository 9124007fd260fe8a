"""Throttles (SPEC §22, docs/flow-control.md "Throttle") through the real API against real
PostgreSQL: at most N submissions of a type accepted per period (per throttle key when keyed),
the next one refused 429 throttled with Retry-After and nothing written; an idempotent retry is
never throttled; a batch refuses the excess item by item; a type registered by a consumer is
throttled by an API without its handlers; a runtime throttle (PUT /v1/admin/limits) reaches the
API by its notification, and clearing it lifts it; at the boundary, concurrent submissions over
several connections get exactly the one place left."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from jobrelay.api.app import create_app
from jobrelay.api.context import ApiContext
from jobrelay.api.notifications import ApiNotifications
from jobrelay.core.flow import Throttle
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.core.type_catalog import registrable_types
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore
from tests.conftest import auth
from tests.integration.test_flow_submission import Account, handler
from tests.support.system import cli
from tests.support.waiting import eventually

BASE_URL = "http://jobrelay.test"


def throttle_registry() -> Registry:
    registry = Registry()
    registry.job("thr.three", Account, throttle="3/m")(handler)
    registry.job(
        "thr.keyed", Account, throttle="2/m", throttle_key=lambda payload: payload.account
    )(handler)
    registry.job("thr.hourly", Account, throttle="2/h")(handler)
    registry.job("thr.edge", Account, throttle="5/m")(handler)
    registry.job("thr.free", Account)(handler)
    registry.job("thr.limited", Account, concurrency=2, throttle="3/m")(handler)
    return registry


@asynccontextmanager
async def api_of(
    settings: Settings, store: Store, registry: Registry
) -> AsyncIterator[tuple[httpx.AsyncClient, ApiContext]]:
    app = create_app(
        settings.model_copy(update={"api_max_concurrency": 0}), store=store, registry=registry
    )
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client, app.state.context


@pytest.fixture
async def api(settings: Settings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with api_of(settings, store, throttle_registry()) as (client, _):
        yield client


async def submit(
    api: httpx.AsyncClient, token: str, key: str, job_type: str, **body: Any
) -> httpx.Response:
    payload = {"type": job_type, "payload": body.pop("payload", {}), **body}
    return await api.post("/v1/jobs", json=payload, headers=auth(token, key))


async def jobs_of(store: Store, job_type: str) -> int:
    rows = await store.fetch_all(
        text("SELECT count(*) AS n FROM jobrelay.jobs WHERE type = :type"), type=job_type
    )
    return int(rows[0].n)


def assert_throttled(answer: httpx.Response) -> None:
    assert answer.status_code == 429, answer.text
    assert answer.json()["code"] == "throttled"
    assert int(answer.headers["Retry-After"]) >= 1


async def test_three_a_minute_accepts_three_and_refuses_the_fourth_writing_nothing(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    for n in range(3):
        accepted = await submit(api, alice, f"k{n}", "thr.three")
        assert accepted.status_code == 202, accepted.text

    refused = await submit(api, alice, "k3", "thr.three")

    assert_throttled(refused)
    assert int(refused.headers["Retry-After"]) <= 60
    assert await jobs_of(store, "thr.three") == 3
    # A retry of an accepted submission is its job again, never throttled.
    again = await submit(api, alice, "k0", "thr.three")
    assert again.status_code == 200, again.text
    assert await jobs_of(store, "thr.three") == 3


async def test_a_throttle_key_counts_each_key_apart(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    for n in range(2):
        for account in ("acme", "globex"):
            answer = await submit(
                api, alice, f"{account}{n}", "thr.keyed", payload={"account": account}
            )
            assert answer.status_code == 202, answer.text

    assert_throttled(await submit(api, alice, "acme2", "thr.keyed", payload={"account": "acme"}))
    # The submission's own throttle_key wins over the type's function.
    own = await submit(
        api, alice, "own", "thr.keyed", payload={"account": "acme"}, throttle_key="x"
    )
    assert own.status_code == 202, own.text
    assert await jobs_of(store, "thr.keyed") == 5


async def test_a_throttle_per_hour_holds_past_a_minute_window(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    assert (await submit(api, alice, "h0", "thr.hourly")).status_code == 202
    assert (await submit(api, alice, "h1", "thr.hourly")).status_code == 202
    # The accepts are dated an hour's minute ago: a per-minute count would have forgotten them.
    await store.fetch_all(
        text(
            "UPDATE jobrelay.throttle_accepts SET at = at - interval '2 minutes' "
            "WHERE type = 'thr.hourly'"
        )
    )

    refused = await submit(api, alice, "h2", "thr.hourly")

    assert_throttled(refused)
    assert 60 < int(refused.headers["Retry-After"]) <= 3600
    assert await jobs_of(store, "thr.hourly") == 2


async def test_a_batch_refuses_the_items_over_the_throttle_and_accepts_the_others(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    items = [{"idempotency_key": f"b{n}", "type": "thr.three", "payload": {}} for n in range(5)] + [
        {"idempotency_key": "free", "type": "thr.free", "payload": {}}
    ]

    answer = await api.post("/v1/jobs/batch", json={"jobs": items}, headers=auth(alice))

    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [r["status"] for r in results] == [202, 202, 202, 429, 429, 202]
    assert {r["error"]["code"] for r in results if r["status"] == 429} == {"throttled"}
    assert await jobs_of(store, "thr.three") == 3
    assert await jobs_of(store, "thr.free") == 1


async def test_concurrent_submissions_at_the_boundary_get_exactly_the_one_place_left(
    api: httpx.AsyncClient, alice: str, store: Store
) -> None:
    for n in range(4):  # 5/m: one place left
        assert (await submit(api, alice, f"e{n}", "thr.edge")).status_code == 202

    answers = await asyncio.gather(*(submit(api, alice, f"race{n}", "thr.edge") for n in range(5)))

    assert sorted(a.status_code for a in answers) == [202, 429, 429, 429, 429]
    assert await jobs_of(store, "thr.edge") == 5


async def test_a_type_a_consumer_registered_with_a_throttle_is_throttled_without_its_handlers(
    settings: Settings, store: Store, alice: str
) -> None:
    await PgTypeStore(store).register_types(registrable_types(throttle_registry(), by="test:1"))
    row = (
        await store.fetch_all(
            text(
                "SELECT throttle_count, throttle_period_seconds FROM jobrelay.job_types "
                "WHERE name = 'thr.three'"
            )
        )
    )[0]
    assert (row.throttle_count, row.throttle_period_seconds) == (3, 60)

    async with api_of(settings, store, Registry()) as (api, _):
        for n in range(3):
            assert (await submit(api, alice, f"r{n}", "thr.three")).status_code == 202
        assert_throttled(await submit(api, alice, "r3", "thr.three"))
    assert await jobs_of(store, "thr.three") == 3


async def test_a_runtime_throttle_reaches_the_api_by_its_notification_and_clearing_lifts_it(
    settings: Settings,
    store: Store,
    alice: str,
    admin: str,
    direct_database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with api_of(settings, store, throttle_registry()) as (api, context):
        types = context.types
        told = asyncio.Event()
        invalidate = types.invalidate

        def invalidated() -> None:
            invalidate()
            told.set()

        monkeypatch.setattr(types, "invalidate", invalidated)
        notifications = ApiNotifications(context.auth, context.waiters, types)
        listening = asyncio.create_task(notifications.listen(direct_database_url))
        try:
            await eventually(lambda: _true(context.auth.listening), what="the listener")
            assert (await submit(api, alice, "f0", "thr.free")).status_code == 202
            told.clear()  # (connecting marked the catalog stale: read since, by f0)

            put = await api.put(
                "/v1/admin/limits/thr.free", json={"throttle": "1/m"}, headers=auth(admin)
            )
            assert put.status_code == 200, put.text
            assert put.json()["throttle"] == "1/m" and put.json()["source"] == "runtime"
            await asyncio.wait_for(told.wait(), timeout=10)

            # The accept before the throttle is not counted: it was no throttled type's then.
            assert (await submit(api, alice, "f1", "thr.free")).status_code == 202
            assert types.catalog.throttle_for("thr.free") == Throttle(1, 60)
            assert_throttled(await submit(api, alice, "f2", "thr.free"))

            told.clear()
            cleared = await api.delete("/v1/admin/limits/thr.free", headers=auth(admin))
            assert cleared.status_code == 204
            await asyncio.wait_for(told.wait(), timeout=10)

            assert (await submit(api, alice, "f3", "thr.free")).status_code == 202
            assert types.catalog.throttle_for("thr.free") is None
        finally:
            listening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await listening
    assert await jobs_of(store, "thr.free") == 3


async def test_a_runtime_throttle_alone_keeps_the_limit_in_force_and_wins_over_the_codes(
    api: httpx.AsyncClient, admin: str, alice: str
) -> None:
    limited = await api.put(
        "/v1/admin/limits/thr.three", json={"concurrency": 2}, headers=auth(admin)
    )
    assert limited.json()["throttle"] == "3/m"  # the row has none: the code's holds

    put = await api.put("/v1/admin/limits/thr.three", json={"throttle": "1/h"}, headers=auth(admin))

    assert put.status_code == 200, put.text
    assert (put.json()["concurrency"], put.json()["throttle"]) == (2, "1/h")
    listed = (await api.get("/v1/admin/limits", headers=auth(admin))).json()["limits"]
    assert {x["type"]: x["throttle"] for x in listed}["thr.keyed"] == "2/m"
    # The statement counts against the row's throttle even before this API reloads.
    assert (await submit(api, alice, "t0", "thr.three")).status_code == 202
    assert_throttled(await submit(api, alice, "t1", "thr.three"))
    bad = await api.put("/v1/admin/limits/thr.three", json={"throttle": "5/d"}, headers=auth(admin))
    assert (bad.status_code, bad.json()["code"]) == (422, "validation_error")


async def test_the_cli_sets_a_throttle_alone_keeping_the_limit_and_refuses_one_that_is_none(
    settings: Settings, store: Store
) -> None:
    await PgTypeStore(store).register_types(registrable_types(throttle_registry(), by="test:1"))

    done = await asyncio.to_thread(
        cli, settings, "limits", "set", "thr.limited", "--throttle", "1/h"
    )
    bad = await asyncio.to_thread(
        cli, settings, "limits", "set", "thr.limited", "--throttle", "5/d"
    )
    listed = await asyncio.to_thread(cli, settings, "limits", "list")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("thr.limited  concurrency=2 throttle=1/h  (runtime): ")
    row = (await store.fetch_all(text("SELECT * FROM jobrelay.type_limits")))[0]
    assert (row.concurrency, row.throttle_count, row.throttle_period_seconds) == (2, 1, 3600)
    assert (bad.returncode, bad.stdout) == (1, "")
    assert bad.stderr.strip() == (
        "jobrelay: invalid throttle '5/d': write N/s or N/m or N/h with a whole N of at least 1 "
        "(for example 5/s or 100/h)"
    )
    assert "thr.three  throttle=3/m  (code)" in listed.stdout.splitlines()


async def _true(value: object) -> bool:
    return bool(value)
