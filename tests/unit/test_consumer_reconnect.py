"""A consumer keeps consuming across broker trouble (broker/deliveries.py, consumer/service.py):
a subscription consumes again after a reopen in a task of its own, so that a ``basic.consume``
that never answers cannot hold aio-pika's reconnect loop (which awaits the reopen callbacks);
and a consumer whose queues have not been consumed on its channel for a while connects afresh.
The channel here is an in-memory fake; make chaos-partitions is the same against RabbitMQ."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiormq.exceptions
import pytest

from jobrelay.broker import deliveries
from jobrelay.broker.deliveries import Subscription
from jobrelay.consumer import service
from jobrelay.consumer.service import Consumer
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings


class FakeUnderlay:
    """An aiormq channel whose ``basic_consume`` answers, fails or never answers."""

    def __init__(self, answer: str = "ok") -> None:
        self.answer = answer
        self.is_closed = False
        self.consumed: list[str] = []

    async def basic_consume(self, queue: str, *_: Any, **__: Any) -> None:
        if self.answer == "never":
            await asyncio.Event().wait()
        if self.answer == "fail":
            raise aiormq.exceptions.ChannelPreconditionFailed("queue down")
        self.consumed.append(queue)

    async def basic_cancel(self, _tag: str) -> None:
        return None


class FakeRobustChannel:
    """A robust channel: its underlay replaced on each reopen, whose callbacks it awaits (as
    aio-pika does, inside its reconnect loop)."""

    def __init__(self, underlay: FakeUnderlay | None) -> None:
        self.underlay = underlay
        self.reopen_callbacks: set[Any] = set()

    async def get_underlay_channel(self) -> FakeUnderlay:
        if self.underlay is None:
            raise aiormq.exceptions.ChannelInvalidStateError("Channel was not opened")
        return self.underlay

    async def reopen(self, underlay: FakeUnderlay) -> None:
        self.underlay = underlay
        for callback in list(self.reopen_callbacks):
            await callback(self)


def subscription(channel: FakeRobustChannel) -> Subscription:
    return Subscription(channel, "jobrelay.jobs.default", lambda _delivery: None)  # type: ignore[arg-type]


async def test_a_reopen_returns_at_once_though_the_consume_never_answers() -> None:
    channel = FakeRobustChannel(FakeUnderlay())
    subscribed = subscription(channel)
    await subscribed.start()
    assert await subscribed.is_consuming()

    # The reconnect loop awaits the reopen: it must go on though the consume hangs.
    async with asyncio.timeout(1.0):
        await channel.reopen(FakeUnderlay("never"))
    assert not await subscribed.is_consuming()  # a new channel, not consumed on yet
    await subscribed.cancel()


async def test_after_a_reopen_it_consumes_on_the_new_channel() -> None:
    channel = FakeRobustChannel(FakeUnderlay())
    subscribed = subscription(channel)
    await subscribed.start()
    fresh = FakeUnderlay()
    await channel.reopen(fresh)
    assert subscribed.again is not None
    await subscribed.again
    assert fresh.consumed == ["jobrelay.jobs.default"]
    assert await subscribed.is_consuming()


async def test_a_consume_that_fails_is_tried_again_while_its_channel_lives(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deliveries, "RECONSUME_PAUSE_SECONDS", 0.01)
    channel = FakeRobustChannel(FakeUnderlay())
    subscribed = subscription(channel)
    await subscribed.start()
    failing = FakeUnderlay("fail")
    await channel.reopen(failing)
    await asyncio.sleep(0.05)
    assert not await subscribed.is_consuming()
    failing.answer = "ok"  # the queue's leader is back
    assert subscribed.again is not None
    await asyncio.wait_for(subscribed.again, 1.0)
    assert await subscribed.is_consuming()


async def test_a_closed_channel_is_not_consuming() -> None:
    channel = FakeRobustChannel(FakeUnderlay())
    subscribed = subscription(channel)
    await subscribed.start()
    assert channel.underlay is not None
    channel.underlay.is_closed = True
    assert not await subscribed.is_consuming()
    channel.underlay = None  # not reopened yet
    assert not await subscribed.is_consuming()


class Consuming:
    def __init__(self, answers: list[bool]) -> None:
        self.answers = answers

    async def is_consuming(self) -> bool:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def consumer(tmp_path: Path) -> Consumer:
    return Consumer(Settings(results_dir=tmp_path), Registry())


@pytest.fixture
def quick_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(service, "WATCH_INTERVAL_SECONDS", 0.01)
    monkeypatch.setattr(service, "STUCK_SECONDS", 0.05)


@pytest.mark.usefixtures("quick_watch")
async def test_a_consumer_not_consuming_for_a_while_is_told_to_connect_afresh(
    tmp_path: Path,
) -> None:
    stop = asyncio.Event()
    stuck = [Consuming([True, False])]
    async with asyncio.timeout(2.0):
        assert await consumer(tmp_path)._stopped_or_stuck(stop, stuck) is False  # type: ignore[arg-type]


@pytest.mark.usefixtures("quick_watch")
async def test_a_consumer_that_consumes_again_in_time_is_left_alone(tmp_path: Path) -> None:
    stop = asyncio.Event()
    # not consuming for a moment (shorter than STUCK_SECONDS), then again: a reconnect
    blips = [Consuming([True, False, True] + [True] * 20)]
    waiting = asyncio.create_task(consumer(tmp_path)._stopped_or_stuck(stop, blips))  # type: ignore[arg-type]
    await asyncio.sleep(0.2)
    assert not waiting.done()
    stop.set()
    assert await asyncio.wait_for(waiting, 1.0) is True
