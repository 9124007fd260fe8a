"""The trace context of a job on real PostgreSQL and RabbitMQ, the API and the dispatcher in
process (docs/observability.md): what ``jobs.traceparent`` stores for each way a job is made,
and the ``traceparent`` header of its message. The three services as processes, exporting to a
collector: ``tests/acceptance/test_telemetry.py``."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import aio_pika
import httpx
import psycopg
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import jobrelay
from jobrelay import telemetry
from jobrelay.core import topology as names
from jobrelay.core.jobs import Job
from jobrelay.core.message import traceparent_of
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth
from tests.support.outbox import eventually, running_dispatcher

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SUBMITTED = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
ANOTHER = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
SLEEP = {"type": "demo.sleep", "payload": {"seconds": 0}}


async def submit(
    api: httpx.AsyncClient, token: str, traceparent: str | None, key: str | None = None
) -> httpx.Response:
    headers = auth(token, key or uuid.uuid4().hex)
    if traceparent is not None:
        headers["traceparent"] = traceparent
    return await api.post("/v1/jobs", json=SLEEP, headers=headers)


async def stored_traceparent(store: Store, job_id: str) -> str | None:
    job = await store.get_job(uuid.UUID(job_id))
    assert job is not None
    return job.traceparent


# --- tracing off: the submitter's context, passed on --------------------------------------------


async def test_the_submitters_traceparent_is_stored_with_the_job(
    api: httpx.AsyncClient, store: Store, alice: str
) -> None:
    response = await submit(api, alice, SUBMITTED)
    assert response.status_code == 202, response.text
    assert await stored_traceparent(store, response.json()["id"]) == SUBMITTED


@pytest.mark.parametrize("traceparent", [None, "garbage", SUBMITTED.upper()])
async def test_without_a_valid_traceparent_nothing_is_stored_and_the_job_is_accepted(
    api: httpx.AsyncClient, store: Store, alice: str, traceparent: str | None
) -> None:
    response = await submit(api, alice, traceparent)
    assert response.status_code == 202, response.text
    assert await stored_traceparent(store, response.json()["id"]) is None


async def test_a_retry_with_another_traceparent_is_the_same_request_and_keeps_the_first(
    api: httpx.AsyncClient, store: Store, alice: str
) -> None:
    first = await submit(api, alice, SUBMITTED, key="traced-1")
    again = await submit(api, alice, ANOTHER, key="traced-1")
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert await stored_traceparent(store, first.json()["id"]) == SUBMITTED


async def test_the_jobs_of_a_batch_store_the_requests_traceparent(
    api: httpx.AsyncClient, store: Store, alice: str
) -> None:
    jobs = [{**SLEEP, "idempotency_key": f"batch-{n}"} for n in range(3)]
    response = await api.post(
        "/v1/jobs/batch",
        json={"jobs": jobs},
        headers={**auth(alice), "traceparent": SUBMITTED},
    )
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [result["status"] for result in results] == [202, 202, 202]
    for result in results:
        assert await stored_traceparent(store, result["job"]["id"]) == SUBMITTED


# --- tracing on (in process): the accept span's context -------------------------------------------


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.activate(provider)
    try:
        yield exporter
    finally:
        telemetry.deactivate()
        provider.shutdown()


async def test_with_tracing_on_the_job_stores_the_accept_spans_context(
    api: httpx.AsyncClient, store: Store, alice: str, spans: InMemorySpanExporter
) -> None:
    response = await submit(api, alice, SUBMITTED)
    assert response.status_code == 202, response.text
    [accept] = [span for span in spans.get_finished_spans() if span.name == telemetry.ACCEPT_SPAN]
    assert accept.context is not None and accept.parent is not None
    assert f"{accept.parent.span_id:016x}" == SUBMITTED[36:52]
    expected = f"00-{TRACE_ID}-{accept.context.span_id:016x}-01"
    assert await stored_traceparent(store, response.json()["id"]) == expected
    assert accept.attributes is not None
    assert accept.attributes["jobrelay.job.id"] == response.json()["id"]
    assert accept.attributes["jobrelay.outcome"] == "created"


# --- jobrelay.enqueue ---------------------------------------------------------------------------


def enqueue(database_url: str, key: str, **options: Any) -> Job:
    with psycopg.connect(libpq_url(database_url)) as connection:
        return jobrelay.enqueue(connection, client="alice", key=key, **SLEEP, **options)


async def test_enqueue_stores_the_traceparent_it_is_given(
    database_url: str, store: Store, alice: str
) -> None:
    job = enqueue(database_url, "given", traceparent=SUBMITTED)
    assert job.traceparent == SUBMITTED
    assert await stored_traceparent(store, str(job.id)) == SUBMITTED


def test_enqueue_refuses_a_malformed_traceparent(database_url: str, alice: str) -> None:
    with pytest.raises(ValueError, match="traceparent"):
        enqueue(database_url, "malformed", traceparent="garbage")


async def test_enqueue_takes_the_callers_current_span_by_default(
    database_url: str, store: Store, alice: str
) -> None:
    assert enqueue(database_url, "untraced").traceparent is None
    tracer = TracerProvider().get_tracer("application")  # the application's own tracing
    with tracer.start_as_current_span("order") as span:
        context = span.get_span_context()
        job = enqueue(database_url, "traced")
    flags = int(context.trace_flags)
    expected = f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}"
    assert await stored_traceparent(store, str(job.id)) == expected


# --- the dispatcher: the message header --------------------------------------------------------


async def received_headers(amqp_url: str) -> dict[str, Any]:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(names.type_queue_name("demo.sleep"), passive=True)
        message = None
        for _ in range(200):
            message = await queue.get(no_ack=True, fail=False)
            if message is not None:
                break
            await asyncio.sleep(0.05)
        assert message is not None, "no message reached demo.sleep's queue"
        return dict(message.headers or {})


async def test_the_message_carries_the_jobs_traceparent(
    api: httpx.AsyncClient, store: Store, alice: str, make_settings: MakeSettings
) -> None:
    traced = await submit(api, alice, SUBMITTED)
    assert traced.status_code == 202
    settings = make_settings()
    async with running_dispatcher(settings):

        async def published() -> bool:
            events = await store.job_events(uuid.UUID(traced.json()["id"]))
            return any(event.event == "published" for event in events)

        await eventually(published, what="the job published")
    assert traceparent_of(await received_headers(settings.amqp_url)) == SUBMITTED
