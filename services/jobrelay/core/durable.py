"""Durable execution inside a job (docs/durable-execution.md): steps, sleeps, signals and child
jobs, each recorded once under the attempt's lease token, so a later attempt goes on from where
an earlier one got to.

``DurableRun`` is the logic, written once for the consumer and the testing kit: what a handler's
``context.step``, ``context.sleep``, ``context.wait_for_signal``, ``context.run_child`` and
``context.start_child`` do with the records an attempt found at its claim. What it asks of a store
is the ``DurableStore`` port: ``db/durable_store.py`` on PostgreSQL,
``jobrelay/testing/durable.py`` in memory.

A handler that must wait (a sleep, a signal not yet sent, a child not yet finished) does not
block a consumer: the store puts the job to sleep (``sleeping``: no lease, no slot, no message on
the queue) and ``Suspended`` unwinds the handler. It is a ``BaseException``, like
``asyncio.CancelledError``, so that a handler's ``except Exception`` does not swallow it. When
the job wakes, the handler runs again from the top: its recorded steps return their values at
once, without running their functions, and the wait returns.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, NoReturn, Protocol

from jobrelay.core.errors import PermanentError
from jobrelay.core.jsonvalues import unstorable_json

# A step's name: what a later attempt finds its value by. Long enough for a name and a counter.
STEP_NAME_MAX = 200


class StepKind(StrEnum):
    STEP = "step"  # context.step: a function's return value
    SLEEP = "sleep"  # context.sleep: the wake time
    SIGNAL = "signal"  # context.wait_for_signal: the signal's value (or its timeout)
    CHILD = "child"  # context.run_child / start_child: the child's id, then its result


class StepStatus(StrEnum):
    DONE = "done"  # its value is final
    WAITING = "waiting"  # a signal or a child not arrived yet (the job sleeps on it)
    TIMED_OUT = "timed_out"  # a signal's wait ran out: every later attempt raises SignalTimeout


@dataclass(frozen=True)
class StepRecord:
    """One row of ``job_steps``: what the job has done or is waiting for, under a name."""

    name: str
    kind: StepKind
    attempt: int  # the attempt that recorded it
    at: datetime
    status: StepStatus = StepStatus.DONE
    value: Any = None  # a step's return value, a signal's value, a child's result
    wake_at: datetime | None = None  # a sleep's end, or a signal wait's deadline
    child_id: uuid.UUID | None = None

    def as_json(self, *, with_value: bool = False) -> dict[str, Any]:
        """The job view's entry (``steps``; the value only when asked, ``?steps=values``)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind.value,
            "status": self.status.value,
            "at": self.at.isoformat(),
            "attempt": self.attempt,
        }
        if self.wake_at is not None:
            entry["wake_at"] = self.wake_at.isoformat()
        if self.child_id is not None:
            entry["child_id"] = str(self.child_id)
        if with_value:
            entry["value"] = self.value
        return entry


# --- what a handler may see raised ----------------------------------------------------------


class SignalTimeout(PermanentError):
    """``context.wait_for_signal`` ran out of time. Recorded: a later attempt raises it again at
    the same wait, so, not caught, it quarantines the job at once (code ``signal_timeout``)."""

    code = "signal_timeout"

    def __init__(self, signal: str) -> None:
        super().__init__(f"no signal {signal[:100]!r} arrived in time")
        self.signal = signal


class ChildFailed(PermanentError):
    """``context.run_child``'s child ended without a result: quarantined or cancelled."""

    code = "child_failed"

    def __init__(self, child_id: uuid.UUID, state: str, error_code: str | None) -> None:
        super().__init__(
            f"child job {child_id} ended {state}" + (f" ({error_code})" if error_code else "")
        )
        self.child_id = child_id
        self.state = state
        self.error_code = error_code


class DurableInterrupt(BaseException):
    """Ends a handler's attempt from inside a durable call. A ``BaseException``, so a handler's
    ``except Exception`` lets it through (as it does ``asyncio.CancelledError``)."""


