"""The JSON Schemas of docs/schemas/ against what the code really sends and answers: the
submissions the API takes and refuses, the job views it answers in every state a job passes
through with a real dispatcher and consumer, and the messages that dispatcher publishes to
RabbitMQ (docs/schemas/README.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aio_pika
import httpx
import jsonschema_rs
import pytest

from jobrelay.core import topology as names
from jobrelay.core.states import TERMINAL_STATES
from tests.conftest import auth
from tests.support.system import System
from tests.support.waiting import eventually

SCHEMAS = Path(__file__).resolve().parents[2] / "docs" / "schemas"
SLEEP = {"type": "demo.sleep", "payload": {"seconds": 0}}
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CAPTURE_QUEUE = "test.published-schemas.capture"


def validator(name: str) -> jsonschema_rs.Validator:
    """A published schema, compiled (which checks it against its draft's meta-schema), with
    its formats (uuid, date-time) checked too: they are annotations only by default."""
    schema = json.loads((SCHEMAS / name).read_text())
    return jsonschema_rs.validator_for(schema, validate_formats=True)


def amqp_properties_validator() -> jsonschema_rs.Validator:
    """The message schema's ``$defs/amqp_properties``, compiled on its own."""
    schema = json.loads((SCHEMAS / "message.schema.json").read_text())
    properties = {"$schema": schema["$schema"], **schema["$defs"]["amqp_properties"]}
    return jsonschema_rs.validator_for(properties, validate_formats=True)


SUBMISSION = validator("submission.schema.json")
BATCH = validator("submission-batch.schema.json")
JOB = validator("job.schema.json")
PROBLEM = validator("problem.schema.json")
MESSAGE = validator("message.schema.json")
AMQP_PROPERTIES = amqp_properties_validator()


def assert_valid(schema: jsonschema_rs.Validator, document: Any, what: str) -> None:
    errors = [f"{error.instance_path}: {error.message}" for error in schema.iter_errors(document)]
    assert not errors, f"{what} fails its schema: {errors}"


async def submit(
    api: httpx.AsyncClient, token: str, body: dict[str, Any], **headers: str
) -> httpx.Response:
    """``body`` checked against submission.schema.json, then posted with a fresh key."""
    assert_valid(SUBMISSION, body, f"the submission {body}")
    return await api.post(
        "/v1/jobs", json=body, headers={**auth(token, uuid.uuid4().hex), **headers}
    )


async def read_job(api: httpx.AsyncClient, token: str, job_id: str) -> dict[str, Any]:
    """``GET /v1/jobs/{id}``, its view checked against job.schema.json."""
    answer = await api.get(f"/v1/jobs/{job_id}", headers=auth(token))
    assert answer.status_code == 200, answer.text
    view: dict[str, Any] = answer.json()
    assert_valid(JOB, view, f"the view of a {view['state']} job")
    return view


# --- submissions and their answers -----------------------------------------------------------


SUBMISSIONS: list[dict[str, Any]] = [
    SLEEP,
    {"type": "demo.sleep", "payload": {"seconds": 0.5}},
    {"type": "catalog.export", "payload": {"course": "JavaScript"}, "max_attempts": 5},
    {**SLEEP, "run_at": "2030-01-01T00:00:00+01:00"},
    {**SLEEP, "delay_seconds": 3600.5},
    {**SLEEP, "priority": -100, "concurrency_key": "tenant-7", "unique_key": "nightly"},
    {**SLEEP, "priority": 100, "max_attempts": None, "run_at": None, "delay_seconds": None},
]


async def test_every_kind_of_submission_and_its_answers_match_the_schemas(
    api: httpx.AsyncClient, alice: str
) -> None:
    seen: list[dict[str, Any]] = []
    for body in SUBMISSIONS:
        answer = await submit(api, alice, body)
        assert answer.status_code == 202, (body, answer.text)
        assert_valid(JOB, answer.json(), f"the answer to {body}")
        seen.append(answer.json())
    traced = await submit(api, alice, SLEEP, traceparent=TRACEPARENT)
    assert traced.status_code == 202
    assert_valid(JOB, traced.json(), "the answer to a traced submission")

    # The same key again: 200 and the same view.
    key = uuid.uuid4().hex
    first = await api.post("/v1/jobs", json=SLEEP, headers=auth(alice, key))
    again = await api.post("/v1/jobs", json=SLEEP, headers=auth(alice, key))
    assert (first.status_code, again.status_code) == (202, 200)
    assert_valid(JOB, again.json(), "the answer to a repeated key")

    # A live job holds the unique key: the answer is that job, marked deduplicated.
    deduplicated = await submit(api, alice, SUBMISSIONS[5])
    assert deduplicated.status_code == 200, deduplicated.text
    assert deduplicated.json()["deduplicated"] is True
    assert deduplicated.json()["id"] == seen[5]["id"]
    assert_valid(JOB, deduplicated.json(), "a deduplicated answer")

    for job in seen:
        view = await read_job(api, alice, job["id"])
        assert "deduplicated" not in view
    page = await api.get("/v1/jobs", params={"limit": 100}, headers=auth(alice))
    assert page.status_code == 200
    assert len(page.json()["items"]) == len(SUBMISSIONS) + 2
    for item in page.json()["items"]:
        assert_valid(JOB, item, "an item of GET /v1/jobs")


async def test_a_batch_and_each_of_its_results_match_the_schemas(
    api: httpx.AsyncClient, alice: str
) -> None:
    items = [{"idempotency_key": f"batch-{n}", **body} for n, body in enumerate(SUBMISSIONS)]
    bad = [
        {"idempotency_key": "batch-bad", "type": "demo.sleep", "priority": 101},
        {"idempotency_key": "batch-0", "type": "demo.sleep", "payload": {"seconds": 9}},
    ]
    body = {"jobs": items}
    assert_valid(BATCH, body, "the batch")
    assert not BATCH.is_valid({"jobs": [*items, bad[0]]})  # refused item by item (422 below)

    answer = await api.post("/v1/jobs/batch", json={"jobs": [*items, *bad]}, headers=auth(alice))

    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    assert [result["status"] for result in results] == [202] * len(items) + [422, 409]
    for result in results[: len(items)]:
        assert_valid(JOB, result["job"], "a batch's job")
    for result in results[len(items) :]:
        assert_valid(PROBLEM, result["error"], "a batch's problem")


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"payload": {"seconds": 0}}, "validation_error"),  # no type
    ({"type": ""}, "validation_error"),
    ({"type": "t" * 201}, "validation_error"),
    ({**SLEEP, "priority": 101}, "validation_error"),
    ({**SLEEP, "priority": -101}, "validation_error"),
    ({**SLEEP, "priority": 1.5}, "validation_error"),
    ({**SLEEP, "max_attempts": 0}, "validation_error"),
    ({**SLEEP, "max_attempts": 101}, "validation_error"),
    ({**SLEEP, "max_attempts": True}, "validation_error"),
    ({**SLEEP, "concurrency_key": "k" * 201}, "validation_error"),
    ({**SLEEP, "unique_key": "k" * 201}, "validation_error"),
    ({**SLEEP, "unique_key": ""}, "validation_error"),
    ({**SLEEP, "concurrency_key": "a\x00b"}, "validation_error"),
    ({**SLEEP, "delay_seconds": -1}, "validation_error"),
    ({**SLEEP, "delay_seconds": 31_536_001}, "validation_error"),
    ({**SLEEP, "run_at": "next tuesday"}, "validation_error"),
    ({**SLEEP, "run_at": "2030-01-01T00:00:00"}, "invalid_schedule"),  # no offset
    ({**SLEEP, "run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5}, "invalid_schedule"),
    ({**SLEEP, "payload": [1, 2]}, "validation_error"),
    ({**SLEEP, "payload": {"note": "a\x00b"}}, "validation_error"),
    ({**SLEEP, "surprise": 1}, "validation_error"),  # an unknown field
]


@pytest.mark.parametrize(("body", "code"), REFUSED, ids=[code for _, code in REFUSED])
async def test_a_submission_the_api_refuses_with_422_the_schema_refuses_too(
    api: httpx.AsyncClient, alice: str, body: dict[str, Any], code: str
) -> None:
    answer = await api.post("/v1/jobs", json=body, headers=auth(alice, uuid.uuid4().hex))

    assert answer.status_code == 422, answer.text
    assert answer.json()["code"] == code
    assert_valid(PROBLEM, answer.json(), "the 422 problem")
    assert not SUBMISSION.is_valid(body)
    batch = {"jobs": [{"idempotency_key": "k", **body}]}
    assert not BATCH.is_valid(batch)


async def test_what_only_the_server_knows_is_refused_by_the_api_alone(
    api: httpx.AsyncClient, alice: str
) -> None:
    # The schema cannot know the registered types nor their payload schemas: these are
    # well formed, and the API refuses them.
    cases = [
        ({"type": "no.such.type"}, "unknown_job_type"),
        ({"type": "demo.sleep", "payload": {"seconds": "long"}}, "invalid_payload"),
    ]
    for body, code in cases:
        assert_valid(SUBMISSION, body, f"the submission {body}")
        answer = await api.post("/v1/jobs", json=body, headers=auth(alice, uuid.uuid4().hex))
        assert (answer.status_code, answer.json()["code"]) == (422, code), answer.text
        assert_valid(PROBLEM, answer.json(), f"the {code} problem")


async def test_a_workflows_jobs_match_the_job_schema_while_they_wait(
    api: httpx.AsyncClient, alice: str
) -> None:
    workflow = {
        "jobs": [
            {"ref": "first", **SLEEP},
            {"ref": "then", **SLEEP, "after": ["first"], "priority": 5},
        ]
    }
    answer = await api.post("/v1/workflows", json=workflow, headers=auth(alice, "wf-1"))
    assert answer.status_code == 202, answer.text
    jobs = answer.json()["jobs"]

    first = await read_job(api, alice, jobs["first"]["id"])
    then = await read_job(api, alice, jobs["then"]["id"])

    assert (first["state"], then["state"]) == ("queued", "waiting")
    assert first["workflow_id"] == then["workflow_id"] == answer.json()["id"]
    assert then["idempotency_key"] == f"workflow:{answer.json()['id']}:then"


# --- a real dispatcher and consumer: every state, and every message ------------------------------


@asynccontextmanager
async def capture(amqp_url: str) -> AsyncIterator[aio_pika.abc.AbstractQueue]:
    """A queue of our own bound to the jobs exchange by ``#``: it gets a copy of every message
    the dispatcher publishes, and each type's own queue (which the dispatcher declares before
    its first publish of the type) still gets the one its consumer takes."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        jobs = await channel.declare_exchange(
            names.JOBS_EXCHANGE,
            aio_pika.ExchangeType.TOPIC,
            durable=True,
            arguments=names.jobs_exchange_arguments(),  # as the services declare it
        )
        queue = await channel.declare_queue(CAPTURE_QUEUE, durable=True)
        await queue.bind(jobs, routing_key="#")
        yield queue


async def captured(queue: aio_pika.abc.AbstractQueue) -> list[aio_pika.abc.AbstractIncomingMessage]:
    messages = []
    while (message := await queue.get(no_ack=True, fail=False)) is not None:
        messages.append(message)
    return messages


def amqp_properties(message: aio_pika.abc.AbstractIncomingMessage) -> dict[str, Any]:
    """A received message's exchange, routing key and properties as one JSON object."""
    delivery_mode = message.delivery_mode
    return {
        "exchange": getattr(message, "exchange", None),
        "routing_key": getattr(message, "routing_key", None),
        "content_type": message.content_type,
        "delivery_mode": None if delivery_mode is None else int(delivery_mode),
        "message_id": message.message_id,
        "correlation_id": message.correlation_id,
        "priority": message.priority,
        "headers": {
            name: value.decode() if isinstance(value, bytes) else value
            for name, value in (message.headers or {}).items()
        },
    }


class ViewWatch:
    """Reads the views of some jobs again and again, each checked against job.schema.json,
    and notes every state it saw (retrying and running last only moments)."""

    def __init__(self, api: httpx.AsyncClient, token: str) -> None:
        self.api, self.token = api, token
        self.states: set[str] = set()

    async def read(self, job_id: str) -> dict[str, Any]:
        view = await read_job(self.api, self.token, job_id)
        self.states.add(view["state"])
        return view

    async def until_finished(self, job_ids: list[str]) -> dict[str, dict[str, Any]]:
        views: dict[str, dict[str, Any]] = {}

        async def finished() -> bool:
            for job_id in job_ids:
                views[job_id] = await self.read(job_id)
            return all(view["state"] in TERMINAL_STATES for view in views.values())

        await eventually(finished, what="every job to finish", interval=0.02)
        return views


async def test_jobs_in_every_state_and_the_messages_published_for_them_match_the_schemas(
    system: System,
) -> None:
    api, alice = system.api, system.alice
    watch = ViewWatch(api, alice)
    bodies: dict[str, dict[str, Any]] = {
        "succeeds": SLEEP,
        "traced": {**SLEEP, "priority": 7, "concurrency_key": "c", "unique_key": "u"},
        "retries": {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}},
        "quarantined": {"type": "demo.fail", "payload": {"mode": "permanent", "times": 1}},
        "exhausted": {
            "type": "demo.fail",
            "payload": {"mode": "transient", "times": 5},
            "max_attempts": 2,
        },
        "export": {"type": "catalog.export", "payload": {"course": "JavaScript"}},
        "cancelled_running": {"type": "demo.sleep", "payload": {"seconds": 30}},
    }
    ids: dict[str, str] = {}
    for name, body in bodies.items():
        headers = {"traceparent": TRACEPARENT} if name == "traced" else {}
        answer = await submit(api, alice, body, **headers)
        assert answer.status_code == 202, answer.text
        ids[name] = answer.json()["id"]
        await watch.read(ids[name])
    # Never published: cancelled while queued, far from due.
    later = await submit(api, alice, {**SLEEP, "delay_seconds": 3600})
    cancelled = await api.post(f"/v1/jobs/{later.json()['id']}/cancel", headers=auth(alice))
    assert cancelled.status_code == 200
    assert_valid(JOB, cancelled.json(), "a job cancelled while queued")

    async with capture(system.amqp_url) as queue:
        with system.running("schemas"):
            running = ids["cancelled_running"]
            await system.wait_for("running", running, what="the long sleep to be claimed")
            assert (await watch.read(running))["lease_until"] is not None
            asked = await api.post(f"/v1/jobs/{running}/cancel", headers=auth(alice))
            assert asked.status_code == 202, asked.text
            assert asked.json()["cancel_requested_at"] is not None
            assert_valid(JOB, asked.json(), "a running job asked to cancel")
            views = await watch.until_finished(list(ids.values()))
        messages = await captured(queue)

    assert {name: views[job_id]["state"] for name, job_id in ids.items()} == {
        "succeeds": "succeeded",
        "traced": "succeeded",
        "retries": "succeeded",
        "quarantined": "quarantined",
        "exhausted": "quarantined",
        "export": "succeeded",
        "cancelled_running": "cancelled",
    }
    assert views[ids["export"]]["result"]["key"] == f"reports/{ids['export']}.csv"
    assert views[ids["exhausted"]]["last_error_code"] is not None
    assert {"queued", "running", "succeeded", "quarantined", "cancelled"} <= watch.states

    # A message per publish: the retried jobs have more than one, each its own outbox row.
    assert {json.loads(message.body)["job_id"] for message in messages} == set(ids.values())
    assert len(messages) >= len(ids) + 2
    assert len({message.message_id for message in messages}) == len(messages)
    for message in messages:
        body = json.loads(message.body)
        assert_valid(MESSAGE, body, f"the message body {message.body!r}")
        properties = amqp_properties(message)
        assert_valid(AMQP_PROPERTIES, properties, f"the message properties {properties}")
        assert properties["correlation_id"] == body["job_id"]
        assert properties["routing_key"] == body["type"]
    traced = [m for m in messages if json.loads(m.body)["job_id"] == ids["traced"]]
    assert len(traced) == 1
    # The submitter's trace goes on in the message: its trace id, whatever span published it.
    assert amqp_properties(traced[0])["headers"]["traceparent"][3:35] == TRACEPARENT[3:35]


async def test_the_schemas_refuse_what_the_code_never_sends(
    api: httpx.AsyncClient, alice: str
) -> None:
    # Guards on the guards: the checks above can fail.
    answer = await submit(api, alice, SLEEP)
    view = answer.json()
    for broken in (
        {**view, "state": "lost"},
        {**view, "id": "not-a-uuid"},
        {**view, "created_at": "yesterday"},
        {**view, "state": "running"},  # no lease
        {**view, "result": {"done": True}},  # a result while queued
        {key: value for key, value in view.items() if key != "attempts"},
    ):
        assert not JOB.is_valid(broken), broken
    message = {"job_id": view["id"], "type": "demo.sleep", "version": 1}
    assert MESSAGE.is_valid(message)
    for broken in ({**message, "version": 2}, {**message, "job_id": "7"}, {"job_id": view["id"]}):
        assert not MESSAGE.is_valid(broken), broken
