"""The pure part of workflows (core/workflows.py) and the progress reporter on the in-memory
store (consumer/progress.py)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest

from jobrelay.consumer.handler_call import job_context
from jobrelay.consumer.progress import ProgressReporter
from jobrelay.core.execution import Claimed, LeaseTerms
from jobrelay.core.jobs import JobRequest
from jobrelay.core.states import JobState
from jobrelay.core.workflows import (
    InvalidWorkflow,
    OnFailure,
    Workflow,
    WorkflowState,
    WorkflowStep,
    check_workflow,
    workflow_fingerprint,
    workflow_state,
)
from tests.support.consumer_fakes import InMemoryExecutionStore


def test_the_order_puts_every_job_after_the_jobs_it_waits_for() -> None:
    order = check_workflow([("d", ["b", "c"]), ("b", ["a"]), ("c", ["a"]), ("a", [])])
    assert order.index("a") < order.index("b") < order.index("d")
    assert order.index("c") < order.index("d")


@pytest.mark.parametrize(
    ("graph", "named"),
    [
        ([], "1 to 1000 jobs, not 0"),
        ([("a", []), ("a", [])], "ref 'a' names two jobs"),
        ([("", [])], "ref '' is not"),
        ([("a", ["nope"])], "waits for 'nope'"),
        ([("a", ["a"])], "waits for itself"),
        ([("a", []), ("b", ["a", "a"])], "names 'a' twice"),
        ([("x", []), ("a", ["c"]), ("b", ["a"]), ("c", ["b"])], "the jobs a -> b -> c -> a"),
        ([("a", ["b"]), ("b", ["a"]), ("c", ["a"])], "the jobs a -> b -> a"),
    ],
)
def test_a_graph_that_cannot_run_names_its_problem(
    graph: list[tuple[str, list[str]]], named: str
) -> None:
    with pytest.raises(InvalidWorkflow, match=named.replace("(", r"\(")):
        check_workflow(graph)


def test_a_long_chain_is_ordered_without_recursion() -> None:
    chain = [("j0", [])] + [(f"j{n}", [f"j{n - 1}"]) for n in range(1, 1000)]
    assert check_workflow(chain) == [f"j{n}" for n in range(1000)]


@pytest.mark.parametrize(
    ("states", "cancelled", "expected"),
    [
        ({JobState.SUCCEEDED}, False, WorkflowState.SUCCEEDED),
        ({JobState.SUCCEEDED, JobState.WAITING, JobState.RUNNING}, False, WorkflowState.RUNNING),
        ({JobState.QUARANTINED, JobState.RETRYING}, False, WorkflowState.RUNNING),
        ({JobState.QUARANTINED, JobState.WAITING}, False, WorkflowState.FAILED),
        ({JobState.SUCCEEDED, JobState.CANCELLED}, False, WorkflowState.FAILED),
        ({JobState.QUEUED}, True, WorkflowState.CANCELLED),
        ({JobState.SUCCEEDED}, True, WorkflowState.SUCCEEDED),  # cancelled after it ended
    ],
)
def test_a_workflows_state_follows_from_its_jobs(
    states: set[JobState], cancelled: bool, expected: WorkflowState
) -> None:
    assert workflow_state(states, cancelled=cancelled) is expected


def _step(ref: str, payload: dict[str, int], *after: str) -> WorkflowStep:
    return WorkflowStep(ref, JobRequest(ref, "t", payload, 3), tuple(after))


def test_the_fingerprint_sees_the_jobs_not_their_order() -> None:
    one = [_step("a", {"x": 1}), _step("b", {"y": 2}, "a")]
    assert workflow_fingerprint(OnFailure.CONTINUE, one) == workflow_fingerprint(
        OnFailure.CONTINUE, list(reversed(one))
    )
    other = [_step("a", {"x": 2}), _step("b", {"y": 2}, "a")]
    assert workflow_fingerprint(OnFailure.CONTINUE, one) != workflow_fingerprint(
        OnFailure.CONTINUE, other
    )
    assert workflow_fingerprint(OnFailure.CONTINUE, one) != workflow_fingerprint(
        OnFailure.CANCEL_DEPENDENTS, one
    )


def test_the_builder_names_refs_and_refuses_what_could_not_run() -> None:
    flow = Workflow()
    first = flow.add("export", {"table": "users"})
    named = flow.add("zip", {}, ref="zip", after=[first], priority=5)
    assert (first, named) == ("j1", "zip")
    assert flow.body("continue") == {
        "jobs": [
            {"ref": "j1", "type": "export", "payload": {"table": "users"}},
            {"ref": "zip", "type": "zip", "payload": {}, "after": ["j1"], "priority": 5},
        ],
        "on_failure": "continue",
    }
    with pytest.raises(ValueError, match="not a job added before"):
        flow.add("mail", {}, after=["later"])
    with pytest.raises(ValueError, match="names a job of this workflow already"):
        flow.add("mail", {}, ref="zip")


async def test_progress_reported_often_is_written_a_few_times_from_any_thread() -> None:
    store = InMemoryExecutionStore()
    job_id = store.add("t", {}).id
    claimed = await store.claim(job_id, LeaseTerms.fresh(30))
    assert isinstance(claimed, Claimed)
    reporter = ProgressReporter(store, interval=0.05)
    context = job_context(claimed.job, Path("."), progress_sink=reporter.sink_for(claimed))

    def from_a_thread() -> None:
        for step in range(5000):
            context.progress(step / 5000, "working")

    await asyncio.to_thread(from_a_thread)
    await asyncio.sleep(0.2)
    context.progress(1.0, "done")
    await reporter.flush_job(job_id)
    written = store.progress[job_id]
    assert 1 <= len(written) <= 4
    assert (written[-1].fraction, written[-1].message) == (1.0, "done")
    with pytest.raises(ValueError, match="from 0 to 1"):
        context.progress(1.5)
    with pytest.raises(TypeError):
        context.progress("half")  # type: ignore[arg-type]


async def test_progress_of_a_job_no_longer_held_is_dropped() -> None:
    store = InMemoryExecutionStore()
    job_id = store.add("t", {}).id
    claimed = await store.claim(job_id, LeaseTerms.fresh(30))
    assert isinstance(claimed, Claimed)
    stale = Claimed(claimed.job, uuid.uuid4(), reclaimed=False)  # another lease's token
    reporter = ProgressReporter(store)
    reporter.sink_for(stale)(0.5, None)
    await reporter.flush_job(job_id)
    assert store.progress[job_id] == []
