"""Durable execution end to end (docs/durable-execution.md, SPEC §21): the real dispatcher and
real consumers (in the test's event loop, or processes killed with SIGKILL) run handlers that
record steps, sleep, wait for signals and start children, on PostgreSQL and RabbitMQ.

What they prove: a step recorded once is never run again for its job, and every later attempt
sees its value (across a retry, a sleep, a consumer killed inside the next step); a sleeping job
holds no lease and no concurrency slot, wakes no earlier than its time (the claim's time is at
or after its recorded wake time) and finishes on whichever consumer takes it; a signal sent
before or after the wait is returned to it; a child's end wakes its parent. The handlers are in
``tests/support/durable_kit.py``, in ``async def`` and plain ``def`` forms.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from jobrelay.core.settings import Settings
from jobrelay.core.workflows import OnFailure, workflow_step
from jobrelay.db.flow_store import FlowStore
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore, WorkflowSubmission
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    StandInDelivery,
    events,
    new_client,
    rows,
    running_consumer,
    scalar,
    submit,
    wait_state,
    worker,
)
from tests.support.durable_kit import gate_file, registry, step_runs
from tests.support.outbox import running_dispatcher
from tests.support.processes import Service, service_env
from tests.support.waiting import eventually

HANDLERS = "tests.support.durable_kit:registry"


@contextlib.asynccontextmanager
async def running_system(cfg: Settings, *, concurrency: int = 4) -> AsyncIterator[None]:
    """The dispatcher and one consumer of the durable types, in the test's event loop."""
    async with running_dispatcher(cfg), running_consumer(cfg, registry, concurrency=concurrency):
        yield


async def job_row(store: Store, job_id: uuid.UUID) -> Any:
    found = await rows(
        store,
        "SELECT state, attempts, max_attempts, wake_at, waiting_on, lease_token, lease_until,"
        " last_error_code, last_error, parent_job_id FROM jobrelay.jobs WHERE id = :id",
        id=job_id,
    )
    return found[0]


async def result_of(store: Store, job_id: uuid.UUID) -> Any:
    return await scalar(
        store, "SELECT result FROM jobrelay.job_results WHERE job_id = :id", id=job_id
    )


async def recorded_steps(store: Store, job_id: uuid.UUID) -> dict[str, Any]:
    """The job's ``job_steps`` by name: (kind, status, attempt)."""
    found = await rows(
        store,
        "SELECT name, kind, status, attempt FROM jobrelay.job_steps WHERE job_id = :id",
        id=job_id,
    )
    return {row.name: (row.kind, row.status, row.attempt) for row in found}


async def signal(store: Store, job_id: uuid.UUID, name: str, value: str) -> str:
    """``jobrelay_signal`` in a transaction of its own, as a sender's application sends it."""
    return str(
        await scalar(
            store,
            "SELECT jobrelay.jobrelay_signal(:id, :name, CAST(:value AS jsonb))",
            id=job_id,
            name=name,
            value=value,
        )
    )


async def claimed_at_or_after_its_wake(store: Store, job_id: uuid.UUID) -> bool:
    """Every claim after a sleep came at or after the wake time its sleep recorded."""
    return bool(
        await scalar(
            store,
            "SELECT bool_and(c.at >= s.wake_at) FROM jobrelay.job_steps s"
            " JOIN jobrelay.job_journal c ON c.job_id = s.job_id AND c.event = 'claimed'"
            " AND c.at > s.at WHERE s.job_id = :id AND s.kind = 'sleep'",
            id=job_id,
        )
    )


def journal_of(found: list[tuple[str, int]]) -> list[str]:
    """The events that tell an attempt's story (relay and delivery noise left out)."""
    story = {"claimed", "sleeping", "woke", "signalled", "held", "succeeded", "retried"}
    return [event for event, _ in found if event in story]


# --- steps ------------------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", ["durable.steps", "durable.plain_steps"])
async def test_steps_recorded_by_attempt_1_are_not_run_again_by_the_retry_that_succeeds(
    make_settings: MakeSettings, store: Store, job_type: str
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, job_type, {"fail_attempts": 1})
    async with running_system(cfg):
        await wait_state(store, job_id, "succeeded")
    assert step_runs(cfg.results_dir, job_id) == ["first", "second"]
    assert await result_of(store, job_id) == {
        "first": "first by attempt 1",
        "second": "second by attempt 1",
    }
    assert await recorded_steps(store, job_id) == {
        "first": ("step", "done", 1),
        "second": ("step", "done", 1),
    }
    assert (await job_row(store, job_id)).attempts == 2


