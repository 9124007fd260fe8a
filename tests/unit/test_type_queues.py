"""Each type's own queue (docs/job-types.md, "Where a job goes"), in its pure parts: the names,
which queues a consumer takes, what the relay window counts, and a long job's slot."""

from __future__ import annotations

import asyncio

from pydantic import BaseModel

from jobrelay.consumer.early_ack import EarlyAck
from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.service import Consumer
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.relay import FlowControls, QueueDepth
from jobrelay.core.settings import Settings
from jobrelay.core.topology import (
    QUEUE_NAME_MAX_BYTES,
    has_own_queue,
    type_queue_name,
    work_queue_name,
)
from jobrelay.db.flow_store import with_type_queues
from jobrelay.dispatcher.window import RelayWindow
from tests.support.consumer_kit import StandInDelivery
from tests.support.dispatcher_fakes import FakeDepths, InMemoryOutbox


def test_a_type_has_a_queue_of_its_own_and_a_too_long_name_a_digest() -> None:
    assert type_queue_name("shop.charge") == "jobrelay.type.shop.charge"
    long = type_queue_name("é" * 200)  # 400 bytes: no queue may be named so
    assert len(long.encode()) <= QUEUE_NAME_MAX_BYTES and long.startswith("jobrelay.type.sha256.")
    assert long == type_queue_name("é" * 200) != type_queue_name("é" * 199 + "e")


def test_a_type_named_with_a_wildcard_of_the_topic_binding_has_no_queue_of_its_own() -> None:
    # Bound by its name, `shop.*` would take every `shop.x` type's messages too.
    assert has_own_queue("shop.charge") and has_own_queue("shop:charge-v2")
    assert not has_own_queue("shop.*") and not has_own_queue("#") and not has_own_queue("a#b")


def test_a_type_queue_name_is_kept_as_a_work_queue_name() -> None:
    assert work_queue_name("jobrelay.type.shop.charge") == "jobrelay.type.shop.charge"
    assert work_queue_name("slow") == "jobrelay.jobs.slow"


class Nothing(BaseModel):
    pass


def registry_of(*names: str) -> Registry:
    registry = Registry()
    for name in names:

        async def run(context: JobContext, payload: Nothing) -> dict[str, str]:
            return {}

        registry.job(name, Nothing)(run)
    return registry


def test_a_consumer_takes_the_queues_of_the_types_it_runs_that_route_to_its_queue() -> None:
    registry = registry_of("a", "b", "c")
    routes = {"b": "slow", "z": "slow"}
    default = Consumer(Settings(), registry, queue="default", type_queues=routes)
    slow = Consumer(Settings(), registry, queue="slow", type_queues=routes)
    assert default.own_types == ["a", "c"]
    assert slow.own_types == ["b"]  # z: it does not run it


async def test_the_window_counts_the_queues_of_served_types_only() -> None:
    outbox = InMemoryOutbox(controls=FlowControls(served=frozenset({"a"})))
    for _ in range(10):
        outbox.add()
    depths = FakeDepths(
        {"default": 1, type_queue_name("a"): 2, type_queue_name("nobody runs it"): 400}
    )
    flow = RelayWindow(outbox, depths, window=5)
    await flow.refresh(force=True)
    assert await flow._read_ready() == {"default": 3}  # 1 shared + 2 of a; the other held nothing


async def test_a_long_jobs_early_ack_frees_its_slot() -> None:
    freed: list[str] = []
    early = EarlyAck(
        StandInDelivery(None, body=b"{}"),
        0.01,
        ConsumerMetrics(),
        on_sent=lambda: freed.append("slot"),
    )
    early.arm(dict)
    for _ in range(500):  # waits for the ack, whatever the machine's pace
        if freed:
            break
        await asyncio.sleep(0.01)
    await early.disarm()
    assert early.sent and freed == ["slot"]


def test_queues_list_adds_each_types_ready_messages_to_its_named_queue() -> None:
    depths = {
        "default": QueueDepth(ready=1, consumers=2),
        "slow": QueueDepth(ready=0, consumers=1),
        type_queue_name("a"): QueueDepth(ready=3, consumers=2),
        type_queue_name("b"): QueueDepth(ready=5, consumers=1),
    }
    types = {"a": type_queue_name("a"), "b": type_queue_name("b")}
    assert with_type_queues(depths, types, {"b": "slow"}) == {
        "default": QueueDepth(ready=4, consumers=2),
        "slow": QueueDepth(ready=5, consumers=1),
    }
