"""Long jobs against the real broker (docs/long-jobs.md, SPEC §18): with RabbitMQ's
``consumer_timeout`` lowered to 5 s, a 20 s job beside short ones on one consumer succeeds once,
the short ones are not disturbed, the broker never closes the consumer's channel, and a long
job that fails for good after its early ack still lands in the quarantine queue.

The timeout is node-wide on RabbitMQ 3.10 and read when a channel opens; the broker checks it on
the channel's tick (``channel_tick_interval``, a minute by default, also read when a channel
opens). The test lowers both through rabbitmqctl (the fault helpers' servers) before its consumer
opens its channel, the tick to 2 s so that the long job outlives several ticks past the timeout,
and restores the defaults.
``test_without_the_early_ack_the_broker_closes_the_channel`` shows that these settings do bite.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from jobrelay.broker.quarantine import describe
from jobrelay.core.errors import PermanentError
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobEvent
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support import faults
from tests.support.consumer_kit import (
    CountPayload,
    events,
    handler_runs,
    mark_outbox_published,
    new_client,
    publish_jobs,
    quarantined_messages,
    registry,
    running_consumer,
    submit,
    wait_state,
)
from tests.support.factories import results_of

CONSUMER_TIMEOUT_MS = 5_000
DEFAULT_CONSUMER_TIMEOUT_MS = 1_800_000  # RabbitMQ's own default, 30 minutes
TICK_MS = 2_000
DEFAULT_TICK_MS = 60_000  # RabbitMQ's own default channel_tick_interval
LONG_SECONDS = 20.0  # past the timeout and past several channel ticks after it
FAILING_SECONDS = 6.0


def set_broker_timeouts(milliseconds: int, tick_milliseconds: int) -> None:
    for name, value in (
        ("consumer_timeout", milliseconds),
        ("channel_tick_interval", tick_milliseconds),
    ):
        faults.rabbitmqctl("eval", f"application:set_env(rabbit, {name}, {value}).")


@pytest.fixture
def short_consumer_timeout() -> Iterator[None]:
    set_broker_timeouts(CONSUMER_TIMEOUT_MS, TICK_MS)
    try:
        yield
    finally:
        set_broker_timeouts(DEFAULT_CONSUMER_TIMEOUT_MS, DEFAULT_TICK_MS)


def long_jobs_registry() -> Registry:
    """The consumer kit's types, and one that runs a while and then fails for good."""
    job_types = Registry()
    for job_type in registry:
        job_types.register(job_type)

    @job_types.job("test.long_fails", CountPayload)
    async def long_fails(context: JobContext, payload: CountPayload) -> dict[str, Any]:
        await asyncio.sleep(payload.first_attempt_sleeps)
        raise PermanentError("it cannot be done", code="impossible")

    return job_types


async def submit_and_publish(
    store: Store, settings: Settings, client_id: uuid.UUID, jobs: list[tuple[str, dict[str, Any]]]
) -> list[uuid.UUID]:
    ids = [await submit(store, client_id, job_type, payload) for job_type, payload in jobs]
    await mark_outbox_published(store)
    await publish_jobs(
        settings, [(job_id, job_type) for job_id, (job_type, _) in zip(ids, jobs, strict=True)]
    )
    return ids


def short_jobs(tag: str, n: int) -> list[tuple[str, dict[str, Any]]]:
    return [("test.count", {"tag": f"{tag}-{i}"}) for i in range(n)]


