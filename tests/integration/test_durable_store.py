"""db/durable_store.py's PgDurableStore on a real migrated database (docs/durable-execution.md):
what each durable call writes under the attempt's lease, what the next claim brings back, and
the races between a wait and a signal (or a child's end) that the job's row lock settles."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from jobrelay.core.durable import (
    LEASE_GONE,
    Asleep,
    ChildEnded,
    ChildRequest,
    ChildStarted,
    Fence,
    SignalTaken,
    StepKind,
    StepStatus,
    TimedOut,
)
from jobrelay.core.errors import PermanentError
from jobrelay.core.execution import Claimed, Held, HoldReason, LeaseTerms, Refused
from jobrelay.core.jobs import Quarantine, Succeeded
from jobrelay.core.states import JobEvent, JobState
from jobrelay.db import queries as q
from jobrelay.db.durable_store import PgDurableStore
from jobrelay.db.execution_store import PgExecutionStore
from jobrelay.db.flow_store import FlowStore
from jobrelay.db.store import Store
from tests.support import factories

LEASE = 30.0
HOUR = 3600.0


@pytest.fixture
async def durable(store: Store) -> AsyncIterator[PgDurableStore]:
    found = PgDurableStore(store)
    yield found
    await found.close()


@pytest.fixture
async def executions(store: Store) -> AsyncIterator[PgExecutionStore]:
    found = PgExecutionStore(store)
    yield found
    await found.close()


async def rows(store: Store, sql: str, **params: Any) -> list[Any]:
    return await store.fetch_all(text(sql), **params)


async def new_job(store: Store, job_type: str = "demo.parent") -> uuid.UUID:
    made = await factories.job(store, job_type=job_type, with_outbox=True)
    return uuid.UUID(str(made.id))


async def claim(executions: PgExecutionStore, job_id: uuid.UUID) -> tuple[Claimed, Fence]:
    terms = LeaseTerms.fresh(LEASE)
    answer = await executions.claim(job_id, terms)
    assert isinstance(answer, Claimed), answer
    return answer, Fence(job_id, terms.token, answer.job.attempts)


async def running(store: Store, executions: PgExecutionStore) -> Fence:
    """A job claimed for its first attempt: the fence of that attempt."""
    _, fence = await claim(executions, await new_job(store))
    return fence


async def make_due(store: Store, job_id: uuid.UUID) -> None:
    """The sleeper's time has come: its wake time (and its recorded one) set in the past, as
    the clock would have them an hour on."""
    await rows(
        store,
        "UPDATE jobrelay.jobs SET wake_at = now() - interval '1 second',"
        " available_at = now() - interval '1 second' WHERE id = :id RETURNING id",
        id=job_id,
    )
    await rows(
        store,
        "UPDATE jobrelay.job_steps SET wake_at = now() - interval '1 second'"
        " WHERE job_id = :id AND wake_at IS NOT NULL RETURNING job_id",
        id=job_id,
    )


async def job_row(store: Store, job_id: uuid.UUID) -> Any:
    [row] = await rows(store, "SELECT * FROM jobrelay.jobs WHERE id = :id", id=job_id)
    return row


async def events(store: Store, job_id: uuid.UUID) -> list[str]:
    return [entry.event for entry in await store.job_events(job_id)]


async def signal(store: Store, job_id: uuid.UUID, name: str, value: str) -> str:
    [row] = await rows(
        store,
        "SELECT jobrelay.jobrelay_signal(:id, :name, CAST(:value AS jsonb)) AS answer",
        id=job_id,
        name=name,
        value=value,
    )
    return str(row.answer)


# --- steps --------------------------------------------------------------------------------


async def test_a_step_is_recorded_once_and_comes_back_with_the_next_claim(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    first = await durable.record_step(fence, "charge", {"paid": 12})
    assert first is not LEASE_GONE and first.value == {"paid": 12}
    # Its answer lost, the same call again: the attempt's own row, not a second one.
    again = await durable.record_step(fence, "charge", {"paid": 99})
    assert again is not LEASE_GONE and again.value == {"paid": 12}
    assert again.attempt == fence.attempt
    await rows(
        store,
        "UPDATE jobrelay.jobs SET lease_until = now() - interval '1 second' WHERE id = :id"
        " RETURNING id",
        id=fence.job_id,
    )
    claimed, _ = await claim(executions, fence.job_id)
    assert claimed.reclaimed
    assert claimed.job.steps is not None
    [step] = claimed.job.steps
    assert (step.name, step.kind, step.status, step.value) == (
        "charge",
        StepKind.STEP,
        StepStatus.DONE,
        {"paid": 12},
    )
    assert step.attempt == fence.attempt


async def test_a_claim_asked_again_after_a_lost_answer_brings_the_steps_too(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    assert await durable.record_step(fence, "charge", 5) is not LEASE_GONE
    await rows(
        store,
        "UPDATE jobrelay.jobs SET lease_until = now() - interval '1 second' WHERE id = :id"
        " RETURNING id",
        id=fence.job_id,
    )
    terms = LeaseTerms.fresh(LEASE)
    assert isinstance(await executions.claim(fence.job_id, terms), Claimed)
    again = await executions.claim(fence.job_id, terms)  # the same token: its own claim
    assert isinstance(again, Claimed) and again.job.steps is not None
    assert [(step.name, step.value) for step in again.job.steps] == [("charge", 5)]


async def test_a_plain_job_is_claimed_with_no_steps(
    store: Store, executions: PgExecutionStore
) -> None:
    claimed, _ = await claim(executions, await new_job(store))
    assert claimed.job.steps is None
    assert claimed.job.wake_at is None and claimed.job.waiting_for is None


async def test_a_step_under_a_stale_token_writes_nothing(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    stale = Fence(fence.job_id, uuid.uuid4(), fence.attempt)
    assert await durable.record_step(stale, "charge", 1) is LEASE_GONE
    assert await durable.sleep(stale, "sleep", seconds=1.0, until=None) is LEASE_GONE
    assert await durable.wait_for_signal(stale, "signal:go", "go", None) is LEASE_GONE
    request = ChildRequest("demo.child", {}, f"{fence.job_id}:child")
    assert await durable.child(stale, "child:demo.child", request, wait=True) is LEASE_GONE
    assert await rows(store, "SELECT 1 FROM jobrelay.job_steps") == []
    assert (await job_row(store, fence.job_id)).state == JobState.RUNNING


async def test_the_steps_of_many_jobs_in_flight_share_one_statement(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fences = [await running(store, executions) for _ in range(5)]
    groups_before = durable._steps.groups
    answers = await asyncio.gather(
        *(durable.record_step(fence, "step", index) for index, fence in enumerate(fences))
    )
    assert [a.value for a in answers if a is not LEASE_GONE] == [0, 1, 2, 3, 4]
    assert durable._steps.groups - groups_before < len(fences)


# --- sleeps -------------------------------------------------------------------------------


async def test_a_sleep_leaves_the_job_sleeping_without_a_lease_until_its_time(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    before = await job_row(store, fence.job_id)
    answer = await durable.sleep(fence, "sleep", seconds=HOUR, until=None)
    assert isinstance(answer, Asleep) and answer.wake_at is not None
    job = await job_row(store, fence.job_id)
    assert job.state == JobState.SLEEPING
    assert job.lease_token is None and job.lease_until is None
    assert job.wake_at == answer.wake_at == job.available_at
    assert job.max_attempts == before.max_attempts + 1  # the sleep used no attempt
    outbox = await rows(
        store,
        "SELECT available_at FROM jobrelay.outbox WHERE job_id = :id ORDER BY id",
        id=fence.job_id,
    )
    assert outbox[-1].available_at == answer.wake_at
    assert (await events(store, fence.job_id))[-1] == JobEvent.SLEEPING
    # Not due: a delivery before its time claims nothing.
    assert isinstance(await executions.claim(fence.job_id, LeaseTerms.fresh(LEASE)), Refused)
    await make_due(store, fence.job_id)
    claimed, _ = await claim(executions, fence.job_id)
    assert claimed.job.wake_at is None and claimed.job.waiting_for is None
    assert claimed.job.attempts == fence.attempt + 1
    assert claimed.job.steps is not None
    [step] = claimed.job.steps
    assert step.kind is StepKind.SLEEP and step.wake_at is not None


async def test_a_short_sleep_is_claimable_once_its_time_has_come(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    answer = await durable.sleep(fence, "sleep", seconds=0.5, until=None)
    assert isinstance(answer, Asleep) and answer.wake_at is not None
    for _ in range(100):  # the event: its wake time has come by the database's clock
        claimed = await executions.claim(fence.job_id, LeaseTerms.fresh(LEASE))
        if isinstance(claimed, Claimed):
            break
        await asyncio.sleep(0.05)
    assert isinstance(claimed, Claimed)
    [now] = await rows(store, "SELECT now() AS at")
    assert now.at >= answer.wake_at
    assert (await job_row(store, fence.job_id)).state == JobState.RUNNING


async def test_a_recorded_sleep_keeps_its_wake_time(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    first = await durable.sleep(fence, "sleep", seconds=HOUR, until=None)
    assert isinstance(first, Asleep)
    await rows(
        store,
        "UPDATE jobrelay.jobs SET available_at = now() WHERE id = :id RETURNING id",
        id=fence.job_id,
    )
    _, second_fence = await claim(executions, fence.job_id)  # woken early (a replay, say)
    again = await durable.sleep(second_fence, "sleep", seconds=2 * HOUR, until=None)
    assert isinstance(again, Asleep) and again.wake_at == first.wake_at


# --- signals ------------------------------------------------------------------------------


async def test_a_signal_sent_before_the_wait_is_taken_at_once(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    assert await signal(store, fence.job_id, "go", '{"n": 1}') == "sent"
    assert await signal(store, fence.job_id, "go", '{"n": 2}') == "sent"
    answer = await durable.wait_for_signal(fence, "signal:go", "go", None)
    assert answer == SignalTaken({"n": 1})
    # Asked again (its answer lost): the same value, the second signal not taken.
    assert await durable.wait_for_signal(fence, "signal:go", "go", None) == SignalTaken({"n": 1})
    kept = await rows(
        store,
        "SELECT value, taken_by FROM jobrelay.job_signals WHERE job_id = :id ORDER BY id",
        id=fence.job_id,
    )
    assert [(r.value, r.taken_by) for r in kept] == [({"n": 1}, "signal:go"), ({"n": 2}, None)]
    [step] = await rows(
        store, "SELECT * FROM jobrelay.job_steps WHERE job_id = :id", id=fence.job_id
    )
    assert (step.kind, step.status, step.value) == ("signal", "done", {"n": 1})


async def test_jobrelay_signal_keeps_a_keyed_signal_once_and_none_for_a_finished_job(
    store: Store, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    sql = "SELECT jobrelay.jobrelay_signal(:id, 'go', CAST('1' AS jsonb), :key) AS answer"
    answers = [(await rows(store, sql, id=fence.job_id, key="k1"))[0].answer for _ in range(2)]
    assert answers == ["sent", "repeated"]
    kept = await rows(
        store, "SELECT id FROM jobrelay.job_signals WHERE job_id = :id", id=fence.job_id
    )
    assert len(kept) == 1
    await executions.finish(
        fence.job_id,
        lease_token=fence.lease_token,
        attempt=fence.attempt,
        outcome=Succeeded({}),
    )
    assert await signal(store, fence.job_id, "go", "2") == "finished"
    assert await signal(store, uuid.uuid4(), "go", "2") == "unknown"


async def test_a_wait_sleeps_until_its_signal_wakes_the_job(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    answer = await durable.wait_for_signal(fence, "signal:go", "go", None)
    assert answer == Asleep(None, {"signal": "go"})
    job = await job_row(store, fence.job_id)
    assert (job.state, job.waiting_on, job.wake_at) == ("sleeping", {"signal": "go"}, None)
    assert isinstance(await executions.claim(fence.job_id, LeaseTerms.fresh(LEASE)), Refused)
    assert await signal(store, fence.job_id, "other", "1") == "sent"  # not what it waits for
    assert (await job_row(store, fence.job_id)).state == JobState.SLEEPING
    assert await signal(store, fence.job_id, "go", '"yes"') == "sent"
    assert (await job_row(store, fence.job_id)).state == JobState.QUEUED
    _, second = await claim(executions, fence.job_id)
    assert await durable.wait_for_signal(second, "signal:go", "go", None) == SignalTaken("yes")


async def test_a_wait_that_times_out_is_recorded_so(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    answer = await durable.wait_for_signal(fence, "signal:go", "go", HOUR)
    assert isinstance(answer, Asleep) and answer.wake_at is not None
    job = await job_row(store, fence.job_id)
    assert (job.state, job.wake_at) == ("sleeping", answer.wake_at)
    await make_due(store, fence.job_id)
    claimed, second = await claim(executions, fence.job_id)
    assert claimed.job.steps is not None and claimed.job.steps[0].status is StepStatus.WAITING
    assert await durable.wait_for_signal(second, "signal:go", "go", HOUR) == TimedOut()
    [step] = await rows(
        store, "SELECT * FROM jobrelay.job_steps WHERE job_id = :id", id=fence.job_id
    )
    assert step.status == "timed_out"
    # A signal sent afterwards is kept, never returned to the wait that timed out.
    assert await signal(store, fence.job_id, "go", "1") == "sent"
    assert await durable.wait_for_signal(second, "signal:go", "go", HOUR) == TimedOut()


async def test_a_wait_with_no_time_at_all_times_out_at_once(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    assert await durable.wait_for_signal(fence, "signal:go", "go", 0.0) == TimedOut()
    assert (await job_row(store, fence.job_id)).state == JobState.RUNNING


async def test_a_signal_racing_the_wait_is_taken_or_wakes_the_sleeper(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    outcomes: set[str] = set()
    for _ in range(40):
        fence = await running(store, executions)
        outcome, sent = await asyncio.gather(
            durable.wait_for_signal(fence, "signal:go", "go", None),
            signal(store, fence.job_id, "go", '"v"'),
        )
        assert sent == "sent"
        job = await job_row(store, fence.job_id)
        untaken = await rows(
            store,
            "SELECT id FROM jobrelay.job_signals WHERE job_id = :id AND taken_by IS NULL",
            id=fence.job_id,
        )
        if isinstance(outcome, SignalTaken):
            assert outcome.value == "v" and untaken == [] and job.state == JobState.RUNNING
            outcomes.add("taken")
        else:
            # It slept first: the signal woke it, and waits for its next attempt.
            assert isinstance(outcome, Asleep)
            assert job.state == JobState.QUEUED and len(untaken) == 1
            outcomes.add("woken")
        assert job.state != JobState.SLEEPING
    assert outcomes  # every round ended one of the two ways


async def blocked_on_a_lock(store: Store) -> None:
    """Return once a statement of this database waits for a row lock (the event, not a time)."""
    for _ in range(200):
        found = await rows(
            store,
            "SELECT count(*) AS n FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        if found[0].n:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("no statement came to wait for the row lock")


def sleep_on(fence: Fence, name: str, kind: str, waiting_on: str, child: Any = None) -> Any:
    return {
        "job_id": fence.job_id,
        "lease_token": fence.lease_token,
        "name": name,
        "kind": kind,
        "status": "waiting",
        "seconds": None,
        "until": None,
        "waiting_on": waiting_on,
        "child_id": child,
    }


async def test_a_signal_sent_while_the_wait_holds_the_row_wakes_the_job_it_put_to_sleep(
    store: Store, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    async with store.transaction() as wait:  # the wait's transaction, step by step
        locked = await wait.execute(
            q.LOCK_FOR_WAIT, {"job_id": fence.job_id, "lease_token": fence.lease_token}
        )
        assert locked.first() is not None
        sender = asyncio.create_task(signal(store, fence.job_id, "go", '"v"'))
        await blocked_on_a_lock(store)  # the sender waits for the job's row
        params = sleep_on(fence, "signal:go", "signal", '{"signal": "go"}')
        assert (await wait.execute(q.SLEEP_JOB, params)).first() is not None
    assert await sender == "sent"
    job = await job_row(store, fence.job_id)
    assert (job.state, job.waiting_on) == ("queued", None)
    assert (await events(store, fence.job_id))[-2:] == [JobEvent.SIGNALLED, JobEvent.WOKE]


async def test_a_child_finished_while_its_parent_holds_its_row_wakes_the_parent_it_put_to_sleep(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    started = await durable.child(fence, "child:a", child_request(fence.job_id), wait=False)
    assert isinstance(started, ChildStarted)
    _, child = await claim(executions, started.child_id)
    async with store.transaction() as wait:  # the parent's wait, step by step
        locked = await wait.execute(
            q.LOCK_FOR_WAIT, {"job_id": fence.job_id, "lease_token": fence.lease_token}
        )
        assert locked.first() is not None
        end = (await wait.execute(q.CHILD_END, {"child_id": started.child_id})).first()
        assert end.state == JobState.RUNNING
        finisher = asyncio.create_task(
            executions.finish(
                started.child_id,
                lease_token=child.lease_token,
                attempt=child.attempt,
                outcome=Succeeded({"ok": 1}),
            )
        )
        await blocked_on_a_lock(store)  # the child's finish waits for the parent's row
        waiting_on = f'{{"child": "{started.child_id}"}}'
        params = sleep_on(fence, "child:b", "child", waiting_on, started.child_id)
        assert (await wait.execute(q.SLEEP_JOB, params)).first() is not None
    await finisher
    parent = await job_row(store, fence.job_id)
    assert (parent.state, parent.waiting_on) == ("queued", None)  # re-read, and woken
    assert (await events(store, fence.job_id))[-1] == JobEvent.WOKE


# --- children -----------------------------------------------------------------------------


def child_request(
    parent: uuid.UUID, name: str = "child:demo.child", **options: Any
) -> ChildRequest:
    return ChildRequest("demo.child", {"n": 1}, f"{parent}:{name}", options)


async def test_a_child_submitted_twice_under_one_key_is_one_job(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    request = child_request(fence.job_id)
    started = await durable.child(fence, "child:a", request, wait=False)
    assert isinstance(started, ChildStarted)
    outcome = await durable.child(fence, "child:b", request, wait=True)
    assert outcome == Asleep(None, {"child": str(started.child_id)})
    children = await rows(
        store,
        "SELECT id, parent_job_id, state FROM jobrelay.jobs WHERE idempotency_key = :key",
        key=request.key,
    )
    assert [(c.id, c.parent_job_id, c.state) for c in children] == [
        (started.child_id, fence.job_id, "queued")
    ]
    outbox = await rows(
        store, "SELECT id FROM jobrelay.outbox WHERE job_id = :id", id=started.child_id
    )
    assert len(outbox) == 1  # accepted like any job: relayed once


async def test_a_child_with_an_unknown_option_is_refused(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    with pytest.raises(PermanentError) as raised:
        await durable.child(fence, "child:x", child_request(fence.job_id, colour="red"), wait=False)
    assert raised.value.code == "invalid_child"
    assert await rows(store, "SELECT 1 FROM jobrelay.job_steps") == []


async def sleeping_on_a_child(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> tuple[Fence, uuid.UUID]:
    fence = await running(store, executions)
    answer = await durable.child(fence, "child:demo.child", child_request(fence.job_id), wait=True)
    assert isinstance(answer, Asleep) and answer.waiting_for is not None
    return fence, uuid.UUID(answer.waiting_for["child"])


async def test_the_success_of_a_child_wakes_its_parent_with_its_result(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence, child_id = await sleeping_on_a_child(store, durable, executions)
    assert (await job_row(store, fence.job_id)).state == JobState.SLEEPING
    _, child = await claim(executions, child_id)
    await executions.finish(
        child_id,
        lease_token=child.lease_token,
        attempt=child.attempt,
        outcome=Succeeded({"total": 3}),
    )
    parent = await job_row(store, fence.job_id)
    assert (parent.state, parent.waiting_on, parent.wake_at) == ("queued", None, None)
    outbox = await rows(
        store,
        "SELECT available_at FROM jobrelay.outbox WHERE job_id = :id AND published_at IS NULL",
        id=fence.job_id,
    )
    assert len(outbox) == 2  # its first delivery's, never published here, and the wake's
    assert (await events(store, fence.job_id))[-1] == JobEvent.WOKE
    _, second = await claim(executions, fence.job_id)
    ended = await durable.child(second, "child:demo.child", child_request(fence.job_id), wait=True)
    assert ended == ChildEnded(child_id, "succeeded", {"total": 3})
    [step] = await rows(
        store, "SELECT * FROM jobrelay.job_steps WHERE job_id = :id", id=fence.job_id
    )
    assert (step.status, step.value, step.child_id) == ("done", {"total": 3}, child_id)


async def test_a_quarantined_child_ends_the_wait_without_a_record_of_its_failure(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence, child_id = await sleeping_on_a_child(store, durable, executions)
    _, child = await claim(executions, child_id)
    await executions.finish(
        child_id,
        lease_token=child.lease_token,
        attempt=child.attempt,
        outcome=Quarantine("bad_input", "no such order"),
    )
    assert (await job_row(store, fence.job_id)).state == JobState.QUEUED
    _, second = await claim(executions, fence.job_id)
    ended = await durable.child(second, "child:demo.child", child_request(fence.job_id), wait=True)
    assert ended == ChildEnded(child_id, "quarantined", error_code="bad_input")
    [step] = await rows(
        store, "SELECT * FROM jobrelay.job_steps WHERE job_id = :id", id=fence.job_id
    )
    assert step.status == "waiting"  # read again at every attempt: a replayed child may succeed


async def test_a_child_ending_as_its_parent_goes_to_sleep_on_it_is_never_missed(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    for _ in range(25):
        fence = await running(store, executions)
        started = await durable.child(
            fence, "child:start", child_request(fence.job_id, "child:start"), wait=False
        )
        assert isinstance(started, ChildStarted)
        _, child = await claim(executions, started.child_id)
        outcome, _ = await asyncio.gather(
            durable.child(
                fence, "child:wait", child_request(fence.job_id, "child:start"), wait=True
            ),
            executions.finish(
                started.child_id,
                lease_token=child.lease_token,
                attempt=child.attempt,
                outcome=Succeeded({"ok": True}),
            ),
        )
        parent = await job_row(store, fence.job_id)
        if isinstance(outcome, ChildEnded):
            assert outcome.result == {"ok": True} and parent.state == JobState.RUNNING
        else:
            assert isinstance(outcome, Asleep) and parent.state == JobState.QUEUED
        assert parent.state != JobState.SLEEPING


# --- what other statements do to a sleeper ------------------------------------------------


async def test_cancelling_a_sleeping_parent_cancels_its_unfinished_children(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    started = await durable.child(
        fence, "child:a", child_request(fence.job_id, "child:a"), wait=False
    )
    assert isinstance(started, ChildStarted)
    _, child_fence = await claim(executions, started.child_id)  # this one runs
    answer = await durable.child(
        fence, "child:b", child_request(fence.job_id, "child:b"), wait=True
    )
    assert isinstance(answer, Asleep) and answer.waiting_for is not None
    queued_child = uuid.UUID(answer.waiting_for["child"])
    assert await store.cancel_job(fence.job_id, client_id=None, detail="operator") is not None
    parent = await job_row(store, fence.job_id)
    assert (parent.state, parent.wake_at, parent.waiting_on) == ("cancelled", None, None)
    assert (await job_row(store, queued_child)).state == JobState.CANCELLED
    running_child = await job_row(store, started.child_id)
    assert running_child.state == JobState.RUNNING
    assert running_child.cancel_requested_at is not None  # its worker stops it
    assert child_fence.lease_token == running_child.lease_token


async def test_a_due_sleeper_of_a_paused_queue_is_woken_into_the_pause(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    assert isinstance(await durable.sleep(fence, "sleep", seconds=0.0, until=None), Asleep)
    assert await FlowStore(store).pause_queue("default", by="test")
    held = await executions.claim(fence.job_id, LeaseTerms.fresh(LEASE))
    assert isinstance(held, Held) and held.reason is HoldReason.PAUSED
    job = await job_row(store, fence.job_id)
    assert (job.state, job.wake_at, job.waiting_on) == ("queued", None, None)
    assert (await events(store, fence.job_id))[-2:] == [JobEvent.WOKE, JobEvent.HELD]


async def test_a_due_sleeper_whose_message_was_lost_is_stranded_and_redispatched(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    assert isinstance(await durable.sleep(fence, "sleep", seconds=HOUR, until=None), Asleep)
    # An hour on: its wake message was published long ago, and no consumer ever claimed it.
    await rows(
        store,
        "UPDATE jobrelay.jobs SET wake_at = now() - interval '1 hour',"
        " available_at = now() - interval '1 hour' WHERE id = :id RETURNING id",
        id=fence.job_id,
    )
    await rows(
        store,
        "UPDATE jobrelay.outbox SET published_at = now() - interval '1 hour' WHERE job_id = :id"
        " RETURNING id",
        id=fence.job_id,
    )
    redispatched = await store.fetch_all(
        q.REDISPATCH_STRANDED, older_than_seconds=60, limit=10, detail="lost"
    )
    assert [row.job_id for row in redispatched] == [fence.job_id]
    # A sleeper that waits for its signal with no deadline is never stranded: due nowhere near.
    waiting = await running(store, executions)
    assert isinstance(await durable.wait_for_signal(waiting, "signal:go", "go", None), Asleep)
    await rows(
        store,
        "UPDATE jobrelay.outbox SET published_at = now() - interval '1 hour' WHERE job_id = :id"
        " RETURNING id",
        id=waiting.job_id,
    )
    again = await store.fetch_all(
        q.REDISPATCH_STRANDED, older_than_seconds=60, limit=10, detail="lost"
    )
    assert waiting.job_id not in [row.job_id for row in again]


async def test_deleting_a_job_deletes_its_steps_and_signals(
    store: Store, durable: PgDurableStore, executions: PgExecutionStore
) -> None:
    fence = await running(store, executions)
    assert await durable.record_step(fence, "charge", 1) is not LEASE_GONE
    assert await signal(store, fence.job_id, "go", "1") == "sent"
    await executions.finish(
        fence.job_id,
        lease_token=fence.lease_token,
        attempt=fence.attempt,
        outcome=Succeeded({}),
    )
    await rows(
        store,
        "UPDATE jobrelay.jobs SET finished_at = now() - interval '1 day' WHERE id = :id"
        " RETURNING id",
        id=fence.job_id,
    )
    await store.fetch_all(q.DELETE_FINISHED_JOBS, state="succeeded", retention_seconds=60, limit=10)
    assert await rows(store, "SELECT 1 FROM jobrelay.jobs WHERE id = :id", id=fence.job_id) == []
    assert await rows(store, "SELECT 1 FROM jobrelay.job_steps") == []
    assert await rows(store, "SELECT 1 FROM jobrelay.job_signals") == []
