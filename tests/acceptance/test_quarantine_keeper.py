"""The quarantine from both sides: the jobs in PostgreSQL and their messages in RabbitMQ.

The invariant (docs/invariants.md, 8): a replay, a redispatch or a reconciliation never removes
or hides the quarantine message of a later quarantine of the same job, and every quarantined job
has exactly one message in the quarantine queue once the system is quiet. Real processes
(dispatcher, consumer, CLI) against real PostgreSQL and RabbitMQ.

The tests are named after the review findings they pin down: finding 4, concurrent replays and
a later quarantine; finding 5, a listing filtered by code or limit; finding 7, the quarantine
read without the broker, and reading it writes nothing; finding 9, two messages for one job,
found by the chaos runner.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Mapping

import aio_pika

from jobrelay.core.jobs import JobRequest
from jobrelay.core.message import Envelope
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.core.topology import (
    DEFAULT_QUEUE,
    QUARANTINE_EXCHANGE,
    QUARANTINE_QUEUE,
    type_queue_name,
)
from jobrelay.db.store import Store
from jobrelay.operations import Operations
from tests.conftest import auth
from tests.support.consumer_kit import (
    broker,
    mark_outbox_published,
    new_client,
    publish_jobs,
    registry,
    worker,
)
from tests.support.factories import set_job
from tests.support.system import System, cli, eventually, return_until_dead_lettered

ALWAYS_PERMANENT: dict[str, object] = {
    "type": "demo.fail",
    "payload": {"mode": "permanent", "times": 1000},
}
SLEEPS_NOT: dict[str, object] = {"type": "demo.sleep", "payload": {"seconds": 0}}
SLEEP_QUEUE = type_queue_name("demo.sleep")  # where the dispatcher publishes its jobs
UNREACHABLE_BROKER = "amqp://guest:guest@127.0.0.1:1/"


async def submit(system: System, body: Mapping[str, object]) -> uuid.UUID:
    return uuid.UUID(await system.submit(body))


def operations(system: System) -> Operations:
    return Operations(system.store, system.settings, registry)


async def states(store: Store, ids: list[uuid.UUID]) -> set[str]:
    found = set()
    for job_id in ids:
        job = await store.get_job(job_id)
        assert job is not None
        found.add(job.state.value)
    return found


async def messages_per_job(system: System) -> Counter[uuid.UUID | None]:
    """Job id -> messages in the quarantine queue (read under the quarantine lock)."""
    return Counter(m.job_id for m in await operations(system).messages())


async def one_message_each(system: System, ids: list[uuid.UUID]) -> bool:
    return await messages_per_job(system) == Counter(ids)


async def dead_letter_copy(settings: Settings, job_id: uuid.UUID, message_id: str) -> None:
    """A job's message in the quarantine queue, as the consumer's nack would have put it."""
    async with broker(settings) as channel:
        exchange = await channel.get_exchange(QUARANTINE_EXCHANGE)
        await exchange.publish(
            aio_pika.Message(
                Envelope(job_id, "demo.fail").encode(),
                delivery_mode=aio_pika.DeliveryMode.PERSISTENT,
                content_type="application/json",
                message_id=message_id,
                correlation_id=str(job_id),
                headers={"x-first-death-reason": "rejected", "x-first-death-queue": DEFAULT_QUEUE},
            ),
            routing_key=DEFAULT_QUEUE,
        )


# --- finding 4: concurrent replays and a later quarantine ---------------------------------------


async def test_finding4_concurrent_replays_never_remove_the_message_of_a_later_quarantine(
    system: System,
) -> None:
    # Four replays at once of jobs that fail permanently every time: each replay's consumer
    # run quarantines the job again within milliseconds, while the other replays still remove
    # messages. Before the fix a replay removed every message of its jobs, including the one
    # of the quarantine that happened in between: quarantined, "no message in the queue".
    with system.running():
        ids = [await submit(system, ALWAYS_PERMANENT) for _ in range(3)]
        await system.wait_for("quarantined", *ids, what="the first quarantine")
        for _ in range(6):
            await asyncio.gather(*(operations(system).replay(ids) for _ in range(4)))
            await system.wait_for("quarantined", *ids, what="the quarantine after the replays")
        await system.wait_for_depth(0, what="no work left")
        await eventually(
            lambda: one_message_each(system, ids),
            within=20,
            what="exactly one quarantine message per quarantined job",
        )
        listed = system.cli_json("quarantine", "list")
    assert {entry["job_id"] for entry in listed["jobs"]} == {str(job_id) for job_id in ids}
    assert all(len(entry["messages"]) == 1 for entry in listed["jobs"])
    assert listed["other_messages"] == [] and listed["messages_in_queue"] == 3
    replays = [
        e for job_id in ids for e in await system.store.job_events(job_id) if e.event == "replayed"
    ]
    assert len(replays) >= 6 * len(ids)


# --- finding 5: a filtered or limited listing ---------------------------------------------------


async def test_finding5_list_with_code_or_limit_never_calls_a_quarantined_job_not_quarantined(
    system: System,
) -> None:
    with system.running():
        permanent = [await submit(system, ALWAYS_PERMANENT) for _ in range(2)]
        exhausted = await submit(
            system,
            {"type": "demo.fail", "payload": {"mode": "transient", "times": 9}, "max_attempts": 1},
        )
        ids = [*permanent, exhausted]
        await system.wait_for("quarantined", *ids, what="three quarantines")
        await eventually(lambda: one_message_each(system, ids), what="their messages")

    by_code = system.cli_json("quarantine", "list", "--code", "attempts_exhausted")
    limited = system.cli_json("quarantine", "list", "--limit", "1")
    readable = system.cli("quarantine", "list", "--code", "permanent_error")
    async with system.admin_api() as admin_api:
        via_api = (
            await admin_api.get(
                "/v1/admin/quarantine", params={"limit": 1}, headers=auth(system.admin)
            )
        ).json()

    assert [entry["job_id"] for entry in by_code["jobs"]] == [str(exhausted)]
    assert len(limited["jobs"]) == 1 and len(via_api["jobs"]) == 1
    for report in (by_code, limited, via_api):
        assert report["other_messages"] == [], report["other_messages"]
        assert report["messages_in_queue"] == 3 and report["broker"] == "ok"
    assert readable.returncode == 0, readable.stderr
    assert "not quarantined" not in readable.stdout
    assert {str(job_id) for job_id in permanent} <= set(readable.stdout.split())

    # A message whose job is really not quarantined is still told apart, by its job's state.
    stray = uuid.uuid4()
    await dead_letter_copy(system.settings, stray, "99")
    shown = system.cli("quarantine", "list", "--limit", "1")
    assert f"job {stray} does not exist" in shown.stdout
    assert shown.stdout.count("message 99:") == 1 and "not quarantined" not in shown.stdout


# --- finding 7: reading the quarantine without the broker, and writing nothing ------------------


async def test_finding7_the_quarantine_is_listed_from_the_database_when_the_broker_is_down(
    system: System,
) -> None:
    with system.running():
        job_id = await submit(system, ALWAYS_PERMANENT)
        await system.wait_for("quarantined", job_id, what="the quarantine")
    no_broker = system.settings.model_copy(update={"amqp_url": UNREACHABLE_BROKER})

    listed = cli(no_broker, "quarantine", "list")
    as_json = cli(no_broker, "quarantine", "list", "--json")
    # The `api` fixture's settings point at no broker at all.
    answer = await system.api.get("/v1/admin/quarantine", headers=auth(system.admin))

    assert listed.returncode == 0, listed.stderr
    assert f"{job_id}" in listed.stdout and "permanent_error" in listed.stdout
    assert "messages unknown" in listed.stdout
    notes = [line for line in listed.stderr.splitlines() if line.startswith("jobrelay:")]
    assert len(notes) == 1
    assert "broker is unreachable (connection refused): showing the database side" in notes[0]
    assert as_json.returncode == 0 and '"broker": "unavailable"' in as_json.stdout
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["broker"] == "unavailable"
    assert [entry["job_id"] for entry in body["jobs"]] == [str(job_id)]


async def test_finding7_reading_the_quarantine_writes_nothing_the_dispatcher_reconciles(
    system: System,
) -> None:
    # Two jobs whose messages the broker dead-lettered on its own (x-delivery-limit 1).
    system.configure(delivery_limit=1)
    store, as_admin = system.store, auth(system.admin)
    with system.running("relay", consumers=0):
        first = await submit(system, SLEEPS_NOT)
        second = await submit(system, SLEEPS_NOT)
        await system.wait_for_depth(2, SLEEP_QUEUE, what="the messages")
    await return_until_dead_lettered(system.amqp_url, 2, SLEEP_QUEUE)
    await system.wait_for_depth(2, QUARANTINE_QUEUE, what="their deaths")

    # A GET is a read: the jobs stay queued, their messages are shown as not quarantined.
    async with system.admin_api() as admin_api:
        read = (await admin_api.get("/v1/admin/quarantine", headers=as_admin)).json()
        listed = system.cli_json("quarantine", "list")
        assert await states(store, [first, second]) == {"queued"}
        assert read["jobs"] == [] and listed["jobs"] == []
        assert {m["job_state"] for m in read["other_messages"]} == {"queued"}
        assert {m["reason"] for m in listed["other_messages"]} == {"delivery_limit"}

        # An operator can force it: POST /v1/admin/quarantine/reconcile (or the CLI's).
        forced = await admin_api.post("/v1/admin/quarantine/reconcile", headers=as_admin)
        assert forced.status_code == 200, forced.text
        assert forced.json()["reconciled_delivery_limit"] == 2
    assert await states(store, [first, second]) == {"quarantined"}
    again = system.cli_json("quarantine", "reconcile")
    assert again["reconciled_delivery_limit"] == 0 and again["messages_in_queue"] == 2

    # Without anyone asking, the dispatcher's maintenance does the same.
    with system.running("again", consumers=0):
        third = await submit(system, SLEEPS_NOT)
        await system.wait_for_depth(1, SLEEP_QUEUE, what="its message")
        await return_until_dead_lettered(system.amqp_url, 1, SLEEP_QUEUE)
        await system.wait_for("quarantined", third, what="the dispatcher's reconciliation")
    job = await store.get_job(third)
    assert job is not None and job.last_error_code == "delivery_limit"
    assert await one_message_each(system, [first, second, third])


# --- finding 9: two messages for one job, found by the chaos runner -----------------------------


async def test_finding9_the_dispatcher_leaves_exactly_one_message_per_quarantined_job(
    system: System,
) -> None:
    # The chaos trace (``python -m chaos --seed 20240601``, the seed that
    # tests/chaos/test_short_profile.py runs): the job's outbox row was published twice (the
    # first confirm was lost); copy 1 was claimed and quarantined, copy 2 came as a duplicate whose
    # ack was lost, and its redelivery was dead-lettered too: two messages for one job.
    store, settings = system.store, system.settings
    job = (
        await store.accept_job(
            await new_client(store),
            JobRequest("chaos", "demo.fail", {"mode": "permanent", "times": 1000}, 3),
        )
    ).job
    await mark_outbox_published(store)
    await publish_jobs(settings, [(job.id, "demo.fail"), (job.id, "demo.fail")])
    runner = worker(store, settings)
    async with broker(settings) as channel:
        queue = await channel.declare_queue(DEFAULT_QUEUE, passive=True)
        first = await queue.get(no_ack=False)
        assert (await runner.handle(first)).outcome == "quarantined"
        second = await queue.get(no_ack=False)
        assert (await runner.handle(AckLost(second))).outcome == "duplicate"
    async with broker(settings) as channel:
        queue = await channel.declare_queue(DEFAULT_QUEUE, passive=True)
        redelivery = await queue.get(no_ack=False)
        assert second.body == redelivery.body and redelivery.redelivered
        assert (await runner.handle(redelivery)).disposition == "dead_letter"
    # And stale leftovers: a message of a job that succeeded since, and one of no job at all.
    succeeded = (
        await store.accept_job(
            await new_client(store),
            JobRequest("done", "demo.sleep", {"seconds": 0}, 3),
        )
    ).job
    await mark_outbox_published(store)
    await set_job(store, succeeded.id, state=JobState.SUCCEEDED, attempts=0)  # never claimed
    await dead_letter_copy(settings, succeeded.id, "5")
    stray = uuid.uuid4()
    await dead_letter_copy(settings, stray, "6")
    await system.wait_for_depth(4, QUARANTINE_QUEUE, what="4 messages")

    with system.running(consumers=0):
        await eventually(
            lambda: _counts_are(system, {job.id: 1, stray: 1}),
            within=20,
            what="one message for the quarantined job, none for the succeeded one",
        )
    kept = [m for m in await operations(system).messages() if m.job_id == job.id]
    assert [m.reason for m in kept] == ["rejected"]


# --- helpers ------------------------------------------------------------------------------------


async def _counts_are(system: System, expected: dict[uuid.UUID, int]) -> bool:
    return dict(await messages_per_job(system)) == expected


class AckLost:
    """A delivery whose ack never reaches the broker (the channel closes first)."""

    def __init__(self, message: aio_pika.abc.AbstractIncomingMessage) -> None:
        self.body = message.body
        self.redelivered = message.redelivered
        self.channel = message.channel

    async def ack(self, multiple: bool = False) -> None:
        await self.channel.close()

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        await self.channel.close()