class Suspended(DurableInterrupt):
    """The job is asleep now (the store committed it): the attempt ends, its message is acked,
    and the job is relayed again when it wakes."""

    def __init__(self, wake_at: datetime | None, waiting_for: Mapping[str, str] | None) -> None:
        super().__init__(f"asleep until {wake_at}" if wake_at else f"waiting for {waiting_for}")
        self.wake_at = wake_at
        self.waiting_for = dict(waiting_for) if waiting_for else None


class LeaseGone(DurableInterrupt):
    """A durable call found the attempt's lease no longer the worker's: nothing was recorded, and
    the handler must stop (the job is another attempt's, or comes back when its lease expires)."""


class CancelPending(DurableInterrupt):
    """A sleep or a wait found the job's cancel requested (its client asked while it ran): the
    job was not put to sleep, and its worker ends it cancelled, as a cancel its heartbeat
    carries. Else a wait with no deadline would sleep on, cancelled by nobody."""


# --- what the store answers -------------------------------------------------------------------


@dataclass(frozen=True)
class Fence:
    """Who may write: the job, the token of the claim that runs it, and that attempt's number."""

    job_id: uuid.UUID
    lease_token: uuid.UUID
    attempt: int


@dataclass(frozen=True)
class Asleep:
    """The store put the job to sleep (``sleeping``), in the same transaction as the record."""

    wake_at: datetime | None
    waiting_for: Mapping[str, str] | None = None


@dataclass(frozen=True)
class SignalTaken:
    value: Any


@dataclass(frozen=True)
class TimedOut:
    pass


@dataclass(frozen=True)
class ChildEnded:
    """A child that finished: its result (None unless it succeeded), state and error code."""

    child_id: uuid.UUID
    state: str
    result: Any = None
    error_code: str | None = None


@dataclass(frozen=True)
class ChildStarted:
    child_id: uuid.UUID


class Gone(StrEnum):
    LEASE = "lease_gone"  # the attempt's lease is no longer the worker's: nothing written
    # The job's cancel was requested while it ran: it does not go to sleep (nothing written);
    # its worker ends it cancelled, as when its heartbeat carries the request.
    CANCEL = "cancel_requested"


LEASE_GONE = Gone.LEASE


@dataclass(frozen=True)
class ChildRequest:
    """A child job as a parent submits it: accepted like any job of the parent's client, under
    ``key`` (default ``<parent id>:<step name>``), with ``parent_job_id`` the parent."""

    type: str
    payload: Any
    key: str
    options: Mapping[str, Any] = field(default_factory=dict)  # priority, max_attempts, run_at...


class DurableStore(Protocol):
    """What ``DurableRun`` asks of a store. Every write is fenced by ``fence``: when the lease is
    no longer the worker's, nothing is written and the answer is ``LEASE_GONE``. Each method is
    one transaction; raises ``StoreUnavailable`` when the store cannot be reached."""

    async def record_step(self, fence: Fence, name: str, value: Any) -> StepRecord | Gone:
        """Store a step's value under its name (one statement). Again after a lost answer: the
        record of this attempt comes back."""
        ...

    async def sleep(
        self, fence: Fence, name: str, *, seconds: float | None, until: datetime | None
    ) -> Asleep | Gone:
        """Record the sleep (its wake time, now + ``seconds`` by the store's clock, or
        ``until``) and put the job to sleep until then, with an outbox row due at that time.
        A sleep already recorded keeps its wake time."""
        ...

    async def wait_for_signal(
        self, fence: Fence, name: str, signal: str, timeout_seconds: float | None
    ) -> SignalTaken | TimedOut | Asleep | Gone:
        """Take the oldest signal ``signal`` not taken yet (recorded under ``name``); else, past
        the wait's recorded deadline, record the timeout; else put the job to sleep waiting for
        it (the deadline recorded the first time, now + ``timeout_seconds``). One transaction,
        holding the job's row, so a signal sent at the same instant is either taken here or
        wakes the job (the sender takes the same row first: ``jobrelay_signal``)."""
        ...

    async def child(
        self, fence: Fence, name: str, request: ChildRequest, *, wait: bool
    ) -> ChildEnded | ChildStarted | Asleep | Gone:
        """Submit the child (once: its key makes a repeat the same job) and record it under
        ``name``. ``wait``: if it has finished, its end (its result recorded when it
        succeeded); else the parent sleeps until the transaction that finishes the child wakes
        it. Not ``wait``: ``ChildStarted``."""
        ...