async def test_a_step_name_used_twice_in_one_attempt_quarantines_the_job_with_duplicate_step(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "durable.duplicate", {})
    async with running_system(cfg):
        await wait_state(store, job_id, "quarantined")
    row = await job_row(store, job_id)
    assert (row.last_error_code, row.attempts) == ("duplicate_step", 1)
    assert step_runs(cfg.results_dir, job_id) == ["same"]


# --- sleeps -----------------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", ["durable.sleeps", "durable.plain_sleeps"])
async def test_a_sleeping_job_holds_no_lease_and_finishes_after_its_wake_time(
    make_settings: MakeSettings, store: Store, job_type: str
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, job_type, {"sleep_seconds": 2.0}, max_attempts=1)
    async with running_system(cfg):
        await wait_state(store, job_id, "sleeping")
        asleep = await job_row(store, job_id)
        assert asleep.wake_at is not None and asleep.waiting_on is None
        assert (asleep.lease_token, asleep.lease_until) == (None, None)
        assert (asleep.attempts, asleep.max_attempts) == (1, 2)  # the attempt given back
        await wait_state(store, job_id, "succeeded")
    assert await claimed_at_or_after_its_wake(store, job_id)
    assert step_runs(cfg.results_dir, job_id) == ["before", "after"]
    result = await result_of(store, job_id)
    assert (result["before"], result["after"]) == ("before by attempt 1", "after by attempt 2")
    story = journal_of(await events(store, job_id))
    assert story == ["claimed", "sleeping", "claimed", "succeeded"]
    done = await job_row(store, job_id)
    assert (done.wake_at, done.waiting_on, done.attempts) == (None, None, 2)


