"""The relay loop's decisions against in-memory ports: no servers needed."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence

from jobrelay.core.relay import UNROUTABLE, OutboxRow, PublishOutcome
from jobrelay.dispatcher.relay import Relay, RelayConfig, publish_retry_delay
from tests.support.dispatcher_fakes import FakePublisher, InMemoryOutbox
from tests.support.relay import one_batch
from tests.support.waiting import eventually

CONFIG = RelayConfig(batch_size=3, lease_seconds=10, poll_interval=0.01, maintenance_interval=0.01)
# How long a stopped relay may take to return from run(): generous on a loaded machine, and
# under the 30 s (or longer) intervals some tests set, so a stop that waited one out fails.
STOPPED_WITHIN = 10.0


def make_relay(outbox: InMemoryOutbox, publisher: FakePublisher) -> Relay:
    return Relay(outbox, publisher, CONFIG, rng=random.Random(7))


async def test_confirmed_rows_are_marked_published_and_not_due_rows_are_left_alone() -> None:
    outbox, publisher = InMemoryOutbox(), FakePublisher()
    due = [outbox.add() for _ in range(2)]
    later = outbox.add(due_in=60)
    result = await one_batch(make_relay(outbox, publisher))
    assert (result.leased, result.published, result.failed) == (2, 2, {})
    assert all(row.published for row in due)
    assert not later.published and later.publish_attempts == 0
    assert [row.id for row in publisher.published] == [row.id for row in due]


async def test_a_failed_publish_leaves_the_row_unpublished_with_its_error_and_a_backoff() -> None:
    outbox, publisher = InMemoryOutbox(), FakePublisher(failures={"lost.type": UNROUTABLE})
    ok, lost = outbox.add(), outbox.add("lost.type")
    relay = make_relay(outbox, publisher)
    result = await one_batch(relay)
    assert result.failed == {UNROUTABLE: 1}
    assert ok.published and not lost.published
    assert lost.last_error == "unroutable: fake"
    assert 0 < lost.due_at <= CONFIG.retry_base_seconds
    assert relay.metrics.failures.labels(reason=UNROUTABLE)._value.get() == 1


async def test_the_backoff_of_a_row_grows_with_its_publish_attempts_up_to_the_cap() -> None:
    rng = random.Random(1)
    ceilings = [publish_retry_delay(n, CONFIG, rng) for n in range(1, 12)]
    assert ceilings[0] <= 0.5 and ceilings[3] >= 2.0 and ceilings[6] >= 16.0
    assert max(ceilings) <= CONFIG.retry_max_seconds
    assert all(
        publish_retry_delay(n, CONFIG, rng) > publish_retry_delay(n - 2, CONFIG, rng)
        for n in range(3, 8)
    )


async def test_nothing_is_leased_while_the_broker_is_unreachable() -> None:
    outbox, publisher = InMemoryOutbox(), FakePublisher(reachable=False)
    row = outbox.add()
    relay = make_relay(outbox, publisher)
    task = asyncio.create_task(relay.run())
    await _until(lambda: publisher.connects >= 2)  # it keeps trying
    assert row.publish_attempts == 0 and not row.published
    publisher.reachable = True
    await _until(lambda: row.published)
    relay.stop()
    await asyncio.wait_for(task, STOPPED_WITHIN)
    assert row.published and row.publish_attempts == 1


async def test_the_loop_survives_a_database_outage_and_drains_full_batches_without_waiting() -> (
    None
):
    outbox, publisher = InMemoryOutbox(unavailable=True), FakePublisher()
    rows = [outbox.add() for _ in range(10)]
    relay = make_relay(outbox, publisher)
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.2)
    assert not task.done()
    outbox.unavailable = False
    await _until(lambda: all(row.published for row in rows))
    relay.stop()
    await asyncio.wait_for(task, STOPPED_WITHIN)
    assert all(row.published for row in rows)
    assert relay.metrics.published._value.get() == 10


async def test_stop_returns_from_run_while_it_waits_for_work() -> None:
    relay = Relay(InMemoryOutbox(), FakePublisher(), RelayConfig(poll_interval=30))
    task = asyncio.create_task(relay.run())
    await asyncio.sleep(0.05)
    relay.stop()
    await asyncio.wait_for(task, STOPPED_WITHIN)


class GatedPublisher(FakePublisher):
    """Holds each batch's confirms until the test releases that batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[int]] = []
        self.gates: list[asyncio.Event] = []

    async def publish_batch(self, rows: Sequence[OutboxRow]) -> list[PublishOutcome]:
        self.batches.append([row.id for row in rows])
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        return await super().publish_batch(rows)


async def _until(condition: Callable[[], bool]) -> None:
    async def holds() -> bool:
        return condition()

    await eventually(holds, within=10, interval=0.005)


