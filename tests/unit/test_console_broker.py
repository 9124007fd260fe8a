"""The console's check of the broker (console/broker.py): one probe serves every page view while
its answer is fresh, page views at once share one probe, and what an action learns counts."""

from __future__ import annotations

import asyncio

from jobrelay.console.broker import BrokerCheck
from jobrelay.core.errors import BrokerUnavailable


class Probe:
    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    async def __call__(self) -> None:
        self.calls += 1
        await asyncio.sleep(0)
        if self.down:
            raise BrokerUnavailable("broker unavailable at amqp://127.0.0.1:1/: connection refused")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


async def test_one_probe_serves_every_page_view_while_its_answer_is_fresh() -> None:
    probe, clock = Probe(), Clock()
    check = BrokerCheck(probe, fresh_seconds=5.0, clock=clock)

    answers = [await check.reachable() for _ in range(10)]
    clock.now += 4.9
    answers.append(await check.reachable())

    assert answers == [True] * 11
    assert probe.calls == 1


async def test_an_old_answer_is_asked_again_and_an_unreachable_broker_is_said() -> None:
    probe, clock = Probe(), Clock()
    check = BrokerCheck(probe, fresh_seconds=5.0, clock=clock)
    assert await check.reachable()

    probe.down = True
    clock.now += 5.0

    assert not await check.reachable()
    assert not await check.reachable()
    assert probe.calls == 2


async def test_page_views_at_once_share_one_probe() -> None:
    probe = Probe()
    probe.down = True
    check = BrokerCheck(probe, clock=Clock())

    answers = await asyncio.gather(*(check.reachable() for _ in range(20)))

    assert answers == [False] * 20
    assert probe.calls == 1


async def test_what_an_action_learned_is_the_answer_until_it_is_old() -> None:
    probe, clock = Probe(), Clock()
    check = BrokerCheck(probe, fresh_seconds=5.0, clock=clock)
    assert await check.reachable()

    check.learned(reachable=False)  # a replay met no broker

    assert not await check.reachable()
    clock.now += 5.0
    assert await check.reachable()
    assert probe.calls == 2


async def test_a_probe_that_does_not_answer_in_time_is_unreachable_and_is_not_cancelled() -> None:
    release = asyncio.Event()
    finished: list[bool] = []

    async def slow() -> None:
        await release.wait()
        finished.append(True)

    check = BrokerCheck(slow, timeout_seconds=0.05, clock=Clock())

    assert not await check.reachable()
    release.set()
    await asyncio.sleep(0.01)
    assert finished == [True]  # the shared probe ran to its end