async def test_a_sleeper_holds_no_concurrency_slot_another_job_of_its_type_runs_meanwhile(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    sleeper = await submit(store, client_id, "durable.limited", {"wait_for_signal": True})
    async with running_system(cfg):
        await wait_state(store, sleeper, "sleeping")
        other = await submit(store, client_id, "durable.limited", {})
        await wait_state(store, other, "succeeded")  # its one slot was free
        assert (await job_row(store, sleeper)).state == "sleeping"
        assert await signal(store, sleeper, "approved", '"go"') == "sent"
        await wait_state(store, sleeper, "succeeded")


async def test_a_sleeper_due_in_a_paused_queue_wakes_into_the_pause_and_runs_after_resume(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "durable.sleeps", {"sleep_seconds": 0.5})
    async with running_system(cfg):
        await wait_state(store, job_id, "sleeping")
        flows = FlowStore(store)
        assert await flows.pause_queue("default", by="test")

    async def due() -> bool:
        return bool(
            await scalar(
                store, "SELECT wake_at <= now() FROM jobrelay.jobs WHERE id = :id", id=job_id
            )
        )

    await eventually(due, within=20, what="the sleeper's wake time")
    # Its message reaches a consumer while the queue is paused: not claimed, woken into the
    # pause (queued) and held there.
    verdict = await worker(store, cfg, registry).handle(StandInDelivery(job_id, "durable.sleeps"))
    assert verdict.outcome == "held"
    held = await job_row(store, job_id)
    assert (held.state, held.wake_at, held.waiting_on) == ("queued", None, None)
    assert journal_of(await events(store, job_id))[-2:] == ["woke", "held"]
    assert step_runs(cfg.results_dir, job_id) == ["before"]

    assert await flows.resume_queue("default")
    async with running_system(cfg):
        await wait_state(store, job_id, "succeeded")
    assert step_runs(cfg.results_dir, job_id) == ["before", "after"]


async def test_a_workflow_job_records_a_step_and_sleeps_and_its_dependent_runs_after_it(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    steps = tuple(
        workflow_step(
            registry,
            ref=ref,
            type="durable.sleeps",
            payload={"sleep_seconds": 0.5},
            after=after,
            default_max_attempts=3,
        )
        for ref, after in {"a": (), "b": ("a",)}.items()
    )
    accepted = await WorkflowStore(store).accept(
        client_id, WorkflowSubmission(uuid.uuid4().hex, OnFailure.CANCEL_DEPENDENTS, steps)
    )
    found = await rows(
        store,
        "SELECT workflow_ref, id FROM jobrelay.jobs WHERE workflow_id = :w",
        w=accepted.workflow_id,
    )
    ids = dict(found)
    async with running_system(cfg):
        await wait_state(store, ids["b"], "succeeded")
    assert (await job_row(store, ids["a"])).state == "succeeded"
    for ref in ("a", "b"):
        assert step_runs(cfg.results_dir, ids[ref]) == ["before", "after"]
        assert "sleeping" in journal_of(await events(store, ids[ref]))
    assert (await result_of(store, ids["b"]))["parents"] == ["a"]
    # a's sleep released nothing: b was claimed once a had succeeded.
    a_done = await scalar(
        store,
        "SELECT at FROM jobrelay.job_journal WHERE job_id = :id AND event = 'succeeded'",
        id=ids["a"],
    )
    b_first = await scalar(
        store,
        "SELECT min(at) FROM jobrelay.job_journal WHERE job_id = :id AND event = 'claimed'",
        id=ids["b"],
    )
    assert b_first >= a_done


# --- signals ----------------------------------------------------------------------------------


async def test_a_signal_sent_before_the_wait_is_returned_at_once_without_a_sleep(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "durable.waits", {"signal": "approved"})
    assert await signal(store, job_id, "approved", '{"by": "ops"}') == "sent"
    assert await signal(store, job_id, "approved", '"second"') == "sent"  # kept, not returned
    async with running_system(cfg):
        await wait_state(store, job_id, "succeeded")
    assert await result_of(store, job_id) == {"value": {"by": "ops"}}
    assert "sleeping" not in journal_of(await events(store, job_id))
    taken = await rows(
        store,
        "SELECT value, taken_by FROM jobrelay.job_signals WHERE job_id = :id ORDER BY id",
        id=job_id,
    )
    assert [(row.value, row.taken_by) for row in taken] == [
        ({"by": "ops"}, "signal:approved"),
        ("second", None),
    ]


@pytest.mark.parametrize("job_type", ["durable.waits", "durable.plain_waits"])
async def test_a_signal_sent_during_the_wait_wakes_the_job_and_is_returned(
    make_settings: MakeSettings, store: Store, job_type: str
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, job_type, {"signal": "approved"})
    async with running_system(cfg):
        await wait_state(store, job_id, "sleeping")
        asleep = await job_row(store, job_id)
        assert (asleep.waiting_on, asleep.wake_at) == ({"signal": "approved"}, None)
        assert await signal(store, job_id, "approved", "[1, 2]") == "sent"
        await wait_state(store, job_id, "succeeded")
    assert await result_of(store, job_id) == {"value": [1, 2]}
    story = journal_of(await events(store, job_id))
    assert story == ["claimed", "sleeping", "signalled", "woke", "claimed", "succeeded"]
    assert await recorded_steps(store, job_id) == {"signal:approved": ("signal", "done", 2)}
    assert await signal(store, job_id, "approved", "3") == "finished"


async def test_a_job_whose_cancel_was_asked_while_it_ran_is_cancelled_not_put_to_sleep(
    make_settings: MakeSettings, store: Store
) -> None:
    # Its wait has no deadline: asleep with its cancel pending, nothing would ever end it.
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "durable.cancelled_before_its_wait", {})

    async def entered() -> bool:
        return step_runs(cfg.results_dir, job_id) == ["entered"]

    async with running_system(cfg):
        await eventually(entered, what="the handler running")
        answer = await store.cancel_job(job_id, client_id=client_id, detail="by its test")
        assert answer is not None
        gate = gate_file(cfg.results_dir, job_id)
        gate.parent.mkdir(parents=True, exist_ok=True)
        gate.touch()
        await wait_state(store, job_id, "cancelled")
    assert "sleeping" not in [event for event, _ in await events(store, job_id)]
    assert (await job_row(store, job_id)).waiting_on is None


async def test_signals_sent_while_their_jobs_wait_or_fall_asleep_each_reach_their_wait_once(
    make_settings: MakeSettings, store: Store
) -> None:
    """Signals sent at every point of their waits' lives (before the claim, during the wait's
    transaction, after the sleep): each job is woken or finds its signal, none is lost or
    taken twice."""
    cfg = make_settings()
    client_id = await new_client(store)
    jobs = [await submit(store, client_id, "durable.waits", {}) for _ in range(24)]
    spread = random.Random(11)

    async def send(n: int, job_id: uuid.UUID) -> None:
        await asyncio.sleep(spread.uniform(0, 1.5))  # scatters the sends, no timing asserted
        assert await signal(store, job_id, "approved", str(n)) == "sent"

    async with running_system(cfg, concurrency=8):
        await asyncio.gather(*(send(n, job_id) for n, job_id in enumerate(jobs)))
        for job_id in jobs:
            await wait_state(store, job_id, "succeeded", timeout=60)
    for n, job_id in enumerate(jobs):
        assert await result_of(store, job_id) == {"value": n}
    taken = await rows(
        store,
        "SELECT taken_by, count(*) AS n FROM jobrelay.job_signals WHERE job_id = ANY(:ids)"
        " GROUP BY taken_by",
        ids=jobs,
    )
    assert [(row.taken_by, row.n) for row in taken] == [("signal:approved", len(jobs))]


async def test_a_wait_past_its_timeout_raises_signal_timeout_in_the_handler(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    caught = await submit(
        store, client_id, "durable.waits", {"timeout": 0.5, "catch_timeout": True}
    )
    uncaught = await submit(store, client_id, "durable.waits", {"timeout": 0.5})
    async with running_system(cfg):
        await wait_state(store, caught, "succeeded")
        await wait_state(store, uncaught, "quarantined")
    assert await result_of(store, caught) == {"timed_out": True}
    assert (await recorded_steps(store, caught))["signal:approved"][:2] == ("signal", "timed_out")
    failed = await job_row(store, uncaught)
    assert "signal_timeout" in f"{failed.last_error_code} {failed.last_error}"


# --- children ---------------------------------------------------------------------------------


@pytest.mark.parametrize("job_type", ["durable.parent", "durable.plain_parent"])
async def test_run_child_returns_the_child_s_result_once_the_child_s_end_wakes_the_parent(
    make_settings: MakeSettings, store: Store, job_type: str
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    parent = await submit(store, client_id, job_type, {})
    async with running_system(cfg):
        await wait_state(store, parent, "succeeded")
    assert await result_of(store, parent) == {"child": {"answer": 42}}
    children = await rows(
        store, "SELECT id, state FROM jobrelay.jobs WHERE parent_job_id = :id", id=parent
    )
    assert [row.state for row in children] == ["succeeded"]  # one child, however many attempts
    assert journal_of(await events(store, parent))[:2] == ["claimed", "sleeping"]


async def test_a_failed_child_raises_child_failed_with_its_id_state_and_error_code(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    parent = await submit(store, client_id, "durable.parent", {"child_fails": True})
    async with running_system(cfg):
        await wait_state(store, parent, "succeeded")
    child = await scalar(store, "SELECT id FROM jobrelay.jobs WHERE parent_job_id = :id", id=parent)
    assert await result_of(store, parent) == {
        "failed": {"child_id": str(child), "state": "quarantined", "error_code": "child_cannot"}
    }


async def test_start_child_returns_the_child_s_id_without_waiting(
    make_settings: MakeSettings, store: Store
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    parent = await submit(store, client_id, "durable.starter", {})
    async with running_system(cfg):
        await wait_state(store, parent, "succeeded")
        child = uuid.UUID((await result_of(store, parent))["child_id"])
        await wait_state(store, child, "succeeded")
    assert (await job_row(store, child)).parent_job_id == parent
    assert "sleeping" not in journal_of(await events(store, parent))


# --- crashes ----------------------------------------------------------------------------------


def consumer_process(cfg: Settings, log: Path) -> Service:
    return Service(["consumer", "--handlers", HANDLERS], service_env(cfg), log)


async def test_a_consumer_killed_inside_a_step_the_next_consumer_does_not_run_the_steps_before(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "durable.blocks", {"block_first_attempt": True})
    async with running_dispatcher(cfg):
        first = consumer_process(cfg, tmp_path / "first.log")
        try:

            async def inside_step_two() -> bool:
                assert first.alive(), first.output()[-3000:]
                return step_runs(cfg.results_dir, job_id) == ["one", "two"]

            await eventually(inside_step_two, within=30, what="attempt 1 inside step two")
        finally:
            first.kill()
        assert await recorded_steps(store, job_id) == {"one": ("step", "done", 1)}
        second = consumer_process(cfg, tmp_path / "second.log")
        try:
            await wait_state(store, job_id, "succeeded", timeout=40)
        finally:
            assert second.terminate() == 0
    # Step one, recorded before the kill, never ran again; step two was not recorded: it ran again.
    assert step_runs(cfg.results_dir, job_id) == ["one", "two", "two"]
    result = await result_of(store, job_id)
    assert result["one"] == "one by attempt 1"
    assert result["two"] != "two by attempt 1"


async def test_a_consumer_killed_while_its_job_sleeps_the_job_wakes_on_another_consumer(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    cfg = make_settings()
    client_id = await new_client(store)
    job_id = await submit(store, client_id, "durable.sleeps", {"sleep_seconds": 2.0})
    async with running_dispatcher(cfg):
        first = consumer_process(cfg, tmp_path / "first.log")
        try:
            await wait_state(store, job_id, "sleeping", timeout=30)
        finally:
            first.kill()
        assert (await job_row(store, job_id)).state == "sleeping"
        second = consumer_process(cfg, tmp_path / "second.log")
        try:
            await wait_state(store, job_id, "succeeded", timeout=40)
        finally:
            assert second.terminate() == 0
    assert step_runs(cfg.results_dir, job_id) == ["before", "after"]
    assert await claimed_at_or_after_its_wake(store, job_id)
    assert journal_of(await events(store, job_id)) == [
        "claimed",
        "sleeping",
        "claimed",
        "succeeded",
    ]
