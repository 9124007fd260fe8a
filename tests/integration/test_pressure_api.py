"""The API under pressure, against real PostgreSQL (docs/overload.md): past the requests it
handles at once a request waits its turn, and is shed with 503 overloaded only when it would
wait longer than its bound (SPEC section 19); a request that gets no pooled connection in time
answers 503 database_unavailable, a client over its rate gets 429 rate_limited, every one of
them with Retry-After and nothing written, and a retry with the same key is accepted once."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import psycopg

from jobrelay.core.clients import RateLimit
from jobrelay.core.settings import Settings
from jobrelay.db import tables
from jobrelay.db.client_store import ClientStore
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from tests.conftest import api_client, auth, make_client
from tests.support import factories
from tests.support.processes import run_cli, running_api, service_env
from tests.support.waiting import eventually

JOB = {"type": "catalog.export", "payload": {"course": "JavaScript"}}


@asynccontextmanager
async def accepts_held(database_url: str) -> AsyncIterator[None]:
    """While inside, every accept waits: another transaction holds a lock on the outbox that
    the accept's insert needs (reads go on)."""
    async with await psycopg.AsyncConnection.connect(libpq_url(database_url)) as conn:
        await conn.execute("LOCK TABLE jobrelay.outbox IN EXCLUSIVE MODE")
        yield
        await conn.rollback()


async def jobs_with_key(store: Store, key: str) -> int:
    return await factories.count(store, tables.jobs, tables.jobs.c.idempotency_key == key)


def submit(api: httpx.AsyncClient, token: str, key: str) -> asyncio.Task[httpx.Response]:
    return asyncio.create_task(api.post("/v1/jobs", json=JOB, headers=auth(token, key)))


async def until_gauge(api: httpx.AsyncClient, name: str, count: int) -> None:
    async def reached() -> bool:
        metrics = (await api.get("/metrics")).text
        return f"{name} {float(count)}" in metrics

    await eventually(reached, what=f"{name} at {count}")


async def until_in_flight(api: httpx.AsyncClient, count: int) -> None:
    await until_gauge(api, "jobrelay_api_requests_in_flight", count)


@asynccontextmanager
async def slots_held(api: httpx.AsyncClient, token: str, database_url: str) -> AsyncIterator[None]:
    """While inside, both of the worker's 2 slots hold a submission that waits on the outbox
    lock; they are accepted once it is let go."""
    async with accepts_held(database_url):
        held = [submit(api, token, f"held-{n}") for n in range(2)]
        await until_in_flight(api, 2)
        yield
    assert [(await task).status_code for task in held] == [202, 202]


def assert_shed(answer: httpx.Response) -> None:
    """503 overloaded, as a problem, with a Retry-After of whole seconds from 1."""
    assert answer.status_code == 503, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["code"] == "overloaded"
    assert int(answer.headers["Retry-After"]) >= 1


def bounded(settings: Settings, admitted: int, max_queue_seconds: float) -> Settings:
    return settings.model_copy(
        update={"api_max_concurrency": admitted, "api_max_queue_seconds": max_queue_seconds}
    )


