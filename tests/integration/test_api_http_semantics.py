"""What the API answers around its operations (issue 24, items 19, 20, 22, 23), against real
PostgreSQL:

- a wrong method is a ``405`` problem with ``Allow`` naming every method served at the path
  (the exception's headers were dropped), and ``GET /v1/jobs/batch`` is one (it was read as the
  job "batch": a 422);
- under pressure only the job read that waits is exempt from shedding: a list with ``&wait=`` in
  its query is shed like any request, and counted under its route, not ``unmatched``;
- the request latency buckets reach the 60 s a ``?wait=`` read may take;
- ``503 broker_unavailable`` carries ``Retry-After``, as every 503 does;
- ``max_attempts: 3.0`` is the integer 3, while 3.5 and true stay refused.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import api_client, auth, make_client
from tests.integration.test_pressure_api import JOB, accepts_held, submit, until_in_flight
from tests.support.metrics import samples, value
from tests.support.processes import free_port

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def served_methods(settings: Settings) -> dict[str, set[str]]:
    """Each path of the OpenAPI document and the methods it serves."""
    document = create_app(settings).openapi()
    return {path: {method.upper() for method in item} for path, item in document["paths"].items()}


async def test_every_path_answers_a_method_it_does_not_serve_with_405_and_allow(
    api: httpx.AsyncClient, settings: Settings
) -> None:
    """Every operation's path, every method it does not serve: a 405 problem whose ``Allow``
    lists exactly the methods the document gives the path (before: no ``Allow`` at all, and
    ``DELETE /v1/jobs`` would have named POST alone)."""
    paths = served_methods(settings)
    assert len(paths) >= 14
    for template, served in paths.items():
        path = template.replace("{job_id}", str(uuid.uuid4()))
        for method in sorted(set(METHODS) - served):
            answer = await api.request(method, path)
            assert answer.status_code == 405, (method, template, answer.text)
            assert answer.headers["content-type"].startswith("application/problem+json")
            assert answer.json()["code"] == "method_not_allowed"
            assert set(answer.headers["Allow"].split(", ")) == served, (method, template)


async def test_get_on_the_batch_path_is_405_allow_post_not_a_job_read(
    api: httpx.AsyncClient, alice: str
) -> None:
    answer = await api.get("/v1/jobs/batch", headers=auth(alice))
    assert answer.status_code == 405, answer.text
    assert answer.headers["Allow"] == "POST"
    # A malformed job id is still the job read's own 422.
    malformed = await api.get("/v1/jobs/batchy", headers=auth(alice))
    assert (malformed.status_code, malformed.json()["code"]) == (422, "validation_error")


@asynccontextmanager
async def at_capacity(api: httpx.AsyncClient, token: str, database_url: str) -> AsyncIterator[None]:
    """Inside, the worker (admitting two) holds two submissions: the next request is shed;
    after, both were accepted."""
    async with accepts_held(database_url):
        held = [submit(api, token, f"held-{n}") for n in range(2)]
        await until_in_flight(api, 2)
        yield
    assert [(await task).status_code for task in held] == [202, 202]


async def test_under_pressure_only_the_job_read_that_waits_is_exempt_from_shedding(
    settings: Settings, store: Store, database_url: str
) -> None:
    """A list with ``&wait=`` in its query was let in whatever the load (the exemption matched
    the query text), and a shed request was counted under ``route="unmatched"``."""
    token = await make_client(store, "waiter")
    async with api_client(settings.model_copy(update={"api_max_concurrency": 2}), store) as api:
        created = await api.post("/v1/jobs", json=JOB, headers=auth(token, "read-me"))
        job_id = created.json()["id"]
        async with at_capacity(api, token, database_url):
            listed = await api.get("/v1/jobs?limit=100&wait=0", headers=auth(token))
            assert listed.status_code == 503, listed.text
            assert listed.json()["code"] == "overloaded"
            assert listed.headers["Retry-After"] in {"1", "2"}  # spread (api/problems.py)
            waited = await api.get(f"/v1/jobs/{job_id}?wait=0.2", headers=auth(token))
            assert waited.status_code == 200, waited.text
        scraped = samples((await api.get("/metrics")).text)
    count = "jobrelay_api_request_seconds_count"
    assert value(scraped, count, route="/v1/jobs", method="GET", status="503") == 1
    assert value(scraped, count, route="unmatched", method="GET", status="503") is None
    assert value(scraped, count, route="/v1/jobs/{job_id}", method="GET", status="200") == 1


async def test_a_shed_request_is_counted_under_its_route_template(
    settings: Settings, store: Store, database_url: str
) -> None:
    """Shed before routing, it was counted under ``route="unmatched"``: a per-route error rate
    missed every shed request."""
    token = await make_client(store, "counted")
    async with api_client(settings.model_copy(update={"api_max_concurrency": 2}), store) as api:
        async with at_capacity(api, token, database_url):
            shed = await api.post("/v1/jobs", json=JOB, headers=auth(token, "shed"))
            assert shed.status_code == 503
        scraped = samples((await api.get("/metrics")).text)
    count = "jobrelay_api_request_seconds_count"
    assert value(scraped, count, route="/v1/jobs", method="POST", status="503") == 1
    assert value(scraped, count, route="/v1/jobs", method="POST", status="202") == 2


async def test_the_latency_buckets_reach_the_minute_a_waiting_read_may_take(
    api: httpx.AsyncClient,
) -> None:
    assert (await api.get("/healthz")).status_code == 200
    scraped = samples((await api.get("/metrics")).text)
    bucket = "jobrelay_api_request_seconds_bucket"
    labels = {"route": "/healthz", "method": "GET", "status": "200"}
    for upper in ("10.0", "30.0", "60.0"):
        assert value(scraped, bucket, le=upper, **labels) == 1, upper


async def test_broker_unavailable_carries_retry_after(settings: Settings, store: Store) -> None:
    admin = await make_client(store, "ops", admin=True)
    no_broker = settings.model_copy(
        update={"amqp_url": f"amqp://guest:guest@127.0.0.1:{free_port()}/"}
    )
    async with api_client(no_broker, store) as api:
        answer = await api.post("/v1/admin/quarantine/reconcile", headers=auth(admin))
    assert answer.status_code == 503, answer.text
    assert answer.json()["code"] == "broker_unavailable"
    assert int(answer.headers["Retry-After"]) >= 1


@pytest.mark.parametrize(
    ("max_attempts", "status"),
    [(3.0, 202), (3, 202), (3.5, 422), (True, 422), ("3", 422)],
    ids=["integral float", "integer", "fraction", "boolean", "string"],
)
async def test_max_attempts_takes_an_integral_number_and_nothing_else(
    api: httpx.AsyncClient, alice: str, max_attempts: Any, status: int
) -> None:
    body = {**JOB, "max_attempts": max_attempts}
    answer = await api.post("/v1/jobs", json=body, headers=auth(alice, "attempts"))
    assert answer.status_code == status, answer.text
    if status == 202:
        assert answer.json()["max_attempts"] == 3
    else:
        assert answer.json()["errors"][0]["loc"] == ["body", "max_attempts"]


async def test_a_batch_item_takes_an_integral_float_as_max_attempts(
    api: httpx.AsyncClient, alice: str
) -> None:
    items = [
        {**JOB, "idempotency_key": "whole", "max_attempts": 4.0},
        {**JOB, "idempotency_key": "half", "max_attempts": 4.5},
    ]
    answer = await api.post("/v1/jobs/batch", json={"jobs": items}, headers=auth(alice))
    whole, half = answer.json()["results"]
    assert (whole["status"], whole["job"]["max_attempts"]) == (202, 4)
    assert half["status"] == 422
