"""``InMemoryDurableStore``: the ``DurableStore`` port (``core/durable.py``) in memory, for the
testing kit (docs/testing-handlers.md#durable-handlers) and the unit tests of ``DurableRun``.

It keeps what PostgreSQL keeps for durable execution (``db/durable_store.py``, migration
``0016_durable_execution.py``), per job: the steps by name, the signals sent and which wait took
each, the job's state while it sleeps (``wake_at``, ``waiting_for``), and the children submitted
under their keys. Its time is a ``FakeClock``, which the kit moves forward instead of waiting.
Every write is fenced as the database's are: only the attempt that holds the job's lease token
writes, anything else is answered ``LEASE_GONE``. Its moves of a job's state take the source
states of ``core/states.py``'s transitions (``CLAIM``, ``SLEEP``, ``WAKE``, ``CANCEL``), as the
SQL's guards do.

Children are answered by the test (``children=``): a value is the result every child of that
type succeeds with, a function of the payload gives the result (what it raises quarantines the
child, with the error's code), a ``ChildEnd`` ends it so, and a ``JobDefinition`` or a
``Registry`` runs the child's own handler (``testing/lives.py``). A child of a type with no
answer stays queued, and its parent sleeps on it.

Pure Python: no database driver, no jobrelay database adapter (a unit test checks it).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from jobrelay.core.durable import (
    LEASE_GONE,
    STEP_NAME_MAX,
    Asleep,
    ChildEnded,
    ChildRequest,
    ChildStarted,
    Fence,
    Gone,
    SignalTaken,
    StepKind,
    StepRecord,
    StepStatus,
    TimedOut,
    wake_time,
)
from jobrelay.core.errors import HandlerError
from jobrelay.core.registry import JobDefinition, Registry
from jobrelay.core.states import CANCEL, CLAIM, SLEEP, TERMINAL_STATES, WAKE, JobState


class FakeClock:
    """The store's time: it moves only when told (``advance``, ``move_to``), so a test sleeps a
    day in no time. Starts at the real time unless given one (with a time zone)."""

    def __init__(self, start: datetime | None = None) -> None:
        if start is not None and start.tzinfo is None:
            raise ValueError("the clock's start is an aware datetime (with its time zone)")
        self._now = start or datetime.now(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        if not seconds >= 0:
            raise ValueError(f"the clock moves forward only, not by {seconds!r} seconds")
        self._now += timedelta(seconds=seconds)
        return self._now

    def move_to(self, moment: datetime) -> datetime:
        """Forward to ``moment``; a moment already past leaves the clock where it is."""
        self._now = max(self._now, moment)
        return self._now


@dataclass(frozen=True)
class ChildEnd:
    """How a child ends without a result, as a test answers it: ``ChildEnd("quarantined",
    "card_declined")`` or ``ChildEnd("cancelled")``. The parent's ``run_child`` raises
    ``jobrelay.ChildFailed`` with that state and code."""

    state: str = JobState.QUARANTINED.value
    error_code: str | None = None

    def __post_init__(self) -> None:
        if self.state not in (JobState.QUARANTINED, JobState.CANCELLED):
            raise ValueError(f"a child ends quarantined or cancelled, not {self.state!r}")


# What a test answers a child type with: its result, a function of its payload, a ChildEnd, or
# a JobDefinition / Registry whose handler runs (``testing/lives.py``).
ChildAnswer = Any


@dataclass
class SentSignal:
    """One signal sent to a job (a ``job_signals`` row): ``taken_by`` the wait that took it."""

    id: int
    name: str
    value: Any
    sent_at: datetime
    idempotency_key: str | None = None
    taken_by: str | None = None
    taken_at: datetime | None = None


@dataclass(frozen=True)
class Sleep:
    """One time the job went to sleep: after which attempt, at what time, until when (None:
    until its signal or child comes), waiting for what."""

    attempt: int
    at: datetime
    wake_at: datetime | None
    waiting_for: Mapping[str, str] | None


@dataclass
class StoredJob:
    """What the store knows of one job (its ``jobs`` row, its steps and its signals)."""

    id: uuid.UUID
    type: str
    payload: Any = None
    state: JobState = JobState.QUEUED
    attempts: int = 0
    max_attempts: int = 3
    lease_token: uuid.UUID | None = None
    wake_at: datetime | None = None
    waiting_for: dict[str, str] | None = None
    parent_id: uuid.UUID | None = None
    key: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    result: Any = None
    error_code: str | None = None
    steps: dict[str, StepRecord] = field(default_factory=dict)
    signals: list[SentSignal] = field(default_factory=list)
    sleeps: list[Sleep] = field(default_factory=list)

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES


class InMemoryDurableStore:
    """The ``DurableStore`` port in memory, with the jobs it has seen (see the module)."""

    def __init__(
        self,
        *,
        clock: FakeClock | None = None,
        children: Mapping[str, ChildAnswer] | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.children: dict[str, ChildAnswer] = dict(children or {})
        self.jobs: dict[uuid.UUID, StoredJob] = {}
        self._signal_ids = 0
        self._child_keys: dict[str, uuid.UUID] = {}

    # --- the jobs, as the consumer's claim and finish move them --------------------------

    def add_job(
        self,
        job_type: str,
        payload: Any = None,
        *,
        job_id: uuid.UUID | None = None,
        max_attempts: int = 3,
    ) -> StoredJob:
        """A job accepted, ``queued``: the same one again for an id the store knows."""
        if job_id is not None and job_id in self.jobs:
            return self.jobs[job_id]
        job = StoredJob(job_id or uuid.uuid4(), job_type, payload, max_attempts=max_attempts)
        self.jobs[job.id] = job
        return job

    def job(self, job_id: uuid.UUID) -> StoredJob:
        try:
            return self.jobs[job_id]
        except KeyError:
            raise KeyError(f"the store has no job {job_id}") from None

    def claim(self, job_id: uuid.UUID) -> Fence:
        """Start the job's next attempt as a consumer's claim does: ``running`` under a new lease
        token, ``attempts + 1``; a sleeper's ``wake_at`` and ``waiting_for`` cleared."""
        job = self.job(job_id)
        if job.state not in CLAIM.source:
            raise ValueError(f"job {job_id} is {job.state}: no claim takes it")
        if job.attempts >= job.max_attempts:
            raise ValueError(f"job {job_id} has used its {job.max_attempts} attempts")
        job.state, job.attempts, job.lease_token = JobState.RUNNING, job.attempts + 1, uuid.uuid4()
        job.wake_at, job.waiting_for = None, None
        return Fence(job.id, job.lease_token, job.attempts)

    def records(self, job_id: uuid.UUID) -> dict[str, StepRecord]:
        """The job's steps, as the claim brings them to the attempt."""
        return dict(self.job(job_id).steps)

    def finish(
        self,
        fence: Fence,
        state: JobState,
        *,
        result: Any = None,
        error_code: str | None = None,
    ) -> bool:
        """End the attempt (``succeeded``, ``retrying``, ``quarantined``, ``cancelled``), if it
        still holds the lease; a job that ends wakes its parent sleeping on it."""
        job = self._fenced(fence)
        if job is None:
            return False
        job.state, job.lease_token = state, None
        if state is JobState.RETRYING:
            return True
        self._end(job, state, result, error_code)
        return True

    def expire_lease(self, job_id: uuid.UUID) -> None:
        """The running attempt's lease expired and the job was rescued (``queued`` again, as
        the dispatcher's rescue does): every later write of that attempt is ``LEASE_GONE``."""
        job = self.job(job_id)
        if job.state is not JobState.RUNNING:
            raise ValueError(f"job {job_id} is {job.state}: it holds no lease")
        job.state, job.lease_token = JobState.QUEUED, None

    def end_child(
        self,
        child_id: uuid.UUID,
        state: JobState | str = JobState.SUCCEEDED,
        *,
        result: Any = None,
        error_code: str | None = None,
    ) -> None:
        """Finish a child as its own worker would: succeeded with ``result``, or quarantined or
        cancelled; its parent sleeping on it is woken (the fragment ``dependents_of``)."""
        state = JobState(state)
        if state not in TERMINAL_STATES:
            raise ValueError(f"a child ends succeeded, quarantined or cancelled, not {state}")
        child = self.job(child_id)
        if child.finished:
            raise ValueError(f"child {child_id} has already ended {child.state}")
        child.lease_token = None
        self._end(child, state, as_stored(result), error_code)

    def cancel(self, job_id: uuid.UUID) -> bool:
        """Cancel a job that has not finished and is not running (``sleeping`` too), and its
        unfinished children."""
        job = self.job(job_id)
        if job.state not in CANCEL.source:
            return False
        self._end(job, JobState.CANCELLED, None, None)
        for child in self.children_of(job_id):
            self.cancel(child.id)  # those that have not finished and are not running
        return True

    def children_of(self, job_id: uuid.UUID) -> list[StoredJob]:
        """The children the job submitted, in order."""
        return [job for job in self.jobs.values() if job.parent_id == job_id]

    # --- signals ---------------------------------------------------------------------------

    def send_signal(
        self,
        job_id: uuid.UUID,
        name: str,
        value: Any = None,
        *,
        idempotency_key: str | None = None,
    ) -> str:
        """``jobrelay_signal``: ``sent`` (kept; a job sleeping for it is woken), ``repeated``
        (its key was used for this job), ``finished`` (the job ended: nothing kept) or
        ``unknown``. ``ValueError`` for a name the function refuses."""
        if not isinstance(name, str) or not 1 <= len(name) <= STEP_NAME_MAX:
            raise ValueError(f"a signal's name is a text of 1 to {STEP_NAME_MAX} characters")
        job = self.jobs.get(job_id)
        if job is None:
            return "unknown"
        if job.finished:
            return "finished"
        if idempotency_key is not None and any(
            signal.idempotency_key == idempotency_key for signal in job.signals
        ):
            return "repeated"
        self._signal_ids += 1
        job.signals.append(
            SentSignal(self._signal_ids, name, as_stored(value), self.clock.now(), idempotency_key)
        )
        if job.state is JobState.SLEEPING and job.waiting_for == {"signal": name}:
            self._wake(job)
        return "sent"

    # --- the port ----------------------------------------------------------------------------

    async def record_step(self, fence: Fence, name: str, value: Any) -> StepRecord | Gone:
        job = self._fenced(fence)
        if job is None:
            return LEASE_GONE
        return self._record(job, fence, name, StepKind.STEP, value=as_stored(value))

    async def sleep(
        self, fence: Fence, name: str, *, seconds: float | None, until: datetime | None
    ) -> Asleep | Gone:
        job = self._fenced(fence)
        if job is None:
            return LEASE_GONE
        record = job.steps.get(name) or self._record(
            job, fence, name, StepKind.SLEEP, wake_at=wake_time(self.clock.now(), seconds, until)
        )
        return self._put_to_sleep(job, record.wake_at, None)

    async def wait_for_signal(
        self, fence: Fence, name: str, signal: str, timeout_seconds: float | None
    ) -> SignalTaken | TimedOut | Asleep | Gone:
        job = self._fenced(fence)
        if job is None:
            return LEASE_GONE
        now = self.clock.now()
        sent = next((s for s in job.signals if s.name == signal and s.taken_by is None), None)
        if sent is not None:
            sent.taken_by, sent.taken_at = name, now
            self._record(job, fence, name, StepKind.SIGNAL, value=sent.value, replace_it=True)
            return SignalTaken(sent.value)
        waiting = job.steps.get(name)
        if waiting is not None and waiting.wake_at is not None and waiting.wake_at <= now:
            self._record(
                job, fence, name, StepKind.SIGNAL, status=StepStatus.TIMED_OUT, replace_it=True
            )
            return TimedOut()
        if waiting is None:
            deadline = None if timeout_seconds is None else wake_time(now, timeout_seconds, None)
            waiting = self._record(
                job, fence, name, StepKind.SIGNAL, status=StepStatus.WAITING, wake_at=deadline
            )
        return self._put_to_sleep(job, waiting.wake_at, {"signal": signal})

    async def child(
        self, fence: Fence, name: str, request: ChildRequest, *, wait: bool
    ) -> ChildEnded | ChildStarted | Asleep | Gone:
        job = self._fenced(fence)
        if job is None:
            return LEASE_GONE
        child = self._submit(job, request)
        if not wait:
            self._record(job, fence, name, StepKind.CHILD, child_id=child.id)
            return ChildStarted(child.id)
        if child.state is JobState.SUCCEEDED:
            self._record(
                job, fence, name, StepKind.CHILD, value=child.result, child_id=child.id,
                replace_it=True,
            )  # fmt: skip
            return ChildEnded(child.id, child.state.value, child.result)
        if child.finished:  # a failure is not recorded: a replayed child may still succeed
            return ChildEnded(child.id, child.state.value, None, child.error_code)
        if name not in job.steps:
            self._record(
                job, fence, name, StepKind.CHILD, status=StepStatus.WAITING, child_id=child.id
            )
        return self._put_to_sleep(job, None, {"child": str(child.id)})

    # --- inside ------------------------------------------------------------------------------

    def _fenced(self, fence: Fence) -> StoredJob | None:
        """The job, if ``fence`` still holds its lease (the ``lease_token`` guard)."""
        job = self.jobs.get(fence.job_id)
        if job is None or job.state is not JobState.RUNNING:
            return None
        if job.lease_token != fence.lease_token or job.attempts != fence.attempt:
            return None
        return job

    def _record(
        self,
        job: StoredJob,
        fence: Fence,
        name: str,
        kind: StepKind,
        *,
        status: StepStatus = StepStatus.DONE,
        value: Any = None,
        wake_at: datetime | None = None,
        child_id: uuid.UUID | None = None,
        replace_it: bool = False,
    ) -> StepRecord:
        """Insert the step (``ON CONFLICT DO NOTHING``: a name recorded stays as it is), or, with
        ``replace_it``, finish a waiting one, its deadline and child kept."""
        recorded = job.steps.get(name)
        if recorded is not None and not replace_it:
            return recorded
        record = StepRecord(
            name, kind, fence.attempt, self.clock.now(), status, value, wake_at, child_id
        )
        if recorded is not None:
            record = replace(
                recorded, status=status, value=value, attempt=fence.attempt, at=record.at
            )
        job.steps[name] = record
        return record

    def _put_to_sleep(
        self, job: StoredJob, wake_at: datetime | None, waiting_for: dict[str, str] | None
    ) -> Asleep:
        """The SLEEP transition: no lease, ``sleeping``; the attempt is not counted against the
        job (``max_attempts + 1``)."""
        assert job.state in SLEEP.source  # only a fenced write, of a running attempt, gets here
        job.state, job.lease_token, job.max_attempts = (
            JobState.SLEEPING,
            None,
            job.max_attempts + 1,
        )
        job.wake_at, job.waiting_for = wake_at, waiting_for
        job.sleeps.append(Sleep(job.attempts, self.clock.now(), wake_at, waiting_for))
        return Asleep(wake_at, waiting_for)

    def _wake(self, job: StoredJob) -> None:
        """The WAKE transition: due now."""
        assert job.state in WAKE.source
        job.state, job.wake_at, job.waiting_for = JobState.QUEUED, None, None

    def _submit(self, parent: StoredJob, request: ChildRequest) -> StoredJob:
        """The child under its key: submitted once, the same job for a repeat."""
        known = self._child_keys.get(request.key)
        if known is not None:
            return self.jobs[known]
        child = self.add_job(
            request.type,
            as_stored(request.payload),
            max_attempts=int(request.options.get("max_attempts", 3)),
        )
        child.parent_id, child.key, child.options = parent.id, request.key, dict(request.options)
        self._child_keys[request.key] = child.id
        return child

    def answer_children(self) -> list[StoredJob]:
        """What the children's own workers would do: end every queued child whose type the test
        answers with a value, a function or a ``ChildEnd`` (waking a parent that sleeps on it).
        The children to run by their handler (a definition, a registry), for the kit."""
        to_run = []
        for child in list(self.jobs.values()):
            if child.parent_id is None or child.finished or child.type not in self.children:
                continue
            answer = self.children[child.type]
            if runs_a_handler(answer):
                to_run.append(child)
            elif child.state is JobState.QUEUED:
                self._answer(child, answer)
        return to_run

    def _answer(self, child: StoredJob, answer: ChildAnswer) -> None:
        if isinstance(answer, ChildEnd):
            self.end_child(child.id, answer.state, error_code=answer.error_code)
        elif callable(answer):
            self._answer_with(child, answer)
        else:
            self.end_child(child.id, result=answer)

    def _answer_with(self, child: StoredJob, answer: Callable[[Any], Any]) -> None:
        try:
            result = answer(child.payload)
        except HandlerError as error:
            self.end_child(child.id, JobState.QUARANTINED, error_code=error.code)
        except Exception:
            self.end_child(child.id, JobState.QUARANTINED, error_code="unexpected_error")
        else:
            if isinstance(result, ChildEnd):
                self.end_child(child.id, result.state, error_code=result.error_code)
            else:
                self.end_child(child.id, result=result)

    def _end(self, job: StoredJob, state: JobState, result: Any, error_code: str | None) -> None:
        job.state, job.result, job.error_code = state, result, error_code
        job.wake_at, job.waiting_for = None, None
        parent = self.jobs.get(job.parent_id) if job.parent_id is not None else None
        if (
            parent is not None
            and parent.state is JobState.SLEEPING
            and parent.waiting_for == {"child": str(job.id)}
        ):
            self._wake(parent)


def runs_a_handler(answer: ChildAnswer) -> bool:
    """A child answered by its own handler: a job definition or a registry."""
    return isinstance(answer, JobDefinition | Registry)


def as_stored(value: Any) -> Any:
    """The value as jsonb gives it back (a tuple a list, ...)."""
    return json.loads(json.dumps(value))