async def test_a_burst_at_an_idle_worker_waits_its_turn_and_is_accepted_every_one(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    """100 submissions at once at a worker with the default pool (10 connections, 20 handled
    at once): refused as soon as every slot was busy, 80 of them were answered 503, though each
    would have waited a fraction of the 0.5 s bound (SPEC section 19)."""
    token = await make_client(store, "burst")
    with running_api(settings, tmp_path) as (_, _, base):
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
        async with httpx.AsyncClient(base_url=base, limits=limits, timeout=30) as http:
            # The token is cached and the pool connected: the burst is at a worker at rest.
            assert (await http.post("/v1/jobs", json=JOB, headers=auth(token, "warm"))).is_success
            burst = [
                http.post("/v1/jobs", json=JOB, headers=auth(token, f"burst-{n}"))
                for n in range(100)
            ]
            answers = await asyncio.gather(*burst)
            assert [answer.status_code for answer in answers] == [202] * 100, {
                answer.status_code: answer.text for answer in answers
            }
            metrics = (await http.get("/metrics")).text
    assert await factories.count(store, tables.jobs) == 101
    assert 'jobrelay_api_shed_requests_total{reason="overloaded"} 0.0' in metrics


async def test_newcomers_that_would_wait_past_the_bound_are_shed_and_write_nothing(
    settings: Settings, store: Store, database_url: str
) -> None:
    token = await make_client(store, "flood")
    async with api_client(bounded(settings, admitted=2, max_queue_seconds=0.05), store) as api:
        for n in range(5):  # handling times measured: the estimate has something to go on
            assert (await api.post("/v1/jobs", json=JOB, headers=auth(token, f"m{n}"))).is_success
        async with slots_held(api, token, database_url):
            # Answered while both slots are held (until the block ends): none had a turn.
            arrivals = asyncio.gather(*(submit(api, token, f"shed-{n}") for n in range(20)))
            newcomers = await asyncio.wait_for(arrivals, 60)
            for answer in newcomers:
                assert_shed(answer)
            # Probes and scrapers are never shed.
            assert (await api.get("/healthz")).status_code == 200
            assert (await api.get("/metrics")).status_code == 200
            for n in range(20):
                assert await jobs_with_key(store, f"shed-{n}") == 0
        again = await api.post("/v1/jobs", json=JOB, headers=auth(token, "shed-0"))
        assert again.status_code == 202
        assert await jobs_with_key(store, "shed-0") == 1
        metrics = (await api.get("/metrics")).text
        assert 'jobrelay_api_shed_requests_total{reason="overloaded"} 20.0' in metrics
        assert "jobrelay_api_requests_waiting 0.0" in metrics


async def test_a_waiter_whose_turn_does_not_come_within_the_bound_is_shed_then(
    settings: Settings, store: Store, database_url: str
) -> None:
    """Nothing measured says the slots are held: the estimate lets the newcomer queue, and its
    deadline sheds it when its wait passes the bound."""
    token = await make_client(store, "patient")
    bound = bounded(settings, admitted=2, max_queue_seconds=0.3)
    async with api_client(bound, store) as api, slots_held(api, token, database_url):
        waiter = submit(api, token, "waiter")
        await until_gauge(api, "jobrelay_api_requests_waiting", 1)  # it queued, not shed at once
        # Answered while both slots are held (until the block ends): its deadline, not a turn,
        # ended its wait.
        answer = await asyncio.wait_for(waiter, 60)
        assert_shed(answer)
        assert await jobs_with_key(store, "waiter") == 0
        await until_gauge(api, "jobrelay_api_requests_waiting", 0)


async def test_with_no_wait_allowed_a_worker_sheds_as_soon_as_its_slots_are_busy(
    settings: Settings, store: Store, database_url: str
) -> None:
    token = await make_client(store, "eager")
    bound = bounded(settings, admitted=2, max_queue_seconds=0)
    async with api_client(bound, store) as api, slots_held(api, token, database_url):
        # Answered while both slots are held (until the block ends), with no wait allowed.
        shed = await asyncio.wait_for(submit(api, token, "shed"), 60)
        assert_shed(shed)
        assert shed.headers["Retry-After"] in {"1", "2"}
        assert await jobs_with_key(store, "shed") == 0


async def test_with_shedding_off_every_request_waits_its_turn(
    settings: Settings, store: Store, database_url: str
) -> None:
    token = await make_client(store, "patient")
    async with api_client(settings.model_copy(update={"api_max_concurrency": 0}), store) as api:
        async with accepts_held(database_url):
            waiting = [submit(api, token, f"wait-{n}") for n in range(5)]
            await until_in_flight(api, 0)  # nothing counted when off
            await asyncio.sleep(0.2)
            assert not any(task.done() for task in waiting)
        assert [(await task).status_code for task in waiting] == [202] * 5


async def test_no_pooled_connection_in_time_is_503_database_unavailable(
    settings: Settings, database_url: str
) -> None:
    one_connection = Store.connect(
        database_url, pool_size=1, pool_timeout=0.3, pool_mode=settings.pool_mode
    )
    try:
        token = await make_client(one_connection, "pooled")
        unbounded = settings.model_copy(update={"api_max_concurrency": 0})
        async with api_client(unbounded, one_connection) as api:
            await api.get("/v1/jobs", headers=auth(token))  # the token is cached from here on
            async with accepts_held(database_url):
                holding = submit(api, token, "holds-the-connection")
                await asyncio.sleep(0.2)
                refused = await asyncio.wait_for(submit(api, token, "no-conn"), 60)
                # The one connection is still taken (its accept waits on the lock until the
                # block ends): the pool's timeout answered, not the lock's release.
                assert not holding.done()
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "database_unavailable"
            assert refused.headers["Retry-After"] == "2"
            assert (await holding).status_code == 202
            assert (await api.post("/v1/jobs", json=JOB, headers=auth(token, "no-conn"))).is_success
            assert await jobs_with_key(one_connection, "no-conn") == 1
    finally:
        await one_connection.close()


async def test_a_client_over_its_own_limit_gets_429_and_writes_nothing(
    settings: Settings, store: Store
) -> None:
    token = await make_client(store, "limited")
    other = await make_client(store, "unlimited")
    assert await ClientStore(store).set_client_rate_limit(
        "limited", RateLimit(per_second=1, burst=3)
    )
    async with api_client(settings, store) as api:
        answers = [
            await api.post("/v1/jobs", json=JOB, headers=auth(token, f"k{n}")) for n in range(3)
        ]
        assert [answer.status_code for answer in answers] == [202] * 3
        limited = await api.post("/v1/jobs", json=JOB, headers=auth(token, "k3"))
        assert limited.status_code == 429
        assert limited.json()["code"] == "rate_limited"
        assert limited.headers["Retry-After"] == "1"
        assert await jobs_with_key(store, "k3") == 0
        # Other clients are not limited by it.
        assert (await api.post("/v1/jobs", json=JOB, headers=auth(other, "k3"))).status_code == 202
        await asyncio.sleep(1.05)
        assert (await api.post("/v1/jobs", json=JOB, headers=auth(token, "k3"))).status_code == 202
        metrics = (await api.get("/metrics")).text
        assert 'jobrelay_api_shed_requests_total{reason="rate_limited"} 1.0' in metrics


async def test_the_settings_limit_applies_unless_a_client_has_its_own(
    settings: Settings, store: Store
) -> None:
    token = await make_client(store, "everyone")
    generous = await make_client(store, "generous")
    await ClientStore(store).set_client_rate_limit("generous", RateLimit(per_second=100, burst=100))
    limited = settings.model_copy(update={"rate_limit_per_second": 0.5, "rate_limit_burst": 1})
    async with api_client(limited, store) as api:
        first = await api.post("/v1/jobs", json=JOB, headers=auth(token, "a"))
        second = await api.post("/v1/jobs", json=JOB, headers=auth(token, "b"))
        assert (first.status_code, second.status_code) == (202, 429)
        assert second.headers["Retry-After"] == "2"  # one submission per 2 s
        for n in range(10):
            answer = await api.post("/v1/jobs", json=JOB, headers=auth(generous, f"g{n}"))
            assert answer.status_code == 202


async def test_the_limit_is_shared_by_every_worker_of_the_api(
    make_settings: Settings, store: Store, tmp_path: Path
) -> None:
    """Two worker processes, one limit: the count accepted is what one limiter allows, half of
    what two independent ones would. The rate earns one more submission in 1000 s, far past
    the test's end, so the burst alone is admitted: exactly 5 (two limiters would take 10)."""
    settings = make_settings(
        api_workers=2, rate_limit_per_second=0.001, rate_limit_burst=5, api_max_concurrency=0
    )
    token = await make_client(store, "shared")
    with running_api(settings, tmp_path) as (_, _, base):
        accepted = 0

        async def hammer(number: int) -> None:
            nonlocal accepted
            # A connection each: the kernel spreads them over both workers.
            async with httpx.AsyncClient(base_url=base) as http:
                for sent in range(4):
                    key = f"{number}-{sent}"
                    answer = await http.post("/v1/jobs", json=JOB, headers=auth(token, key))
                    assert answer.status_code in (202, 429), answer.text
                    accepted += answer.status_code == 202

        await asyncio.gather(*(hammer(n) for n in range(16)))
    assert accepted == 5
    assert await factories.count(store, tables.jobs) == accepted


def limit_listed(env: dict[str, str], name: str) -> Any:
    listed = json.loads(run_cli(env, "clients", "list", "--json").stdout)
    [client] = [client for client in listed if client["name"] == name]
    return client["rate_limit"]


def test_an_operator_sets_and_clears_a_clients_limit(settings: Settings) -> None:
    env = service_env(settings)
    assert run_cli(env, "clients", "create", "shop").returncode == 0
    limited = run_cli(env, "clients", "limit", "shop", "--per-second", "50", "--burst", "200")
    assert limited.returncode == 0, limited.stderr
    assert "50/s, bursts of 200" in limited.stdout
    assert limit_listed(env, "shop") == {"per_second": 50.0, "burst": 200}
    assert run_cli(env, "clients", "limit", "shop", "--clear").returncode == 0
    assert limit_listed(env, "shop") is None
    for args, message in [
        ((), "give --per-second R [--burst B], or --clear"),
        (("--per-second", "0"), "--per-second is more than 0"),
        (("--burst", "5"), "--burst needs --per-second"),
        (("--per-second", "5", "--burst", "0"), "--burst is 1 to"),
    ]:
        refused = run_cli(env, "clients", "limit", "shop", *args)
        assert refused.returncode == 1
        assert message in refused.stderr
        assert "Traceback" not in refused.stderr
    unknown = run_cli(env, "clients", "limit", f"nobody-{uuid.uuid4().hex[:6]}", "--clear")
    assert unknown.returncode == 1 and "no client named" in unknown.stderr
