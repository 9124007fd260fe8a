"""The relay window's decisions (jobrelay/dispatcher/window.py) on the in-memory fakes."""

from __future__ import annotations

from jobrelay.core.flow import Limit, Rate, limits_in_force
from jobrelay.core.relay import FlowControls, QueuePick
from jobrelay.dispatcher.window import (
    HELD_RECHECK_SECONDS,
    WINDOW_MEASURE_SECONDS,
    WINDOW_RECHECK_SECONDS,
    RelayWindow,
    plan_fill,
    short_routes,
)
from tests.support.dispatcher_fakes import FakeDepths, InMemoryOutbox


def test_room_is_the_window_less_what_is_ready_and_in_flight_at_most_a_batch() -> None:
    plan = plan_fill(
        ["default", "slow"],
        window=500,
        batch_size=200,
        ready={"default": 450, "slow": 0},
        in_flight={"default": 20},
        paused=frozenset(),
    )
    assert plan.picks == [QueuePick("default", 30), QueuePick("slow", 200)]
    assert plan.full == []
    assert plan.in_use == {"default": 470, "slow": 0}


def test_a_full_window_and_a_paused_queue_get_no_pick() -> None:
    plan = plan_fill(
        ["default", "slow"],
        window=50,
        batch_size=200,
        ready={"default": 50},
        in_flight={},
        paused=frozenset({"slow"}),
    )
    assert plan.picks == []
    assert plan.full == ["default"]


def test_no_window_picks_a_batch_per_queue() -> None:
    plan = plan_fill(
        ["default"], window=0, batch_size=200, ready={}, in_flight={}, paused=frozenset()
    )
    assert plan.picks == [QueuePick("default", 200)]


def test_a_runtime_limit_wins_and_a_runtime_row_without_bounds_lifts_the_codes() -> None:
    code = {"a": Limit(concurrency=2), "b": Limit(rate=Rate(10, 1))}
    runtime = {"a": Limit(concurrency=5, per_key=True), "b": Limit()}
    assert limits_in_force(code, runtime) == {"a": Limit(concurrency=5, per_key=True)}


def test_routes_name_queues_short() -> None:
    assert short_routes({"x": "jobrelay.jobs.slow", "y": "fast"}) == {"x": "slow", "y": "fast"}


async def test_a_full_window_holds_the_backlog_and_rechecks_soon() -> None:
    outbox = InMemoryOutbox()
    for _ in range(10):
        outbox.add()
    depths = FakeDepths({"default": 4})
    flow = RelayWindow(outbox, depths, window=5)
    rows = await flow.lease(200, 20.0)
    assert len(rows) == 1 and flow.recheck_in is None
    depths.ready["default"] = 4  # the one just published is still in flight: counted
    assert await flow.lease(200, 20.0) == []
    assert flow.recheck_in == WINDOW_RECHECK_SECONDS
    flow.settled(rows)
    depths.ready["default"] = 0  # consumers took them all
    assert len(await flow.lease(200, 20.0)) == 5
    assert outbox.queues == {"default"}  # registered at the first fill
    assert (
        flow.metrics.registry.get_sample_value("jobrelay_relay_backlog_held", {"queue": "default"})
        == 10
    )


async def test_the_broker_is_asked_again_when_the_leased_rows_could_fill_the_window() -> None:
    outbox = InMemoryOutbox()
    depths = FakeDepths({"default": 100})
    now = [0.0]
    flow = RelayWindow(outbox, depths, window=400, clock=lambda: now[0])
    outbox.add()
    assert len(await flow.lease(200, 20.0)) == 1 and depths.reads == 1
    outbox.add()  # 100 ready + 1 leased since + 1 in flight + a batch: room for sure
    assert len(await flow.lease(200, 20.0)) == 1 and depths.reads == 1
    for _ in range(150):
        outbox.add()
    assert len(await flow.lease(200, 20.0)) == 150 and depths.reads == 1
    depths.ready["default"] = 350  # what was leased is ready now: the estimate leaves no room
    outbox.add()
    assert await flow.lease(200, 20.0) == [] and depths.reads == 2
    assert flow.recheck_in == WINDOW_RECHECK_SECONDS
    depths.ready["default"] = 0
    now[0] += WINDOW_MEASURE_SECONDS  # an old read is asked again, room or not
    assert len(await flow.lease(200, 20.0)) == 1 and depths.reads == 3


async def test_a_paused_queue_is_held_and_rechecked_without_a_busy_loop() -> None:
    outbox = InMemoryOutbox(controls=FlowControls(paused=frozenset({"default"})))
    outbox.add()
    flow = RelayWindow(outbox, FakeDepths(), window=0)
    assert await flow.lease(200, 20.0) == []
    assert flow.recheck_in == HELD_RECHECK_SECONDS