async def test_the_next_batch_is_leased_while_the_previous_one_waits_for_its_confirms() -> None:
    outbox, publisher = InMemoryOutbox(), GatedPublisher()
    rows = [outbox.add() for _ in range(9)]
    relay = make_relay(outbox, publisher)
    task = asyncio.create_task(relay.run())
    await _until(lambda: len(publisher.batches) == 2)
    await asyncio.sleep(0.05)
    assert publisher.batches == [[1, 2, 3], [4, 5, 6]], "two batches in flight, never three"
    assert not any(row.published for row in rows), "nothing is marked before its confirm"

    publisher.gates[0].set()
    await _until(lambda: len(publisher.batches) == 3)
    assert [row.published for row in rows] == [True] * 3 + [False] * 6

    relay.stop()  # the batches in flight still finish
    publisher.gates[1].set()
    publisher.gates[2].set()
    await asyncio.wait_for(task, STOPPED_WITHIN)
    assert all(row.published for row in rows) and len(publisher.batches) == 3


async def test_a_failure_in_one_of_two_batches_in_flight_leaves_only_its_rows_unpublished() -> None:
    outbox, publisher = InMemoryOutbox(), GatedPublisher()
    rows = [outbox.add() for _ in range(3)] + [outbox.add("unroutable") for _ in range(2)]
    publisher.failures["unroutable"] = UNROUTABLE
    relay = make_relay(outbox, publisher)
    task = asyncio.create_task(relay.run())
    await _until(lambda: len(publisher.batches) == 2)
    publisher.gates[1].set()  # the second batch's answers come first
    await asyncio.sleep(0.05)
    assert not any(row.published for row in rows), "recorded in order, after the first batch"
    publisher.gates[0].set()
    await _until(lambda: rows[4].last_error is not None)
    relay.stop()
    await asyncio.wait_for(task, STOPPED_WITHIN)
    assert [row.published for row in rows] == [True, True, True, False, False]
    assert all(row.last_error == "unroutable: fake" for row in rows[3:])


async def test_while_the_broker_blocks_publishing_nothing_is_leased_and_the_block_is_reported() -> (
    None
):
    outbox, publisher = InMemoryOutbox(), FakePublisher()
    relay = Relay(outbox, publisher, CONFIG, name="d1")
    await publisher.connect()
    publisher.block("low on memory")
    rows = [outbox.add() for _ in range(4)]
    task = asyncio.create_task(relay.run())
    await _until(lambda: outbox.broker_blocks == {"d1": "low on memory"})
    assert relay.metrics.broker_blocked._value.get() == 1
    assert not any(row.published or row.publish_attempts for row in rows)
    publisher.unblock()
    await _until(lambda: all(row.published for row in rows))
    assert outbox.broker_blocks == {}
    assert relay.metrics.broker_blocked._value.get() == 0
    assert relay.metrics.broker_blocks._value.get() == 1
    relay.stop()
    await asyncio.wait_for(task, STOPPED_WITHIN)


async def test_stop_returns_from_run_while_the_broker_blocks_publishing() -> None:
    outbox, publisher = InMemoryOutbox(), FakePublisher()
    relay = Relay(outbox, publisher, RelayConfig(maintenance_interval=30), name="d1")
    await publisher.connect()
    publisher.block()
    outbox.add()
    task = asyncio.create_task(relay.run())
    await _until(lambda: bool(outbox.broker_blocks))
    relay.stop()
    await asyncio.wait_for(task, STOPPED_WITHIN)
    assert outbox.broker_blocks == {}  # a stopped dispatcher leaves no block behind


async def test_the_loop_wakes_when_the_next_row_comes_due_not_at_the_poll() -> None:
    """A delayed job's row is published at its due time, with no NOTIFY and a poll an hour
    away: published within the wait below (far under the hour), only the due time can have
    woken the loop. A logical bound, not a measure of speed."""
    outbox, publisher = InMemoryOutbox(), FakePublisher()
    relay = Relay(outbox, publisher, RelayConfig(poll_interval=3600, maintenance_interval=3600))
    loop = asyncio.get_running_loop()
    outbox.now = loop.time()
    row = outbox.add(due_in=0.2)
    task = asyncio.create_task(relay.run())

    async def published() -> bool:
        outbox.now = loop.time()  # the fake outbox's clock follows the loop's
        return row.published

    try:
        await eventually(published, within=60, interval=0.01, what="the row at its due time")
    finally:
        relay.stop()
        await asyncio.wait_for(task, STOPPED_WITHIN)


async def test_a_relay_woken_during_a_batch_does_not_ask_for_the_next_due_time() -> None:
    outbox, publisher = InMemoryOutbox(), FakePublisher()
    relay = make_relay(outbox, publisher)
    outbox.add(due_in=60)
    await relay._wait_for_work()  # not woken: the due time bounds the wait
    assert outbox.due_asks == 1
    relay.wake()  # a NOTIFY while the last batch was out
    await relay._wait_for_work()
    assert outbox.due_asks == 1
