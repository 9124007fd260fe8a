"""``core/durable.py::DurableRun`` through the testing kit's ``InMemoryDurableStore``, the
handler's calls through ``JobContext`` (an ``async def``'s awaitables, a plain ``def``'s values
from its thread), and the kit's ``run_job`` / ``run_durable`` on durable handlers."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel

from jobrelay import JobContext, PermanentError, Registry, TransientError
from jobrelay.core.durable import (
    LEASE_GONE,
    ChildFailed,
    DurableRun,
    Fence,
    Gone,
    LeaseGone,
    SignalTimeout,
    StepKind,
    StepRecord,
    StepStatus,
    Suspended,
)
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState
from jobrelay.testing import (
    ChildEnd,
    FakeClock,
    InMemoryDurableStore,
    Signal,
    SleepingJob,
    make_context,
    run_durable,
    run_job,
)

START = datetime(2026, 12, 5, 8, 0, tzinfo=UTC)


def attempt(store: InMemoryDurableStore, job_id: uuid.UUID | None = None) -> DurableRun:
    """The next attempt of the job (a new one without ``job_id``), claimed as a consumer would."""
    job = store.add_job("test.job", job_id=job_id, max_attempts=10)
    fence = store.claim(job.id)
    return DurableRun(store, fence, store.records(job.id), now=store.clock.now())


def new_store() -> InMemoryDurableStore:
    return InMemoryDurableStore(clock=FakeClock(START))


# --- steps ---------------------------------------------------------------------------------


async def test_a_recorded_step_is_not_run_again_and_returns_its_value() -> None:
    store, runs = new_store(), []

    def charge() -> dict[str, Any]:
        runs.append(1)
        return {"charge": "ch_1", "lines": (1, 2)}

    first = attempt(store)
    assert await first.step("charge", charge) == {"charge": "ch_1", "lines": [1, 2]}
    store.finish(first.fence, JobState.RETRYING)
    second = attempt(store, first.fence.job_id)
    assert await second.step("charge", charge) == {"charge": "ch_1", "lines": [1, 2]}
    assert runs == [1]
    record = store.records(first.fence.job_id)["charge"]
    assert (record.kind, record.status, record.attempt) == (StepKind.STEP, StepStatus.DONE, 1)


async def test_an_async_step_function_is_awaited() -> None:
    async def fetch(n: int) -> int:
        return n * 2

    assert await attempt(new_store()).step("fetch", fetch, 21) == 42


async def test_a_step_that_raises_records_nothing() -> None:
    store = new_store()
    run = attempt(store)

    def busy() -> None:
        raise TransientError("busy", code="gateway_busy")

    with pytest.raises(TransientError):
        await run.step("charge", busy)
    assert store.records(run.fence.job_id) == {}


async def test_the_same_step_name_twice_in_one_attempt_is_duplicate_step() -> None:
    run = attempt(new_store())
    await run.step("a", lambda: 1)
    with pytest.raises(PermanentError) as raised:
        await run.step("a", lambda: 2)
    assert raised.value.code == "duplicate_step"


@pytest.mark.parametrize("value", [math.nan, math.inf, object(), {1: "a"}, "nul\x00"])
async def test_a_step_value_jsonb_cannot_store_is_invalid_step_value(value: Any) -> None:
    store = new_store()
    run = attempt(store)
    with pytest.raises(PermanentError) as raised:
        await run.step("bad", lambda: value)
    assert raised.value.code == "invalid_step_value"
    assert store.records(run.fence.job_id) == {}


@pytest.mark.parametrize("name", ["", "x" * 201, "a\x00b"])
async def test_a_step_name_out_of_bounds_is_invalid_step_name(name: str) -> None:
    with pytest.raises(PermanentError) as raised:
        await attempt(new_store()).step(name, lambda: 1)
    assert raised.value.code == "invalid_step_name"


async def test_a_lost_lease_is_lease_gone_and_nothing_is_recorded() -> None:
    store = new_store()
    run = attempt(store)
    store.expire_lease(run.fence.job_id)
    with pytest.raises(LeaseGone):
        await run.step("charge", lambda: 1)
    with pytest.raises(LeaseGone):
        await run.sleep(60)
    assert store.records(run.fence.job_id) == {}


class GoneStore:
    """A store whose every answer is that the lease is gone."""

    async def record_step(self, *args: Any, **kwargs: Any) -> Gone:
        return LEASE_GONE

    sleep = wait_for_signal = child = record_step


@pytest.mark.parametrize(
    "call",
    [
        lambda run: run.step("s", lambda: 1),
        lambda run: run.sleep(1),
        lambda run: run.wait_for_signal("go"),
        lambda run: run.run_child("mail.send", {}),
        lambda run: run.start_child("mail.send", {}),
    ],
)
async def test_every_call_raises_lease_gone_when_the_store_answers_gone(call: Any) -> None:
    fence = Fence(uuid.uuid4(), uuid.uuid4(), 1)
    run = DurableRun(GoneStore(), fence, {}, now=START)
    with pytest.raises(LeaseGone):
        await call(run)


# --- sleeps --------------------------------------------------------------------------------


async def test_sleeps_are_named_sleep_then_sleep_2_and_the_first_suspends() -> None:
    store = new_store()
    run = attempt(store)
    with pytest.raises(Suspended) as asleep:
        await run.sleep(60)
    assert asleep.value.wake_at == START + timedelta(seconds=60)
    job = store.job(run.fence.job_id)
    assert (job.state, job.wake_at, job.lease_token) == (
        JobState.SLEEPING,
        asleep.value.wake_at,
        None,
    )
    assert job.max_attempts == 11  # a sleep does not use an attempt

    store.clock.advance(60)
    later = attempt(store, job.id)
    await later.sleep(60)  # slept already: returns at once
    with pytest.raises(Suspended):
        await later.sleep(until=START + timedelta(days=1))
    assert list(store.records(job.id)) == ["sleep", "sleep#2"]
    assert store.records(job.id)["sleep#2"].wake_at == START + timedelta(days=1)


async def test_a_recorded_sleep_not_yet_due_sleeps_again_until_the_same_time() -> None:
    store = new_store()
    run = attempt(store)
    with pytest.raises(Suspended):
        await run.sleep(3600)
    store.clock.advance(10)  # woken early (say, into a paused queue's hold), claimed again
    again = attempt(store, run.fence.job_id)
    with pytest.raises(Suspended) as asleep:
        await again.sleep(3600)
    assert asleep.value.wake_at == START + timedelta(seconds=3600)  # recorded once


@pytest.mark.parametrize(
    ("args", "kwargs", "error"),
    [
        ((), {}, TypeError),
        ((1,), {"until": START}, TypeError),
        ((-1,), {}, ValueError),
        ((True,), {}, ValueError),
        ((), {"until": datetime(2030, 1, 1)}, ValueError),
    ],
)
async def test_a_sleep_without_one_valid_time_is_refused(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        await attempt(new_store()).sleep(*args, **kwargs)


# --- signals -------------------------------------------------------------------------------


async def test_a_signal_sent_before_the_wait_is_returned_at_once_and_recorded() -> None:
    store = new_store()
    job = store.add_job("test.job", max_attempts=5)
    assert store.send_signal(job.id, "ready", {"n": 1}) == "sent"
    assert store.send_signal(job.id, "ready", {"n": 2}) == "sent"
    run = attempt(store, job.id)
    assert await run.wait_for_signal("ready") == {"n": 1}
    record = store.records(job.id)["signal:ready"]
    assert (record.kind, record.status, record.value) == (
        StepKind.SIGNAL,
        StepStatus.DONE,
        {"n": 1},
    )
    # The second signal is kept, for the next wait of that name, not for this one.
    assert [s.taken_by for s in store.job(job.id).signals] == ["signal:ready", None]
    assert await run.wait_for_signal("ready") == {"n": 2}
    assert list(store.records(job.id)) == ["signal:ready", "signal:ready#2"]


async def test_a_wait_sleeps_until_its_signal_wakes_the_job() -> None:
    store = new_store()
    run = attempt(store)
    with pytest.raises(Suspended) as asleep:
        await run.wait_for_signal("ready")
    assert asleep.value.waiting_for == {"signal": "ready"} and asleep.value.wake_at is None
    job = store.job(run.fence.job_id)
    assert store.send_signal(job.id, "other", 1) == "sent"
    assert job.state is JobState.SLEEPING  # not the signal it waits for
    assert store.send_signal(job.id, "ready", 2) == "sent"
    assert (job.state, job.waiting_for) == (JobState.QUEUED, None)
    assert await attempt(store, job.id).wait_for_signal("ready") == 2


async def test_a_signal_with_a_used_key_is_repeated_and_to_a_finished_job_finished() -> None:
    store = new_store()
    run = attempt(store)
    job_id = run.fence.job_id
    assert store.send_signal(job_id, "s", 1, idempotency_key="k") == "sent"
    assert store.send_signal(job_id, "s", 1, idempotency_key="k") == "repeated"
    store.finish(run.fence, JobState.SUCCEEDED, result={})
    assert store.send_signal(job_id, "s", 1) == "finished"
    assert store.send_signal(uuid.uuid4(), "s", 1) == "unknown"


async def test_a_timed_out_wait_raises_signal_timeout_and_again_on_every_later_attempt() -> None:
    store = new_store()
    run = attempt(store)
    with pytest.raises(Suspended) as asleep:
        await run.wait_for_signal("ready", timeout=30)
    assert asleep.value.wake_at == START + timedelta(seconds=30)
    store.clock.advance(30)
    job_id = run.fence.job_id
    with pytest.raises(SignalTimeout):
        await attempt(store, job_id).wait_for_signal("ready", timeout=30)
    assert store.records(job_id)["signal:ready"].status is StepStatus.TIMED_OUT
    store.send_signal(job_id, "ready", 1)  # too late: the timeout is recorded
    store.finish(Fence(job_id, store.job(job_id).lease_token, 2), JobState.RETRYING)  # type: ignore[arg-type]
    with pytest.raises(SignalTimeout):
        await attempt(store, job_id).wait_for_signal("ready", timeout=30)


async def test_a_signal_timeout_quarantines_the_job_without_retries() -> None:
    assert issubclass(SignalTimeout, PermanentError)
    assert SignalTimeout("ready").code == "signal_timeout"


# --- children ------------------------------------------------------------------------------


async def test_run_child_sleeps_until_the_child_ends_and_returns_its_result() -> None:
    store = new_store()
    run = attempt(store)
    with pytest.raises(Suspended) as asleep:
        await run.run_child("mail.send", {"to": "a@b.test"})
    (child,) = store.children_of(run.fence.job_id)
    assert asleep.value.waiting_for == {"child": str(child.id)}
    assert child.key == f"{run.fence.job_id}:child:mail.send"  # the default key
    store.end_child(child.id, result={"sent": True})
    assert store.job(run.fence.job_id).state is JobState.QUEUED  # woken by the child's end
    again = attempt(store, run.fence.job_id)
    assert await again.run_child("mail.send", {"to": "a@b.test"}) == {"sent": True}
    assert len(store.children_of(run.fence.job_id)) == 1  # the key made no second child
    assert store.records(run.fence.job_id)["child:mail.send"].value == {"sent": True}


async def test_a_failed_child_raises_child_failed_and_is_not_recorded() -> None:
    store = new_store()
    store.children["mail.send"] = ChildEnd("quarantined", "bounced")
    run = attempt(store)
    with pytest.raises(Suspended):
        await run.run_child("mail.send", {})
    store.answer_children()
    again = attempt(store, run.fence.job_id)
    with pytest.raises(ChildFailed) as failed:
        await again.run_child("mail.send", {})
    assert (failed.value.state, failed.value.error_code) == ("quarantined", "bounced")
    assert failed.value.code == "child_failed"
    assert store.records(run.fence.job_id)["child:mail.send"].status is StepStatus.WAITING


async def test_start_child_returns_the_child_id_once_and_does_not_wait() -> None:
    store = new_store()
    run = attempt(store)
    child_id = await run.start_child("report.build", {"month": 11}, key="report-11")
    assert store.job(run.fence.job_id).state is JobState.RUNNING
    store.finish(run.fence, JobState.RETRYING)
    again = attempt(store, run.fence.job_id)
    assert await again.start_child("report.build", {"month": 11}, key="report-11") == child_id
    (child,) = store.children_of(run.fence.job_id)
    assert (child.id, child.key, child.payload) == (child_id, "report-11", {"month": 11})


# --- the handler's calls through JobContext --------------------------------------------------


def durable_context(store: InMemoryDurableStore, loop: asyncio.AbstractEventLoop) -> JobContext:
    run = attempt(store)
    context = make_context(job_id=run.fence.job_id)
    return dataclasses.replace(context, durable=run, loop=loop)


async def test_a_plain_def_handler_calls_the_store_from_its_thread() -> None:
    store = new_store()
    context = durable_context(store, asyncio.get_running_loop())

    def handler() -> Any:
        value = context.step("a", lambda: {"n": 1})
        context.sleep(5)
        return value

    with pytest.raises(Suspended):
        await asyncio.to_thread(handler)
    assert store.records(context.job_id)["a"].value == {"n": 1}
    assert store.job(context.job_id).state is JobState.SLEEPING


async def test_a_plain_def_handler_s_async_step_function_is_awaited_on_the_loop() -> None:
    store = new_store()
    context = durable_context(store, asyncio.get_running_loop())

    async def fetch() -> int:
        await asyncio.sleep(0)
        return 7

    assert await asyncio.to_thread(context.step, "fetch", fetch) == 7
    assert store.records(context.job_id)["fetch"].value == 7


async def test_a_plain_def_handler_without_the_loop_gets_a_clear_error() -> None:
    store = new_store()
    context = durable_context(store, asyncio.get_running_loop())
    no_loop = dataclasses.replace(context, loop=None)
    with pytest.raises(RuntimeError, match="event loop"):
        await asyncio.to_thread(no_loop.sleep, 5)


def test_a_context_without_durable_says_where_durable_calls_run() -> None:
    with pytest.raises(RuntimeError, match="testing kit"):
        make_context().step("a", lambda: 1)


# --- the kit: run_job and run_durable ---------------------------------------------------------

registry = Registry()


class Order(BaseModel):
    order_id: str
    timeout: float | None = None


CHARGES: list[str] = []


def charge_card(order_id: str) -> str:
    CHARGES.append(order_id)
    return "ch_1"


@registry.job("shop.order", Order, max_attempts=3)
async def order(context: JobContext, payload: Order) -> dict[str, Any]:
    charge = await context.step("charge", charge_card, payload.order_id)
    packed = await context.wait_for_signal("warehouse", timeout=payload.timeout)
    await context.sleep(86400)
    mail = await context.run_child("mail.send", {"order_id": payload.order_id})
    return {"charge": charge, "packed": packed, "mail": mail}


@registry.job("shop.flaky", Order, max_attempts=3)
def flaky(context: JobContext, payload: Order) -> dict[str, Any]:
    first = context.step("first", lambda: context.attempt)
    if context.attempt < 2:
        raise TransientError("not yet", code="not_yet")
    return {"first": first, "attempt": context.attempt}


@registry.job("mail.send", Order)
async def send_mail(context: JobContext, payload: Order) -> dict[str, Any]:
    await context.sleep(60)
    return {"sent_for": payload.order_id}


def test_run_job_runs_one_attempt_that_ends_asleep() -> None:
    verdict = run_job(order, Order(order_id="o-1"))
    assert verdict.state is JobState.SLEEPING and verdict.sleeping
    assert verdict.waiting_for == {"signal": "warehouse"} and verdict.wake_at is None
    assert verdict.steps["charge"].value == "ch_1"
    waiting = verdict.steps["signal:warehouse"]
    assert (waiting.kind, waiting.status) == (StepKind.SIGNAL, StepStatus.WAITING)


def test_run_durable_runs_the_whole_life_with_signals_up_front_and_a_stubbed_child() -> None:
    CHARGES.clear()
    life = run_durable(
        order,
        Order(order_id="o-2"),
        signals={"warehouse": {"packed": True}},
        children={"mail.send": {"sent": True}},
    )
    assert life.succeeded
    assert life.result == {"charge": "ch_1", "packed": {"packed": True}, "mail": {"sent": True}}
    assert CHARGES == ["o-2"]  # the step ran once in three attempts
    assert [v.state for v in life.verdicts] == [
        JobState.SLEEPING,
        JobState.SLEEPING,
        JobState.SUCCEEDED,
    ]
    day, child_wait = life.sleeps
    assert day.wake_at is not None and day.wake_at - day.at == timedelta(days=1)
    assert child_wait.waiting_for == {"child": str(life.children[0].id)}
    assert list(life.values) == ["charge", "signal:warehouse", "sleep", "child:mail.send"]


def test_run_durable_sends_a_scheduled_signal_when_the_clock_reaches_it() -> None:
    life = run_durable(
        order,
        Order(order_id="o-3", timeout=7200),
        signals=[Signal("warehouse", "late", after=3600)],
        children={"mail.send": lambda payload: {"for": payload["order_id"]}},
    )
    assert life.succeeded and life.result is not None
    assert life.result["packed"] == "late" and life.result["mail"] == {"for": "o-3"}
    assert life.signals[0].taken_by == "signal:warehouse"


def test_run_durable_raises_signal_timeout_when_no_signal_comes() -> None:
    life = run_durable(order, Order(order_id="o-4", timeout=60))
    assert life.quarantined and life.error_code == "signal_timeout"
    assert isinstance(life.last.exception, SignalTimeout)
    assert life.attempts == 2  # asleep until the deadline, then the timeout: no retries


def test_a_life_waiting_for_a_signal_nobody_sends_stops_and_goes_on_when_it_is_sent() -> None:
    life = run_durable(order, Order(order_id="o-5"), children={"mail.send": {"sent": True}})
    assert life.sleeping and life.waiting_for == {"signal": "warehouse"}
    life.store.send_signal(life.job_id, "warehouse", "now")
    resumed = run_durable(order, Order(order_id="o-5"), store=life.store, job_id=life.job_id)
    assert resumed.succeeded and resumed.result is not None and resumed.result["packed"] == "now"


def test_on_sleep_sends_the_signal_the_job_waits_for() -> None:
    seen: list[dict[str, str] | None] = []

    def warehouse(sleeping: SleepingJob) -> None:
        seen.append(sleeping.waiting_for)
        if sleeping.waiting_for == {"signal": "warehouse"}:
            assert sleeping.signal("warehouse", {"by": "callback"}) == "sent"

    life = run_durable(
        order, Order(order_id="o-6"), on_sleep=warehouse, children={"mail.send": {"ok": 1}}
    )
    assert life.succeeded and seen[0] == {"signal": "warehouse"}


def test_a_child_run_by_its_handler_and_a_failed_child() -> None:
    life = run_durable(order, Order(order_id="o-7"), signals={"warehouse": 1}, children=registry)
    assert life.succeeded and life.result is not None
    assert life.result["mail"] == {"sent_for": "o-7"}
    assert life.children[0].state is JobState.SUCCEEDED and life.children[0].sleeps

    failed = run_durable(
        order,
        Order(order_id="o-8"),
        signals={"warehouse": 1},
        children={"mail.send": ChildEnd("cancelled")},
    )
    assert failed.quarantined and failed.error_code == "child_failed"


def test_a_retry_keeps_the_recorded_steps() -> None:
    life = run_durable(flaky, Order(order_id="o-9"), policy=RetryPolicy())
    assert life.succeeded and life.result == {"first": 1, "attempt": 2}
    assert [v.state for v in life.verdicts] == [JobState.RETRYING, JobState.SUCCEEDED]


def test_a_sleep_does_not_use_an_attempt() -> None:
    registry_ = Registry()

    @registry_.job("nap", Order, max_attempts=1)
    async def nap(context: JobContext, payload: Order) -> dict[str, Any]:
        for hour in range(3):
            await context.sleep(3600, name=f"hour-{hour}")
        return {"attempt": context.attempt, "of": context.max_attempts}

    life = run_durable(nap, Order(order_id="o-10"))
    assert life.succeeded and life.result == {"attempt": 4, "of": 4}
    assert life.now - life.sleeps[0].at == timedelta(hours=3)


def test_the_store_fake_answers_like_its_port() -> None:
    from jobrelay.core.durable import DurableStore
    from tests.support.ports import port_mismatches

    assert port_mismatches(DurableStore, InMemoryDurableStore) == []


def test_a_step_record_reads_as_the_job_view_entry() -> None:
    record = StepRecord("charge", StepKind.STEP, 1, START, value={"a": 1})
    assert record.as_json() == {
        "name": "charge",
        "kind": "step",
        "status": "done",
        "at": START.isoformat(),
        "attempt": 1,
    }
    assert record.as_json(with_value=True)["value"] == {"a": 1}


def test_a_context_made_with_a_store_records_there_for_run_job() -> None:
    store = new_store()
    context = make_context(order, attempt=1, max_attempts=3, store=store)
    verdict = run_job(order, Order(order_id="o-11"), context=context)
    assert verdict.sleeping and verdict.context is context
    assert store.records(context.job_id)["charge"].value == "ch_1"
    assert store.job(context.job_id).state is JobState.SLEEPING


def test_a_lost_lease_ends_the_attempt_with_nothing_recorded_and_the_next_runs_the_step_again() -> (
    None
):
    store = new_store()
    calls: list[int] = []
    lost = Registry()

    def charge(context: JobContext) -> str:
        calls.append(context.attempt)
        if context.attempt == 1:
            store.expire_lease(context.job_id)  # the lease expired while the charge ran
        return "ch_1"

    @lost.job("lost.charge", Order)
    async def handler(context: JobContext, payload: Order) -> dict[str, Any]:
        return {"charge": await context.step("charge", charge, context)}

    life = run_durable(handler, Order(order_id="o-12"), store=store)
    assert life.succeeded and calls == [1, 2]  # fn runs again: give outside systems a key
    first = life.verdicts[0]
    assert first.state is JobState.QUEUED and isinstance(first.exception, LeaseGone)
    assert life.steps["charge"].attempt == 2


def test_a_plain_def_handler_lives_through_its_sleep_and_signal() -> None:
    plain = Registry()

    @plain.job("plain.nap", Order)
    def nap(context: JobContext, payload: Order) -> dict[str, Any]:
        first = context.step("first", lambda: payload.order_id)
        context.sleep(until=START + timedelta(hours=1))
        return {"first": first, "go": context.wait_for_signal("go")}

    store = InMemoryDurableStore(clock=FakeClock(START))
    life = run_durable(nap, Order(order_id="o-13"), store=store, signals={"go": True})
    assert life.succeeded and life.result == {"first": "o-13", "go": True}
    assert life.now == START + timedelta(hours=1)


async def test_run_durable_async_inside_a_running_loop() -> None:
    from jobrelay.testing import run_durable_async

    life = await run_durable_async(
        registry, "shop.order", {"order_id": "o-14"}, signals={"warehouse": 1}, children=registry
    )
    assert life.succeeded
    with pytest.raises(RuntimeError, match="run_durable_async"):
        run_durable(order, Order(order_id="o-14"))


def test_a_child_answered_by_a_function_that_raises_is_quarantined_with_its_code() -> None:
    def bounce(payload: dict[str, Any]) -> dict[str, Any]:
        raise PermanentError("no such mailbox", code="bounced")

    life = run_durable(
        order, Order(order_id="o-15"), signals={"warehouse": 1}, children={"mail.send": bounce}
    )
    assert life.quarantined and isinstance(life.last.exception, ChildFailed)
    assert life.last.exception.error_code == "bounced"
    assert life.children[0].state is JobState.QUARANTINED


def test_cancelling_a_sleeping_job_cancels_its_unfinished_children() -> None:
    life = run_durable(order, Order(order_id="o-16"), signals={"warehouse": 1})
    assert life.sleeping and life.waiting_for == {"child": str(life.children[0].id)}
    assert life.store.cancel(life.job_id)
    assert life.state is JobState.CANCELLED
    assert life.children[0].state is JobState.CANCELLED
    assert life.store.send_signal(life.job_id, "late", 1) == "finished"


def test_the_kit_refuses_what_no_sender_could_send() -> None:
    with pytest.raises(ValueError, match="after="):
        Signal("go", after=-1)
    with pytest.raises(TypeError, match="signals="):
        run_durable(order, Order(order_id="o-17"), signals=["go"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="signal's name"):
        new_store().send_signal(uuid.uuid4(), "x" * 201)
    with pytest.raises(ValueError, match="quarantined or cancelled"):
        ChildEnd("succeeded")
    with pytest.raises(ValueError, match="aware"):
        FakeClock(datetime(2030, 1, 1))