async def test_a_job_longer_than_the_consumer_timeout_runs_once_beside_short_ones(
    short_consumer_timeout: None,
    make_settings: MakeSettings,
    store: Store,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    settings = make_settings(long_job_ack_seconds=2.0)
    client_id = await new_client(store)
    started = time.monotonic()
    async with running_consumer(settings, long_jobs_registry(), concurrency=2) as consumer:
        assert consumer.channel is not None
        channel_at_start = await consumer.channel.get_underlay_channel()
        long_id, failing_id = await submit_and_publish(
            store,
            settings,
            client_id,
            [
                ("test.count", {"tag": "long", "first_attempt_sleeps": LONG_SECONDS}),
                ("test.long_fails", {"first_attempt_sleeps": FAILING_SECONDS}),
            ],
        )
        short_ids = await submit_and_publish(store, settings, client_id, short_jobs("early", 3))
        await wait_state(store, failing_id, "quarantined", timeout=30)
        # Short jobs while the long one runs on past the broker's timeout and its next tick.
        for batch in ("middle", "late"):
            await asyncio.sleep(
                max(0.0, started + (8 if batch == "middle" else 16) - time.monotonic())
            )
            short_ids += await submit_and_publish(store, settings, client_id, short_jobs(batch, 3))
        for job_id in short_ids:
            await wait_state(store, job_id, "succeeded", timeout=20)
        await wait_state(store, long_id, "succeeded", timeout=LONG_SECONDS + 20)
        # The channel the consumer opened is the one it still has: the broker never closed it.
        channel_at_end = await consumer.channel.get_underlay_channel()
        assert channel_at_end is channel_at_start and not channel_at_end.is_closed

    cfg = settings
    assert handler_runs(cfg.results_dir, long_id) == 1
    assert [attempt for _, attempt in await results_of(store, long_id)] == [1]
    journal = [event for event, _ in await events(store, long_id)]
    assert journal.count(JobEvent.CLAIMED) == 1
    assert JobEvent.DUPLICATE_DELIVERY not in journal
    for job_id in short_ids:
        assert handler_runs(cfg.results_dir, job_id) == 1
        assert [event for event, _ in await events(store, job_id)].count(JobEvent.CLAIMED) == 1

    logged = [(record.getMessage(), getattr(record, "event", None)) for record in caplog.records]
    assert not [line for line in logged if line[1] == "settle_failed"]
    assert not [line for line in logged if "PRECONDITION_FAILED" in line[0]]
    acked_early = {
        getattr(r, "job_id", None)
        for r in caplog.records
        if getattr(r, "event", None) == "long_job_acked"
    }
    assert {str(long_id), str(failing_id)} <= acked_early

    # The failing job's message was acked early, and its copy is in the quarantine queue.
    quarantined = [describe(message) for message in await quarantined_messages(cfg)]
    copies = [message for message in quarantined if message.job_id == failing_id]
    assert len(copies) == 1
    assert (copies[0].reason, copies[0].job_type) == ("rejected", "test.long_fails")


async def test_without_the_early_ack_the_broker_closes_the_channel(
    short_consumer_timeout: None,
    make_settings: MakeSettings,
    store: Store,
) -> None:
    """The control of the test above: the same broker settings do close a channel that holds a
    delivery past the timeout, so the channel kept there is the early ack's doing."""
    settings = make_settings(long_job_ack_seconds=0.0)  # never acked early
    client_id = await new_client(store)
    async with running_consumer(settings, long_jobs_registry(), concurrency=2) as consumer:
        assert consumer.channel is not None
        channel_at_start = await consumer.channel.get_underlay_channel()
        (long_id,) = await submit_and_publish(
            store,
            settings,
            client_id,
            [("test.count", {"tag": "unacked", "first_attempt_sleeps": 12.0})],
        )
        deadline = time.monotonic() + 12.0
        while not channel_at_start.is_closed:
            assert time.monotonic() < deadline, "the broker never closed the channel"
            await asyncio.sleep(0.2)
        await wait_state(store, long_id, "succeeded", timeout=30)

    # The broker's reason, and what it did: the delivery came back while the job still ran.
    reason = channel_at_start.closing.exception()
    assert "PRECONDITION_FAILED" in repr(reason) and "timed out" in repr(reason), repr(reason)
    assert handler_runs(settings.results_dir, long_id) == 1
    assert JobEvent.DUPLICATE_DELIVERY in [event for event, _ in await events(store, long_id)]


async def test_a_consumer_timeout_below_the_early_ack_closes_the_channel_once_and_says_so(
    short_consumer_timeout: None,
    make_settings: MakeSettings,
    store: Store,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Issue 37 item 6: the broker closed the consumer's channel under every long job, unsaid.
    caplog.set_level(logging.INFO)
    settings = make_settings(long_job_ack_seconds=30.0)  # past the broker's 5 s
    client_id = await new_client(store)
    closes: list[BaseException | None] = []
    async with running_consumer(settings, long_jobs_registry(), concurrency=2) as consumer:
        assert consumer.channel is not None
        consumer.channel.close_callbacks.add(lambda _channel, error: closes.append(error))
        ids = []
        for tag in ("first", "second"):  # one after the other
            (job_id,) = await submit_and_publish(
                store,
                settings,
                client_id,
                [("test.count", {"tag": tag, "first_attempt_sleeps": 12.0})],
            )
            await wait_state(store, job_id, "succeeded", timeout=40)
            ids.append(job_id)

    # The other close is the consumer's own, as it stops.
    timed_out = [error for error in closes if "timed out" in repr(error)]
    assert len(timed_out) == 1, closes
    for job_id in ids:
        assert handler_runs(settings.results_dir, job_id) == 1
        assert [attempt for _, attempt in await results_of(store, job_id)] == [1]
    said = [
        record.getMessage()
        for record in caplog.records
        if getattr(record, "event", None) == "consumer_timeout_below_early_ack"
    ]
    assert len(said) == 1
    assert "JOBRELAY_LONG_JOB_ACK_SECONDS" in said[0] and "consumer_timeout (5s)" in said[0]
