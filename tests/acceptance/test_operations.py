"""An operator's day: trace a job, deal with the quarantine, redispatch a lost message.

Real processes (dispatcher, consumer, CLI) against real PostgreSQL and RabbitMQ.
"""

from __future__ import annotations

import uuid

import aio_pika
import httpx
import pytest

from jobrelay.core.message import Envelope
from jobrelay.core.topology import JOBS_EXCHANGE, QUARANTINE_QUEUE, type_queue_name
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support.queues import queue_depth
from tests.support.system import System, eventually, return_until_dead_lettered

FAILS_ONCE = {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}}
FAILS_PERMANENTLY_ONCE = {"type": "demo.fail", "payload": {"mode": "permanent", "times": 1}}
SLEEPS_NOT = {"type": "demo.sleep", "payload": {"seconds": 0}}
SLEEP_QUEUE = type_queue_name("demo.sleep")  # where the dispatcher publishes its jobs


async def publish_duplicate(amqp_url: str, job_id: str, job_type: str) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await channel.get_exchange(JOBS_EXCHANGE)
        body = Envelope(uuid.UUID(job_id), job_type).encode()
        await exchange.publish(
            aio_pika.Message(
                body,
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                content_type="application/json",
                correlation_id=job_id,
            ),
            routing_key=job_type,
        )


async def test_the_trace_of_a_job_delivered_twice_retried_once_and_succeeded_tells_all_of_it(
    system: System,
) -> None:
    with system.running():
        job_id = await system.submit(FAILS_ONCE)
        await system.wait_for("succeeded", job_id, what="success")
        await publish_duplicate(system.amqp_url, job_id, "demo.fail")
        await eventually(
            lambda: _has_event(system.store, job_id, "duplicate_delivery"),
            what="the duplicate delivery",
        )

        trace = system.cli_json("jobs", "trace", job_id)
        readable = system.cli("jobs", "trace", job_id)

    assert trace["intent"]["recorded"] and trace["intent"]["client"] == "alice"
    assert len(trace["outbox"]) == 2  # the accept's row and the retry's row
    assert all(row["published_at"] for row in trace["outbox"])
    assert trace["deliveries"] == {"total": 3, "claimed": 2, "duplicate": 1, "deferred": 0}
    assert trace["attempts"] == 2 and trace["retries_scheduled"] == 1
    assert trace["result"]["attempt"] == 2
    assert trace["result"]["value"] == {"succeeded_on_attempt": 2}
    assert trace["state"] == "succeeded"
    assert trace["why"] == "succeeded on attempt 2 of 3"
    events = [e["event"] for e in trace["events"]]
    assert events[0] == "received" and events.count("published") == 2
    assert events.index("retry_scheduled") < events.index("succeeded")
    assert readable.returncode == 0
    assert "deliveries 3 (2 claimed, 1 duplicate); attempts 2 of 3; retries 1" in readable.stdout
    assert "state      succeeded: succeeded on attempt 2 of 3" in readable.stdout

    trace_url = f"/v1/jobs/{job_id}/trace"
    via_api = (await system.api.get(trace_url, headers=auth(system.alice))).json()
    assert via_api["deliveries"] == trace["deliveries"]


async def test_a_poison_job_is_quarantined_listed_and_replayed_to_success(system: System) -> None:
    with system.running():
        job_id = await system.submit(FAILS_PERMANENTLY_ONCE)
        await system.wait_for("quarantined", job_id, what="quarantine")
        await system.wait_for_depth(1, QUARANTINE_QUEUE, what="the dead-lettered message")

        listed = system.cli_json("quarantine", "list")
        (entry,) = listed["jobs"]
        assert entry["job_id"] == job_id and entry["reason"] == "permanent_error"
        assert entry["attempts"] == 1
        assert [m["reason"] for m in entry["messages"]] == ["rejected"]
        assert [m["queue"] for m in entry["messages"]] == [type_queue_name("demo.fail")]
        readable = system.cli("quarantine", "list")
        assert job_id in readable.stdout and "permanent_error" in readable.stdout
        async with system.admin_api() as admin_api:
            admin_view = await admin_api.get("/v1/admin/quarantine", headers=auth(system.admin))
        assert [j["job_id"] for j in admin_view.json()["jobs"]] == [job_id]

        replay = system.cli("quarantine", "replay", job_id)
        assert replay.returncode == 0, replay.stderr
        assert "replayed 1 of 1" in replay.stdout
        await system.wait_for("succeeded", job_id, what="success after replay")
        assert await queue_depth(system.amqp_url, QUARANTINE_QUEUE) == 0

        again = system.cli("quarantine", "replay", job_id)
        assert (
            again.returncode == 0 and "skipped, not quarantined (it is succeeded)" in again.stdout
        )

    job = await system.store.get_job(uuid.UUID(job_id))
    assert job is not None and job.attempts == 2 and job.max_attempts == 1 + 3
    assert job.result == {"succeeded_on_attempt": 2}
    events = [e.event for e in await system.store.job_events(job.id)]
    assert events.count("replayed") == 1


