"""The operators' side of flow control through the API, on real PostgreSQL and RabbitMQ
(issue 25, items 4, 5 and 7; SPEC section 16): ``GET /v1/admin/queues`` with the database's
figures and the broker's, pause and resume (a row: it survives an API restart), the limits in
force (the code's and the runtime overrides) set and cleared, and the 404/422 problems.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import aio_pika
import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import text

from jobrelay.api.app import create_app
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.core.topology import work_queue_name
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth
from tests.support import factories
from tests.support.consumer_kit import broker, publish, rows

SLOW = "demo.sleep=slow"


class Charge(BaseModel):
    account: str = "a"


def payments() -> Registry:
    """A registry with a limit in the code (``pay.charge``) and a type without one."""
    registry = Registry()

    @registry.job("pay.charge", Charge, concurrency=2, rate="10/s")
    async def charge(context: Any, payload: Charge) -> dict[str, Any]:
        return {}

    @registry.job("mail.send", Charge)
    async def send(context: Any, payload: Charge) -> dict[str, Any]:
        return {}

    return registry


@asynccontextmanager
async def api_of(
    settings: Settings, store: Store, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """The API app in process (a new one is a restarted API: nothing kept but the database)."""
    app = create_app(settings, store=store, **options)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as client,
    ):
        yield client


@pytest.fixture
async def flow_api(make_settings: MakeSettings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The API with a reachable broker, ``demo.sleep`` on the queue ``slow``, and the
    ``payments`` registry."""
    async with api_of(make_settings(type_queues=SLOW), store, registry=payments()) as client:
        yield client


async def add_queue(store: Store, name: str) -> None:
    """A queue as a consumer registers it at start."""
    await rows(
        store,
        "INSERT INTO jobrelay.queues (name) VALUES (:name) ON CONFLICT DO NOTHING RETURNING name",
        name=name,
    )


async def leave_it(message: aio_pika.abc.AbstractIncomingMessage) -> None:
    await message.nack()


