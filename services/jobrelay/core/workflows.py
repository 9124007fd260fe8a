"""Workflows (docs/workflows.md): jobs that wait for other jobs of the same submission.

The pure part: the checks of a submitted graph (refs, ``after``, cycles, sizes) with the order
its jobs are written in, the fingerprint that makes a submission idempotent, the state of a
whole workflow from its jobs' states, and ``Workflow``, the builder users write graphs with.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import Any

from jobrelay.core.errors import RequestError
from jobrelay.core.fingerprint import canonical_json
from jobrelay.core.jobs import Flow, JobRequest
from jobrelay.core.states import TERMINAL_STATES, JobState
from jobrelay.core.type_catalog import PayloadTypes
from jobrelay_client.workflows import (
    REF_MAX as REF_MAX,
    OnFailure as OnFailure,
    Workflow as Workflow,
    is_valid_ref as is_valid_ref,
)

# A workflow has 1 to this many jobs.
WORKFLOW_JOBS_MAX = 1000


class InvalidWorkflow(RequestError):
    code = "invalid_workflow"
    title = "The workflow's jobs do not make a graph jobrelay can run"


class WorkflowNotFound(RequestError):
    code = "workflow_not_found"
    title = "No such workflow"


class WorkflowState(StrEnum):
    RUNNING = "running"  # a job of it is queued, running or retrying
    SUCCEEDED = "succeeded"  # every job succeeded
    FAILED = "failed"  # a job failed, and nothing else can run
    CANCELLED = "cancelled"  # cancelled as a whole


# The code of a job cancelled because a job it depends on failed.
DEPENDENCY_FAILED_CODE = "dependency_failed"


@dataclass(frozen=True)
class WorkflowStep:
    """One job of a submitted workflow: its ref, the checked request, the refs it waits for."""

    ref: str
    request: JobRequest
    after: tuple[str, ...] = ()
    max_attempts_asked: int | None = None  # None: the type's (fingerprinted only when asked)


def check_workflow(refs_and_after: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """The refs in an order where every job comes after the jobs it waits for (Kahn's), or
    ``InvalidWorkflow`` naming the first problem: the size, a bad or repeated ref, an ``after``
    naming no job of the workflow (or the job itself, or one twice), a cycle (its refs)."""
    if not 1 <= len(refs_and_after) <= WORKFLOW_JOBS_MAX:
        raise InvalidWorkflow(
            f"a workflow has 1 to {WORKFLOW_JOBS_MAX} jobs, not {len(refs_and_after)}"
        )
    refs = [ref for ref, _ in refs_and_after]
    for ref in refs:
        if not is_valid_ref(ref):
            raise InvalidWorkflow(
                f"ref {str(ref)[:120]!r} is not 1 to {REF_MAX} letters, digits, '_', '-' or '.'"
            )
    repeated = [ref for ref, n in Counter(refs).items() if n > 1]
    if repeated:
        raise InvalidWorkflow(f"ref {repeated[0]!r} names two jobs")
    known = set(refs)
    for ref, after in refs_and_after:
        for parent, n in Counter(after).items():
            if parent == ref:
                raise InvalidWorkflow(f"job {ref!r} waits for itself")
            if parent not in known:
                raise InvalidWorkflow(f"job {ref!r} waits for {str(parent)[:120]!r}, no job of it")
            if n > 1:
                raise InvalidWorkflow(f"job {ref!r} names {parent!r} twice in after")
    return _ordered(refs_and_after)


def _ordered(refs_and_after: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    waiting = {ref: len(after) for ref, after in refs_and_after}
    children: dict[str, list[str]] = {ref: [] for ref, _ in refs_and_after}
    for ref, after in refs_and_after:
        for parent in after:
            children[parent].append(ref)
    ready = [ref for ref, _ in refs_and_after if waiting[ref] == 0]
    order: list[str] = []
    while ready:
        ref = ready.pop(0)
        order.append(ref)
        for child in children[ref]:
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(order) < len(refs_and_after):
        raise InvalidWorkflow(f"the jobs {_a_cycle(refs_and_after, set(order))} wait in a cycle")
    return order


def _a_cycle(refs_and_after: Sequence[tuple[str, Sequence[str]]], ordered: set[str]) -> str:
    """One cycle among the jobs Kahn's order left out, as ``a -> b -> a``: walking back along
    ``after`` from any of them stays among them, so it must come round."""
    parents = {ref: [p for p in after if p not in ordered] for ref, after in refs_and_after}
    start = next(ref for ref, _ in refs_and_after if ref not in ordered)
    path: list[str] = []
    seen: dict[str, int] = {}
    ref = start
    while ref not in seen:
        seen[ref] = len(path)
        path.append(ref)
        ref = parents[ref][0]
    cycle = list(reversed(path[seen[ref] :]))  # parent first: "a -> b" is "b waits for a"
    order = {ref: index for index, (ref, _) in enumerate(refs_and_after)}
    first = min(range(len(cycle)), key=lambda index: order[cycle[index]])
    cycle = cycle[first:] + cycle[:first]  # from the job given first
    return " -> ".join([*cycle, cycle[0]])


def workflow_step(
    registry: PayloadTypes,
    *,
    ref: str,
    type: str,
    payload: Any,
    after: Sequence[str] = (),
    priority: int | None = None,
    max_attempts: int | None = None,
    default_max_attempts: int,
) -> WorkflowStep:
    """One job of a workflow checked as a single submission is (its type known, its payload
    valid, its type's flow defaults filled in); a ``RequestError`` names the job's ref."""
    try:
        model = registry.validate_payload(type, payload)
        asked = JobRequest(
            ref,
            type,
            payload,
            max_attempts or registry.max_attempts_for(type, default_max_attempts),
            flow=Flow(priority=priority),
        )
        # A unique key does not apply: a workflow is made whole or not at all.
        defaults = replace(registry.flow_defaults(type, model, asked.flow), unique_key=None)
    except RequestError as error:
        error.detail = f"job {ref!r}: {error.detail}"
        error.args = (error.detail,)
        raise
    return WorkflowStep(ref, replace(asked, defaults=defaults), tuple(after), max_attempts)


def job_key(workflow_id: uuid.UUID, ref: str) -> str:
    """The idempotency key of a workflow's job (unique per client, as every job's)."""
    return f"workflow:{workflow_id}:{ref}"


def workflow_fingerprint(on_failure: OnFailure, steps: Sequence[WorkflowStep]) -> str:
    """Same policy and the same jobs (by ref: type, payload, after, the options given) ⇔ same
    hash, whatever the order of keys or jobs."""
    document = {
        "on_failure": on_failure.value,
        "jobs": sorted(
            (
                {
                    "ref": step.ref,
                    "type": step.request.type,
                    "payload": step.request.payload,
                    "after": sorted(step.after),
                    "options": step.request.flow.given()
                    | (
                        {"max_attempts": step.max_attempts_asked}
                        if step.max_attempts_asked is not None
                        else {}
                    ),
                }
                for step in steps
            ),
            key=lambda job: str(job["ref"]),
        ),
    }
    return hashlib.sha256(canonical_json(document).encode()).hexdigest()


def workflow_state(states: Iterable[JobState], *, cancelled: bool) -> WorkflowState:
    """A workflow succeeded when all its jobs did; else it is cancelled once cancelled; else
    running while a job of it can still run (due, running, or waiting on jobs that can); else
    failed. ``states`` holds each job's
    state, waiting jobs included: a waiting job only waits on a failed one once nothing due or
    running is left (a job is queued as soon as its parents have all succeeded)."""
    seen = set(states)
    if seen <= {JobState.SUCCEEDED}:  # a cancel that came after the last job changed nothing
        return WorkflowState.SUCCEEDED
    if cancelled:
        return WorkflowState.CANCELLED
    if seen - TERMINAL_STATES - {JobState.WAITING}:
        return WorkflowState.RUNNING
    return WorkflowState.FAILED


@dataclass(frozen=True)
class WorkflowJob:
    """One job as a workflow's view shows it."""

    ref: str
    id: uuid.UUID
    type: str
    state: JobState
    after: tuple[str, ...]
    last_error_code: str | None = None
    progress: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class WorkflowView:
    id: uuid.UUID
    client_id: uuid.UUID
    on_failure: OnFailure
    created_at: datetime
    cancelled_at: datetime | None
    jobs: tuple[WorkflowJob, ...]  # in the order they were submitted

    @property
    def state(self) -> WorkflowState:
        return workflow_state(
            (job.state for job in self.jobs), cancelled=self.cancelled_at is not None
        )

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(job.state.value for job in self.jobs))


@dataclass(frozen=True)
class WorkflowSummary:
    """One workflow as a listing shows it: its jobs counted by state, not the jobs themselves."""

    id: uuid.UUID
    client_id: uuid.UUID
    on_failure: OnFailure
    created_at: datetime
    cancelled_at: datetime | None
    counts: Mapping[str, int]  # its jobs by state (JobState values)

    @property
    def state(self) -> WorkflowState:
        return workflow_state(
            (JobState(state) for state in self.counts), cancelled=self.cancelled_at is not None
        )

    @property
    def jobs(self) -> int:
        return sum(self.counts.values())