async def test_a_message_dead_lettered_by_the_delivery_limit_is_reconciled_and_replayable(
    system: System,
) -> None:
    system.configure(delivery_limit=1)
    with system.running("relay", consumers=0):
        job_id = await system.submit(SLEEPS_NOT)
        await system.wait_for_depth(1, SLEEP_QUEUE, what="the message")
    await return_until_dead_lettered(system.amqp_url, 1, SLEEP_QUEUE)
    await system.wait_for_depth(1, QUARANTINE_QUEUE, what="the dead-lettered message")
    assert await system.state_of(job_id) == "queued"

    # Reading writes nothing; the dispatcher reconciles by itself, or an operator forces it.
    assert system.cli_json("quarantine", "list")["jobs"] == []
    assert system.cli_json("quarantine", "reconcile")["reconciled_delivery_limit"] == 1
    listed = system.cli_json("quarantine", "list")

    (entry,) = listed["jobs"]
    assert entry["job_id"] == job_id and entry["reason"] == "delivery_limit"
    assert entry["messages"][0]["reason"] == "delivery_limit"
    with system.running("run"):
        replay = system.cli("quarantine", "replay", "--all", "--code", "delivery_limit")
        assert replay.returncode == 0, replay.stderr
        await system.wait_for("succeeded", job_id, what="success after replay")
    assert await queue_depth(system.amqp_url, QUARANTINE_QUEUE) == 0


async def test_redispatch_publishes_again_a_job_whose_message_was_lost(system: System) -> None:
    with system.running("relay", consumers=0):
        job_id = await system.submit(SLEEPS_NOT)
        await system.wait_for_depth(1, SLEEP_QUEUE, what="the message")
        await _purge(system.amqp_url, SLEEP_QUEUE)  # the broker "lost" it

        stats = system.cli_json("stats")
        assert stats["jobs_by_state"]["queued"] == 1
        result = system.cli_json("jobs", "redispatch", "--older-than", "0s")
        assert result["redispatched"] == 1
    with system.running("run"):
        await system.wait_for("succeeded", job_id, what="success after redispatch")


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/admin/stats"),
        ("GET", "/v1/admin/quarantine"),
        ("POST", "/v1/admin/quarantine/reconcile"),
        ("POST", f"/v1/admin/jobs/{uuid.UUID(int=1)}/replay"),
        ("GET", f"/v1/admin/jobs/{uuid.UUID(int=1)}/trace"),
    ],
)
async def test_every_admin_endpoint_needs_an_admin_token(
    api: httpx.AsyncClient, alice: str, method: str, path: str
) -> None:
    assert (await api.request(method, path)).status_code == 401
    assert (await api.request(method, path, headers=auth("jr_wrong"))).status_code == 401
    forbidden = await api.request(method, path, headers=auth(alice))
    assert forbidden.status_code == 403
    assert forbidden.json()["code"] == "forbidden"


# --- helpers ------------------------------------------------------------------------------------


async def _has_event(store: Store, job_id: str, event: str) -> bool:
    return any(e.event == event for e in await store.job_events(uuid.UUID(job_id)))


async def _purge(amqp_url: str, queue_name: str) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, passive=True)
        await queue.purge()
