"""Admission by waiting time (``api/shedding.py``, SPEC section 19): the estimate of a
newcomer's wait, the spread of the Retry-After a shed client is told, and the middleware's
queue (first come first served, a deadline, a slot never lost) around an app that holds its
requests as long as a test says."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.problems import OVERLOADED_RETRY_AFTER_MOST, overloaded_retry_after
from jobrelay.api.shedding import (
    OVERLOAD_MEMORY_SECONDS,
    SHED_MEMORY_SECONDS,
    STANDING_QUEUE_SHARE,
    HandlingTime,
    SheddingMiddleware,
    queue_bound,
)


def test_the_first_handling_time_is_the_estimate_and_later_ones_move_it_by_their_weight() -> None:
    handling = HandlingTime(weight=0.5)
    assert handling.expected_wait(ahead=10, slots=2) == 0.0  # nothing measured: no estimate
    handling.record(0.2)
    assert handling.seconds == pytest.approx(0.2)
    handling.record(0.4)
    assert handling.seconds == pytest.approx(0.3)


def test_a_newcomer_waits_for_the_ones_ahead_of_it_spread_over_the_slots() -> None:
    handling = HandlingTime()
    handling.record(0.1)
    # 32 slots handling 100 ms each free one every 3.125 ms on average.
    assert handling.expected_wait(ahead=0, slots=32) == pytest.approx(0.1 / 32)
    assert handling.expected_wait(ahead=159, slots=32) == pytest.approx(0.5)


def test_a_burst_may_wait_the_whole_bound_and_an_overload_a_share_of_it() -> None:
    assert queue_bound(0.5, OVERLOAD_MEMORY_SECONDS + 0.1) == 0.5  # no shed for a while
    share = 0.5 * STANDING_QUEUE_SHARE
    assert queue_bound(0.5, OVERLOAD_MEMORY_SECONDS / 2) == pytest.approx(share)
    assert queue_bound(0.5, 0.0) == pytest.approx(share)  # one shed just now


def draws(*values: float) -> Iterator[float]:
    return itertools.cycle(values)


def test_retry_after_is_spread_over_whole_seconds_from_one() -> None:
    low, high = draws(0.0), draws(0.999)
    assert overloaded_retry_after(1.0, lambda: next(low)) == 1
    assert overloaded_retry_after(1.0, lambda: next(high)) == 2
    # Drawn evenly: each second of the spread as often as the others.
    values = iter([n / 10 for n in range(10)])
    spread = [overloaded_retry_after(1.0, lambda: next(values)) for _ in range(10)]
    assert spread.count(1) == spread.count(2) == 5


def test_retry_after_widens_with_the_overload_up_to_a_bound_and_is_never_below_one() -> None:
    high = draws(0.999)
    assert overloaded_retry_after(3.0, lambda: next(high)) == 4
    assert overloaded_retry_after(2.2, lambda: next(high)) == 4  # ceil(2.2) = 3 over the least
    assert overloaded_retry_after(1000.0, lambda: next(high)) == OVERLOADED_RETRY_AFTER_MOST
    assert overloaded_retry_after(0.0, lambda: next(high)) == 2
    assert overloaded_retry_after(1000.0, lambda: 0.0) == 1


class HeldApp:
    """An ASGI app that answers 202 once its request is released, in the order they came."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.releases: dict[str, asyncio.Event] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope["path"]
        self.started.append(name)
        await self.releases.setdefault(name, asyncio.Event()).wait()
        await send({"type": "http.response.start", "status": 202, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    def release(self, name: str) -> None:
        self.releases.setdefault(name, asyncio.Event()).set()


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def middleware(
    app: HeldApp, *, admitted: int = 1, bound: float = 1.0, clock: FakeClock | None = None
) -> SheddingMiddleware:
    return SheddingMiddleware(
        app,  # type: ignore[arg-type]
        admitted=admitted,
        metrics=ApiMetrics(),
        max_queue_seconds=bound,
        clock=clock or FakeClock(),
    )


async def request(shedding: SheddingMiddleware, name: str) -> dict[str, Any]:
    """The answer's status, Retry-After and problem code."""
    scope = {"type": "http", "method": "POST", "path": name, "query_string": b"", "headers": []}
    messages: list[Message] = []

    async def receive() -> Message:
        raise AssertionError("a body was read")

    async def send(message: Message) -> None:
        messages.append(message)

    await shedding(scope, receive, send)
    headers = dict(messages[0].get("headers", []))
    body = b"".join(message.get("body", b"") for message in messages[1:])
    return {
        "status": messages[0]["status"],
        "retry_after": headers.get(b"retry-after", b"").decode() or None,
        "code": json.loads(body)["code"] if body else None,
    }


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def answered_on_arrival(path: str, shedding: SheddingMiddleware) -> dict[str, Any]:
    """The answer to a request that never queued: done once the loop has settled, with no
    timer needed (a queued one waits for its slot or its deadline), however slow the machine."""
    answer = asyncio.create_task(request(shedding, path))
    await settle()
    assert answer.done(), f"{path} queued instead of being answered on arrival"
    return answer.result()


async def test_past_the_slots_requests_wait_their_turn_first_come_first_served() -> None:
    app = HeldApp()
    shedding = middleware(app, admitted=1, bound=5.0)
    answers = [asyncio.create_task(request(shedding, f"/{n}")) for n in range(3)]
    await settle()
    assert app.started == ["/0"] and len(shedding.waiters) == 2
    for name in ("/0", "/1", "/2"):
        app.release(name)
        await settle()
    assert app.started == ["/0", "/1", "/2"]
    assert [(await answer)["status"] for answer in answers] == [202] * 3
    assert shedding.in_flight == 0 and not shedding.waiters


async def test_a_newcomer_expected_to_wait_past_the_bound_is_shed_at_once() -> None:
    app, clock = HeldApp(), FakeClock()
    shedding = middleware(app, admitted=1, bound=0.5, clock=clock)
    measured = asyncio.create_task(request(shedding, "/slow"))
    await settle()
    clock.now += 1.0  # handled in 1 s: the next newcomer would wait 1 s for the slot
    app.release("/slow")
    assert (await measured)["status"] == 202
    holding = asyncio.create_task(request(shedding, "/held"))
    await settle()
    shed = await answered_on_arrival("/newcomer", shedding)
    assert shed["status"] == 503 and shed["code"] == "overloaded"
    assert shed["retry_after"] in {"1", "2", "3"}  # 2 times over the bound: up to 1 + 2 s
    assert "/newcomer" not in app.started and not shedding.waiters
    app.release("/held")
    assert (await holding)["status"] == 202


async def shed_once(
    app: HeldApp, shedding: SheddingMiddleware, clock: FakeClock
) -> tuple[asyncio.Task[dict[str, Any]], list[asyncio.Task[dict[str, Any]]]]:
    """At one slot of 0.3 s and a bound of 1 s: a burst of four behind a held request, the
    fourth shed (expected 1.2 s), then all but the last waiter (/w2, holding the slot now)
    handled at once. The held request's and the waiters' answers, to await."""
    measured = asyncio.create_task(request(shedding, "/measured"))
    await settle()
    clock.now += 0.3  # one slot, 0.3 s each: the first waiter expects 0.3 s, the fourth 1.2 s
    app.release("/measured")
    await measured
    holding = asyncio.create_task(request(shedding, "/held"))
    waiting = [asyncio.create_task(request(shedding, f"/w{n}")) for n in range(3)]
    await settle()
    assert len(shedding.waiters) == 3  # a burst, queued with the whole bound
    shed = await answered_on_arrival("/fourth", shedding)
    assert shed["status"] == 503 and "/fourth" not in app.started
    for name in ("/held", "/w0", "/w1"):
        app.release(name)
        await settle()
    return holding, waiting


async def test_after_a_shed_newcomers_get_a_share_of_the_bound_for_a_while() -> None:
    app, clock = HeldApp(), FakeClock()
    shedding = middleware(app, admitted=1, bound=1.0, clock=clock)
    holding, waiting = await shed_once(app, shedding, clock)
    # The queue is empty again and one request (/w2) holds the slot. Just after a shed, a newcomer
    # expected to wait 0.3 s gets 0.1 s: shed.
    shed = await answered_on_arrival("/just-after", shedding)
    assert shed["status"] == 503 and not shedding.waiters
    # No shed for a while: the whole bound again.
    clock.now += OVERLOAD_MEMORY_SECONDS + 0.1
    later = asyncio.create_task(request(shedding, "/later"))
    await settle()
    assert len(shedding.waiters) == 1
    for name in ("/w2", "/later"):
        app.release(name)
        await settle()
    assert [(await answer)["status"] for answer in (holding, *waiting, later)] == [202] * 5


@pytest.mark.parametrize(
    ("since_the_shed", "newcomer_status"),
    [
        # Shed a moment ago: the queue standing past the share again is the same overload.
        (OVERLOAD_MEMORY_SECONDS + 0.1, 503),
        # Shed long ago, at rest since: the queue of a burst, which may use the whole bound.
        (SHED_MEMORY_SECONDS + 0.1, 202),
    ],
)
async def test_a_wait_past_the_share_is_overload_only_at_a_worker_that_shed_lately(
    since_the_shed: float, newcomer_status: int
) -> None:
    app, clock = HeldApp(), FakeClock()
    shedding = middleware(app, admitted=1, bound=1.0, clock=clock)
    holding, waiting = await shed_once(app, shedding, clock)
    clock.now += since_the_shed  # long enough to forget the overload itself
    # The queue is empty and /w2 holds the slot: a newcomer expects about 0.3 s, within the
    # whole bound. It waits 0.2 s, past the share.
    late = asyncio.create_task(request(shedding, "/late"))
    await settle()
    assert len(shedding.waiters) == 1
    clock.now += 0.2
    app.release("/w2")
    await settle()
    assert app.started[-1] == "/late"
    if newcomer_status == 503:
        assert (await answered_on_arrival("/newcomer", shedding))["status"] == 503
        assert not shedding.waiters
    else:
        newcomer = asyncio.create_task(request(shedding, "/newcomer"))
        await settle()
        assert len(shedding.waiters) == 1
        app.release("/late")
        await settle()
        app.release("/newcomer")
        assert (await newcomer)["status"] == 202
    app.release("/late")
    assert [(await task)["status"] for task in (holding, *waiting, late)] == [202] * 5
    assert shedding.in_flight == 0


async def test_a_waiter_past_its_deadline_is_shed_and_leaves_the_queue() -> None:
    app = HeldApp()
    shedding = middleware(app, admitted=1, bound=0.05)
    holding = asyncio.create_task(request(shedding, "/held"))
    await settle()
    # The slot is never let go here: only the waiter's deadline can answer it.
    shed = await asyncio.wait_for(request(shedding, "/waiter"), 30)
    assert shed["status"] == 503 and shed["code"] == "overloaded"
    assert shed["retry_after"] in {"1", "2"}
    assert "/waiter" not in app.started and not shedding.waiters
    assert shedding.metrics.waiting._value.get() == 0
    app.release("/held")
    assert (await holding)["status"] == 202
    assert shedding.in_flight == 0


async def test_with_no_wait_allowed_a_request_is_shed_as_soon_as_every_slot_is_busy() -> None:
    app = HeldApp()
    shedding = middleware(app, admitted=2, bound=0.0)
    holding = [asyncio.create_task(request(shedding, f"/held-{n}")) for n in range(2)]
    await settle()
    assert (await answered_on_arrival("/third", shedding))["status"] == 503
    for n in range(2):
        app.release(f"/held-{n}")
    assert [(await task)["status"] for task in holding] == [202, 202]


async def test_a_cancelled_waiter_gives_up_its_place_and_no_slot_is_lost() -> None:
    app = HeldApp()
    shedding = middleware(app, admitted=1, bound=5.0)
    holding = asyncio.create_task(request(shedding, "/held"))
    await settle()
    cancelled = asyncio.create_task(request(shedding, "/cancelled"))
    behind = asyncio.create_task(request(shedding, "/behind"))
    await settle()
    cancelled.cancel()
    await settle()
    assert len(shedding.waiters) == 1
    app.release("/held")
    app.release("/behind")
    assert (await holding)["status"] == (await behind)["status"] == 202
    assert app.started == ["/held", "/behind"]
    assert shedding.in_flight == 0 and not shedding.waiters