# --- the handler's calls ----------------------------------------------------------------------


def check_step_value(name: str, value: Any) -> Any:
    """A step's value is kept as a result is: JSON that jsonb stores (``PermanentError``, code
    ``invalid_step_value``, otherwise). Returns the value as a later attempt reads it back (a
    tuple is a list), so that the first attempt sees what every replay sees."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        raise PermanentError(
            f"step {name[:100]!r} returned a value that is not JSON", code="invalid_step_value"
        ) from None
    problem = unstorable_json(value)
    if problem is not None:
        raise PermanentError(
            f"step {name[:100]!r} returned a value jsonb cannot store: {problem}",
            code="invalid_step_value",
        )
    return json.loads(text)


def check_step_name(name: str) -> None:
    if not isinstance(name, str) or not 1 <= len(name) <= STEP_NAME_MAX or "\x00" in name:
        raise PermanentError(
            f"a step's name is a text of 1 to {STEP_NAME_MAX} characters", code="invalid_step_name"
        )


class DurableRun:
    """One attempt's durable calls: the records found at its claim, the names used so far (a
    name used twice in one attempt is the handler's error, ``duplicate_step``), and the store
    that records the new ones. ``now``: the store's time at the claim (a recorded sleep whose
    wake time has not come sleeps again)."""

    def __init__(
        self,
        store: DurableStore,
        fence: Fence,
        records: Mapping[str, StepRecord],
        *,
        now: datetime,
    ) -> None:
        self.store = store
        self.fence = fence
        self.records: dict[str, StepRecord] = dict(records)
        self.now = now
        self._used: set[str] = set()
        self._counters: dict[str, int] = {}

    # --- names ---------------------------------------------------------------------------

    def _take_name(self, name: str) -> str:
        check_step_name(name)
        if name in self._used:
            raise PermanentError(
                f"step name {name[:100]!r} used twice in one attempt", code="duplicate_step"
            )
        self._used.add(name)
        return name

    def _auto_name(self, base: str) -> str:
        """``sleep``, ``signal:ready``: the first is named so, the next ``#2``, ``#3``... in the
        order the handler reaches them (so a handler that runs the same way names them alike)."""
        count = self._counters.get(base, 0) + 1
        self._counters[base] = count
        return base if count == 1 else f"{base}#{count}"

    # --- the calls -----------------------------------------------------------------------

    def begin_step(self, name: str) -> StepRecord | None:
        """A step's record, if an earlier attempt made it (its value is returned, ``fn`` is not
        run); None: run ``fn`` and ``finish_step`` its value. Split so that a plain ``def``
        handler runs ``fn`` in its own thread, never on the consumer's event loop."""
        return self.records.get(self._take_name(name))

    async def finish_step(self, name: str, value: Any) -> Any:
        value = check_step_value(name, value)
        answer = await self.store.record_step(self.fence, name, value)
        if isinstance(answer, Gone):
            raise LeaseGone(f"step {name!r} not recorded: the lease is no longer this attempt's")
        self.records[name] = answer
        return value

    async def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        recorded = self.begin_step(name)
        if recorded is not None:
            return recorded.value
        value = fn(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return await self.finish_step(name, value)

    async def sleep(
        self,
        seconds: float | None = None,
        *,
        until: datetime | None = None,
        name: str | None = None,
    ) -> None:
        if (seconds is None) == (until is None):
            raise TypeError("sleep takes seconds or until=, not both")
        if seconds is not None and (isinstance(seconds, bool) or not seconds >= 0):
            raise ValueError(f"seconds is a number of 0 or more, not {seconds!r}")
        if until is not None and until.tzinfo is None:
            raise ValueError("until= is an aware datetime (with its time zone)")
        name = self._take_name(name if name is not None else self._auto_name("sleep"))
        recorded = self.records.get(name)
        if recorded is not None and recorded.wake_at is not None and recorded.wake_at <= self.now:
            return  # slept already: a later attempt does not sleep again
        answer = await self.store.sleep(self.fence, name, seconds=seconds, until=until)
        self._suspend(answer, name)

    async def wait_for_signal(
        self,
        signal: str,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 - the signal's deadline, kept across sleeps
        name: str | None = None,
    ) -> Any:
        check_step_name(signal)
        if timeout is not None and (isinstance(timeout, bool) or not timeout >= 0):
            raise ValueError(f"timeout is a number of seconds, 0 or more, not {timeout!r}")
        name = self._take_name(name if name is not None else self._auto_name(f"signal:{signal}"))
        recorded = self.records.get(name)
        if recorded is not None and recorded.status is StepStatus.DONE:
            return recorded.value
        if recorded is not None and recorded.status is StepStatus.TIMED_OUT:
            raise SignalTimeout(signal)
        answer = await self.store.wait_for_signal(self.fence, name, signal, timeout)
        if isinstance(answer, SignalTaken):
            return answer.value
        if isinstance(answer, TimedOut):
            raise SignalTimeout(signal)
        self._suspend(answer, name)

    async def run_child(
        self,
        job_type: str,
        payload: Any,
        *,
        key: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> Any:
        name, request = self._child(job_type, payload, key, name, options)
        recorded = self.records.get(name)
        if recorded is not None and recorded.status is StepStatus.DONE:
            return recorded.value
        answer = await self.store.child(self.fence, name, request, wait=True)
        if isinstance(answer, ChildEnded):
            if answer.state == "succeeded":
                return answer.result
            raise ChildFailed(answer.child_id, answer.state, answer.error_code)
        if isinstance(answer, ChildStarted):  # pragma: no cover - a store's mistake
            raise RuntimeError("the store started a child it was asked to wait for")
        self._suspend(answer, name)

    async def start_child(
        self,
        job_type: str,
        payload: Any,
        *,
        key: str | None = None,
        name: str | None = None,
        **options: Any,
    ) -> uuid.UUID:
        name, request = self._child(job_type, payload, key, name, options)
        recorded = self.records.get(name)
        if recorded is not None and recorded.child_id is not None:
            return recorded.child_id
        answer = await self.store.child(self.fence, name, request, wait=False)
        if isinstance(answer, Gone):
            raise LeaseGone(f"child {name!r} not started: the lease is no longer this attempt's")
        if isinstance(answer, ChildStarted | ChildEnded):
            return answer.child_id
        raise RuntimeError("the store put the job to sleep for a child it was not to wait for")

    # --- helpers -------------------------------------------------------------------------

    def _child(
        self,
        job_type: str,
        payload: Any,
        key: str | None,
        name: str | None,
        options: Mapping[str, Any],
    ) -> tuple[str, ChildRequest]:
        name = self._take_name(name if name is not None else self._auto_name(f"child:{job_type}"))
        return name, ChildRequest(
            job_type, payload, key if key is not None else f"{self.fence.job_id}:{name}", options
        )

    def _suspend(self, answer: Asleep | Gone | object, name: str) -> NoReturn:
        if isinstance(answer, Asleep):
            raise Suspended(answer.wake_at, answer.waiting_for)
        if answer is Gone.CANCEL:
            raise CancelPending(f"{name!r}: the job's cancel was requested; it does not sleep")
        if isinstance(answer, Gone):
            raise LeaseGone(f"{name!r} not recorded: the lease is no longer this attempt's")
        raise RuntimeError(f"unexpected answer of the store for {name!r}: {answer!r}")


def wake_time(now: datetime, seconds: float | None, until: datetime | None) -> datetime:
    """When a sleep asked at ``now`` ends (an in-memory store's clock; PostgreSQL computes its
    own)."""
    if until is not None:
        return until
    return now + timedelta(seconds=seconds or 0.0)


def blocking(coroutine: Coroutine[Any, Any, Any], loop: asyncio.AbstractEventLoop) -> Any:
    """Run one of ``DurableRun``'s calls from a plain ``def`` handler's thread on the consumer's
    event loop, and wait for its answer there."""
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