def by_name(answer: httpx.Response) -> dict[str, dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    return {queue["name"]: queue for queue in answer.json()["queues"]}


def assert_problem(answer: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = answer.json()
    assert problem["code"] == code and problem["status"] == status
    return problem


# --- queues ---------------------------------------------------------------------------------------


async def test_the_queues_show_their_backlog_running_jobs_window_and_consumers(
    flow_api: httpx.AsyncClient, make_settings: MakeSettings, store: Store, admin: str
) -> None:
    settings = make_settings(type_queues=SLOW)
    await add_queue(store, "slow")
    await factories.jobs(store, 3, job_type="catalog.export", with_outbox=True)
    await factories.jobs(store, 2, job_type="demo.sleep", with_outbox=True)  # on slow
    await factories.jobs(store, 1, job_type="demo.sleep", state=JobState.RUNNING)
    later = await factories.jobs(store, 1, job_type="catalog.export")
    await factories.outbox(store, later, available_at=later[0].available_at.replace(year=2999))
    async with broker(settings) as channel:  # the topology, four messages on default
        for _ in range(4):
            await publish(channel, uuid.uuid4(), "catalog.export")
        connection = await aio_pika.connect(settings.amqp_url)
        async with connection:
            listening = await connection.channel()
            slow = await listening.declare_queue(work_queue_name("slow"), passive=True)
            await slow.consume(leave_it, no_ack=False)  # one consumer

            queues = by_name(await flow_api.get("/v1/admin/queues", headers=auth(admin)))

    assert queues["default"] == {
        "name": "default",
        "paused": False,
        "paused_at": None,
        "paused_by": None,
        "backlog": 3,  # due and unpublished; the one due in 2999 waits, not due
        "window_in_use": 4,
        "running": 0,
        "consumers": 0,
    }
    assert (queues["slow"]["backlog"], queues["slow"]["running"]) == (2, 1)
    assert (queues["slow"]["window_in_use"], queues["slow"]["consumers"]) == (0, 1)


async def test_without_the_broker_its_figures_are_null_and_the_rest_is_answered(
    store: Store, settings: Settings, admin: str
) -> None:
    await factories.jobs(store, 2, job_type="catalog.export", with_outbox=True)
    async with api_of(settings, store) as api:  # the settings' broker: port 1, nothing there
        answer = await api.get("/v1/admin/queues", headers=auth(admin))

    assert answer.status_code == 200, answer.text
    assert answer.json()["broker"] == "unavailable"
    (default,) = answer.json()["queues"]
    assert (default["backlog"], default["window_in_use"], default["consumers"]) == (2, None, None)


async def test_a_queue_the_broker_has_not_declared_yet_holds_nothing(
    flow_api: httpx.AsyncClient, store: Store, admin: str
) -> None:
    await add_queue(store, "never-declared")
    answer = await flow_api.get("/v1/admin/queues", headers=auth(admin))
    assert answer.json()["broker"] == "ok"
    queue = by_name(answer)["never-declared"]
    assert (queue["window_in_use"], queue["consumers"]) == (0, 0)


async def test_a_pause_is_answered_with_the_queue_and_survives_an_api_restart(
    make_settings: MakeSettings, store: Store, admin: str
) -> None:
    settings = make_settings()
    await factories.jobs(store, 2, job_type="catalog.export", with_outbox=True)
    async with api_of(settings, store) as api:
        paused = await api.post("/v1/admin/queues/default/pause", headers=auth(admin))
        again = await api.post("/v1/admin/queues/default/pause", headers=auth(admin))
        stats = await api.get("/v1/admin/stats", headers=auth(admin))
        submitted = await api.post(
            "/v1/jobs",
            json={"type": "catalog.export", "payload": {"course": "Go"}},
            headers=auth(admin, "while-paused"),
        )

    assert paused.status_code == 200, paused.text
    view = paused.json()
    assert (view["name"], view["paused"], view["paused_by"], view["backlog"]) == (
        "default",
        True,
        "ops",
        2,
    )
    assert again.json()["paused_at"] == view["paused_at"]  # the first pause's time is kept
    (held,) = stats.json()["paused_queues"]
    assert (held["name"], held["by"]) == ("default", "ops")
    assert datetime.fromisoformat(held["since"]) == datetime.fromisoformat(view["paused_at"])
    assert submitted.status_code == 202  # jobs are still accepted while paused

    async with api_of(settings, store) as restarted:
        listed = by_name(await restarted.get("/v1/admin/queues", headers=auth(admin)))
        assert listed["default"]["paused"] is True
        assert listed["default"]["paused_at"] == view["paused_at"]
        resumed = await restarted.post("/v1/admin/queues/default/resume", headers=auth(admin))
    assert resumed.status_code == 200, resumed.text
    assert (resumed.json()["paused"], resumed.json()["paused_at"]) == (False, None)
    (row,) = await rows(
        store, "SELECT paused_at, paused_by FROM jobrelay.queues WHERE name = 'default'"
    )
    assert (row.paused_at, row.paused_by) == (None, None)


@pytest.mark.parametrize("action", ["pause", "resume"])
async def test_pausing_or_resuming_an_unknown_queue_is_a_404_problem(
    flow_api: httpx.AsyncClient, store: Store, admin: str, action: str
) -> None:
    answer = await flow_api.post(f"/v1/admin/queues/nosuch/{action}", headers=auth(admin))
    problem = assert_problem(answer, 404, "queue_not_found")
    assert "nosuch" in problem["detail"]
    assert await rows(store, "SELECT name FROM jobrelay.queues WHERE name = 'nosuch'") == []


async def test_the_pause_takes_the_queues_row_lock_that_a_claim_holds(
    flow_api: httpx.AsyncClient, store: Store, admin: str
) -> None:
    """A claim holds the queue's row FOR SHARE while it checks the pause; the pause waits for it,
    so no claim that began before the pause commits after it unseen."""
    async with store.transaction() as claim:
        await claim.execute(text("SELECT 1 FROM jobrelay.queues WHERE name = 'default' FOR SHARE"))
        pausing = asyncio.create_task(
            flow_api.post("/v1/admin/queues/default/pause", headers=auth(admin))
        )
        await asyncio.sleep(0.5)
        assert not pausing.done()  # waits for the claim's lock
    answer = await asyncio.wait_for(pausing, 10)
    assert answer.status_code == 200 and answer.json()["paused"] is True


# --- limits ---------------------------------------------------------------------------------------


async def test_the_limits_in_force_are_the_codes_until_a_runtime_limit_replaces_them(
    flow_api: httpx.AsyncClient, admin: str
) -> None:
    listed = await flow_api.get("/v1/admin/limits", headers=auth(admin))
    assert listed.status_code == 200, listed.text
    assert listed.json() == {
        "limits": [
            {
                "type": "pay.charge",
                "concurrency": 2,
                "rate": "10/s",
                "per_key": False,
                "source": "code",
                "throttle": None,
            }
        ]
    }
    none = await flow_api.get("/v1/admin/limits/mail.send", headers=auth(admin))
    assert none.json() == {
        "type": "mail.send",
        "concurrency": None,
        "rate": None,
        "per_key": False,
        "source": "code",
        "throttle": None,
    }

    body = {"concurrency": 1, "rate": "600/m", "per_key": True}
    put = await flow_api.put("/v1/admin/limits/pay.charge", json=body, headers=auth(admin))
    mail = await flow_api.put(
        "/v1/admin/limits/mail.send", json={"rate": "5/s"}, headers=auth(admin)
    )

    assert put.status_code == 200, put.text
    assert put.json() == {"type": "pay.charge", **body, "source": "runtime", "throttle": None}
    assert mail.json() == {
        "type": "mail.send",
        "concurrency": None,
        "rate": "5/s",
        "per_key": False,
        "source": "runtime",
        "throttle": None,
    }
    got = await flow_api.get("/v1/admin/limits/pay.charge", headers=auth(admin))
    assert got.json() == put.json()
    listed = await flow_api.get("/v1/admin/limits", headers=auth(admin))
    assert [(x["type"], x["source"]) for x in listed.json()["limits"]] == [
        ("mail.send", "runtime"),
        ("pay.charge", "runtime"),
    ]

    cleared = await flow_api.delete("/v1/admin/limits/pay.charge", headers=auth(admin))
    assert cleared.status_code == 204 and cleared.content == b""
    back = await flow_api.get("/v1/admin/limits/pay.charge", headers=auth(admin))
    assert back.json()["source"] == "code" and back.json()["concurrency"] == 2
    cleared_again = await flow_api.delete("/v1/admin/limits/pay.charge", headers=auth(admin))
    assert cleared_again.status_code == 204  # a known type: nothing to clear is still cleared


async def test_a_runtime_limit_is_a_row_the_next_api_reads(
    make_settings: MakeSettings, store: Store, admin: str
) -> None:
    settings = make_settings()
    async with api_of(settings, store, registry=payments()) as api:
        put = await api.put(
            "/v1/admin/limits/mail.send", json={"concurrency": 3}, headers=auth(admin)
        )
        assert put.status_code == 200, put.text
    (row,) = await rows(store, "SELECT * FROM jobrelay.type_limits")
    assert (row.type, row.concurrency, row.rate_count, row.per_key) == ("mail.send", 3, None, False)
    async with api_of(settings, store, registry=payments()) as restarted:
        got = await restarted.get("/v1/admin/limits/mail.send", headers=auth(admin))
    assert got.json()["source"] == "runtime" and got.json()["concurrency"] == 3


async def test_a_limit_on_an_unknown_type_is_a_404_problem_and_stores_nothing(
    flow_api: httpx.AsyncClient, store: Store, admin: str
) -> None:
    put = await flow_api.put(
        "/v1/admin/limits/no.such", json={"concurrency": 1}, headers=auth(admin)
    )
    get = await flow_api.get("/v1/admin/limits/no.such", headers=auth(admin))
    delete = await flow_api.delete("/v1/admin/limits/no.such", headers=auth(admin))
    for answer in (put, get, delete):
        problem = assert_problem(answer, 404, "job_type_not_found")
        assert "no.such" in problem["detail"]
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []


async def test_a_runtime_row_of_a_type_the_api_does_not_know_is_listed_and_clearable(
    flow_api: httpx.AsyncClient, store: Store, admin: str
) -> None:
    """A row left by another registry (a type since removed): shown, and DELETE removes it."""
    await rows(
        store,
        "INSERT INTO jobrelay.type_limits (type, concurrency) VALUES ('gone.type', 4) RETURNING "
        "type",
    )
    listed = await flow_api.get("/v1/admin/limits", headers=auth(admin))
    assert ("gone.type", "runtime") in [(x["type"], x["source"]) for x in listed.json()["limits"]]
    assert (
        await flow_api.get("/v1/admin/limits/gone.type", headers=auth(admin))
    ).status_code == 200
    assert (
        await flow_api.delete("/v1/admin/limits/gone.type", headers=auth(admin))
    ).status_code == 204
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []


@pytest.mark.parametrize(
    ("body", "where", "says"),
    [
        ({"rate": "ten a second"}, ["body", "rate"], "invalid rate 'ten a second'"),
        ({"rate": "10/h"}, ["body", "rate"], "N/s or N/m"),
        ({"rate": "0/s"}, ["body", "rate"], "at least 1"),
        ({"concurrency": 0}, ["body", "concurrency"], "greater than or equal to 1"),
        ({"concurrency": -3}, ["body", "concurrency"], "greater than or equal to 1"),
        ({"concurrency": 2.5}, ["body", "concurrency"], "integer"),
        ({"concurrency": True}, ["body", "concurrency"], "integer"),
        ({"per_key": True}, ["body"], "per_key needs a concurrency or a rate"),
        ({"concurrency": 1, "burst": 3}, ["body", "burst"], "Extra inputs"),
    ],
)
async def test_a_limit_that_is_not_one_is_a_422_naming_the_field_and_stores_nothing(
    flow_api: httpx.AsyncClient,
    store: Store,
    admin: str,
    body: dict[str, Any],
    where: list[str],
    says: str,
) -> None:
    answer = await flow_api.put("/v1/admin/limits/pay.charge", json=body, headers=auth(admin))
    problem = assert_problem(answer, 422, "validation_error")
    (error,) = problem["errors"]
    assert error["loc"] == where and says in error["msg"], error
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []


async def test_a_whole_float_is_a_concurrency_and_nothing_lifts_the_codes_limit(
    flow_api: httpx.AsyncClient, admin: str
) -> None:
    three = await flow_api.put(
        "/v1/admin/limits/pay.charge", json={"concurrency": 3.0}, headers=auth(admin)
    )
    assert three.status_code == 200 and three.json()["concurrency"] == 3
    lifted = await flow_api.put("/v1/admin/limits/pay.charge", json={}, headers=auth(admin))
    assert lifted.json() == {
        "type": "pay.charge",
        "concurrency": None,
        "rate": None,
        "per_key": False,
        "source": "runtime",
        "throttle": None,
    }


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/admin/queues"),
        ("POST", "/v1/admin/queues/default/pause"),
        ("POST", "/v1/admin/queues/default/resume"),
        ("GET", "/v1/admin/limits"),
        ("GET", "/v1/admin/limits/pay.charge"),
        ("PUT", "/v1/admin/limits/pay.charge"),
        ("DELETE", "/v1/admin/limits/pay.charge"),
    ],
)
async def test_every_flow_endpoint_needs_an_admin_token_and_a_refusal_changes_nothing(
    flow_api: httpx.AsyncClient, store: Store, alice: str, method: str, path: str
) -> None:
    body = {"concurrency": 1} if method == "PUT" else None
    assert (await flow_api.request(method, path, json=body)).status_code == 401
    forbidden = await flow_api.request(method, path, json=body, headers=auth(alice))
    assert_problem(forbidden, 403, "forbidden")
    (row,) = await rows(store, "SELECT paused_at FROM jobrelay.queues WHERE name = 'default'")
    assert row.paused_at is None
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []
