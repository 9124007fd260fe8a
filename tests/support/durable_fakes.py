"""An in-memory ``DurableStore`` (``core/durable.py``) beside the worker's in-memory execution
store (``tests/support/consumer_fakes.py``), for the worker's unit tests of durable handlers.

It writes where that store reads: the steps a claim brings (``InMemoryExecutionStore.steps``),
and the job itself, moved by the transitions of ``core/states.py`` (``SLEEP``, ``WAKE``), each
write fenced as the SQL is (the job running under the fence's token and a live lease), so a
lease taken over answers ``LEASE_GONE``. ``send_signal`` is ``jobrelay_signal``. A child is a
job of the execution store; its end wakes no parent here (the database does that, in the
statement that ends the child): the worker's end-to-end tests cover children.

The shipped in-memory store of the testing kit is ``jobrelay/testing/durable.py``; this one is
the worker's own, so that its tests do not lean on the kit.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from jobrelay.core.durable import (
    LEASE_GONE,
    Asleep,
    ChildEnded,
    ChildRequest,
    ChildStarted,
    DurableStore,
    Fence,
    Gone,
    SignalTaken,
    StepKind,
    StepRecord,
    StepStatus,
    TimedOut,
    wake_time,
)
from jobrelay.core.states import SLEEP, TERMINAL_STATES, WAKE, JobEvent, JobState
from tests.support.consumer_fakes import InMemoryExecutionStore

# Where a sleeper with no deadline is due: never, in practice (it is woken first).
FAR_AWAY = timedelta(days=3650)


@dataclass
class SentSignal:
    name: str
    value: Any
    taken_by: str | None = None  # the step name of the wait that took it


class InMemoryDurableStore:
    def __init__(self, execution: InMemoryExecutionStore) -> None:
        self.execution = execution
        self.signals: dict[uuid.UUID, list[SentSignal]] = {}
        self.children: dict[str, uuid.UUID] = {}  # idempotency key -> child id
        self.calls = 0  # every call of the port, answered or not

    # --- for tests ----------------------------------------------------------------------------

    def send_signal(self, job_id: uuid.UUID, name: str, value: Any) -> str:
        """``jobrelay_signal``: keep the signal, and wake the job if it sleeps waiting for it."""
        job = self.execution.jobs.get(job_id)
        if job is None:
            return "unknown"
        if job.state in TERMINAL_STATES:
            return "finished"
        self.signals.setdefault(job_id, []).append(SentSignal(name, value))
        self.execution._record(job, JobEvent.SIGNALLED, job.attempts, f"signal {name}")
        if job.state is JobState.SLEEPING and job.waiting_for == {"signal": name}:
            now = self.execution.clock()
            detail = f"signal {name!r}"
            self.execution._move(
                job, WAKE, wake_at=None, waiting_for=None, available_at=now, detail=detail
            )
            self.execution.outbox.append((job_id, now))
        return "sent"

    # --- the port -------------------------------------------------------------------------------

    async def record_step(self, fence: Fence, name: str, value: Any) -> StepRecord | Gone:
        self._reach()
        if not self._holds(fence):
            return LEASE_GONE
        return self._record(fence, name, StepKind.STEP, value=value)

    async def sleep(
        self, fence: Fence, name: str, *, seconds: float | None, until: datetime | None
    ) -> Asleep | Gone:
        self._reach()
        if not self._holds(fence):
            return LEASE_GONE
        recorded = self._steps(fence).get(name)
        if recorded is None:
            wake_at = wake_time(self.execution.clock(), seconds, until)
            recorded = self._record(fence, name, StepKind.SLEEP, wake_at=wake_at)
        return self._sleep(fence, recorded.wake_at, None, name)

    async def wait_for_signal(
        self, fence: Fence, name: str, signal: str, timeout_seconds: float | None
    ) -> SignalTaken | TimedOut | Asleep | Gone:
        self._reach()
        if not self._holds(fence):
            return LEASE_GONE
        sent = next(
            (s for s in self.signals.get(fence.job_id, []) if s.name == signal and not s.taken_by),
            None,
        )
        if sent is not None:
            sent.taken_by = name
            self._record(fence, name, StepKind.SIGNAL, value=sent.value, again=True)
            return SignalTaken(sent.value)
        now = self.execution.clock()
        waiting = self._steps(fence).get(name)
        if waiting is not None and waiting.wake_at is not None and waiting.wake_at <= now:
            self._record(fence, name, StepKind.SIGNAL, status=StepStatus.TIMED_OUT, again=True)
            return TimedOut()
        if waiting is None:
            deadline = None if timeout_seconds is None else wake_time(now, timeout_seconds, None)
            waiting = self._record(
                fence, name, StepKind.SIGNAL, status=StepStatus.WAITING, wake_at=deadline
            )
        return self._sleep(fence, waiting.wake_at, {"signal": signal}, name)

    async def child(
        self, fence: Fence, name: str, request: ChildRequest, *, wait: bool
    ) -> ChildEnded | ChildStarted | Asleep | Gone:
        self._reach()
        if not self._holds(fence):
            return LEASE_GONE
        child_id = self.children.get(request.key)
        if child_id is None:
            child_id = self.execution.add(request.type, request.payload).id
            self.children[request.key] = child_id
            self._record(fence, name, StepKind.CHILD, status=StepStatus.WAITING, child=child_id)
        if not wait:
            return ChildStarted(child_id)
        child = self.execution.jobs[child_id]
        if child.state is JobState.SUCCEEDED:
            stored = self.execution.results[child_id]
            self._record(fence, name, StepKind.CHILD, value=stored.result, again=True)
            return ChildEnded(child_id, child.state.value, stored.result)
        if child.state in TERMINAL_STATES:
            return ChildEnded(child_id, child.state.value, None, child.last_error_code)
        return self._sleep(fence, None, {"child": str(child_id)}, name)

    # --- the rules ----------------------------------------------------------------------------

    def _reach(self) -> None:
        self.calls += 1
        self.execution._reach()

    def _holds(self, fence: Fence) -> bool:
        """The job runs under the fence's token and a live lease (``SLEEP``'s guard)."""
        job = self.execution.jobs.get(fence.job_id)
        return job is not None and self.execution._allows(SLEEP, job, fence.lease_token)

    def _steps(self, fence: Fence) -> dict[str, StepRecord]:
        return self.execution.steps[fence.job_id]

    def _record(
        self,
        fence: Fence,
        name: str,
        kind: StepKind,
        *,
        value: Any = None,
        status: StepStatus = StepStatus.DONE,
        wake_at: datetime | None = None,
        child: uuid.UUID | None = None,
        again: bool = False,
    ) -> StepRecord:
        """Record a step once (``again``: a waiting one's end overwrites it); the first record
        comes back when it exists, as ``ON CONFLICT DO NOTHING`` then a read does."""
        steps = self._steps(fence)
        earlier = steps.get(name)
        if earlier is not None and not again:
            return earlier
        record = StepRecord(
            name,
            kind,
            fence.attempt,
            self.execution.clock(),
            status,
            value,
            wake_at if earlier is None else earlier.wake_at,
            child if earlier is None else earlier.child_id,
        )
        steps[name] = record
        return record

    def _sleep(
        self,
        fence: Fence,
        wake_at: datetime | None,
        waiting_for: Mapping[str, str] | None,
        name: str,
    ) -> Asleep:
        """``SLEEP``: no lease, the attempt given back (``max_attempts`` + 1), due at its wake
        time (an outbox row then) or far away."""
        job = self.execution.jobs[fence.job_id]
        due = wake_at or self.execution.clock() + FAR_AWAY
        self.execution._move(
            job,
            SLEEP,
            max_attempts=job.max_attempts + 1,
            wake_at=wake_at,
            waiting_for=dict(waiting_for) if waiting_for else None,
            available_at=due,
            detail=name,
        )
        if wake_at is not None:
            self.execution.outbox.append((job.id, wake_at))
        return Asleep(wake_at, waiting_for)

    def job_steps(self, job_id: uuid.UUID) -> dict[str, StepRecord]:
        """What the job recorded, by name (a copy)."""
        return dict(self.execution.steps.get(job_id, {}))


if TYPE_CHECKING:  # it is a whole DurableStore
    _port: DurableStore = InMemoryDurableStore(InMemoryExecutionStore())
