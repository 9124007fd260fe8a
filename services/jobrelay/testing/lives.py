"""``run_durable`` / ``run_durable_async``: a durable job's whole life in memory, attempt after
attempt, as consumers would run it (docs/testing-handlers.md#durable-handlers).

Each attempt is ``run_job``'s (``testing/verdicts.py::run_attempt``: the consumer's own handler
call and outcome decision), its durable calls recorded in an ``InMemoryDurableStore``. Between
attempts nothing waits: a sleep moves the store's ``FakeClock`` to its wake time, a retry moves
it by the retry's delay, a signal due by the test's schedule is sent when the clock reaches its
time, and the children are answered (a stub) or run (a handler). The life ends when the job has
finished, or when it sleeps for something that nothing is going to send: the verdict then says
what it waits for, and the test may send it and run the life on (``store=``, ``job_id=``).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobrelay.core.bounds import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.durable import StepRecord
from jobrelay.core.jobs import Quarantine, RetryLater, Succeeded
from jobrelay.core.registry import JobDefinition, Registry
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState
from jobrelay.testing.contexts import make_context
from jobrelay.testing.durable import (
    ChildAnswer,
    InMemoryDurableStore,
    SentSignal,
    Sleep,
    StoredJob,
)
from jobrelay.testing.verdicts import (
    Verdict,
    as_stored,
    outside_a_loop,
    run_attempt,
    target_of,
    with_durable,
)

# A life that has run this many attempts (sleeps count) without ending is a handler that never
# stops sleeping: the kit says so rather than loop for ever.
MAX_RUNS = 1000


@dataclass(frozen=True)
class Signal:
    """A signal the test sends to the job ``after`` seconds of the store's clock from the life's
    start (0: before the first attempt), as ``POST /v1/jobs/{id}/signals/{name}`` would."""

    name: str
    value: Any = None
    after: float = 0.0
    idempotency_key: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.after, bool) or not self.after >= 0:
            raise ValueError(f"after= is a number of seconds, 0 or more, not {self.after!r}")


@dataclass(frozen=True)
class SleepingJob:
    """What ``on_sleep`` is given each time the job goes to sleep: the sleep, and the means to
    send it a signal or end one of its children now (the clock stands at the sleep's start)."""

    job_id: uuid.UUID
    store: InMemoryDurableStore
    sleep: Sleep

    @property
    def wake_at(self) -> datetime | None:
        return self.sleep.wake_at

    @property
    def waiting_for(self) -> dict[str, str] | None:
        return dict(self.sleep.waiting_for) if self.sleep.waiting_for is not None else None

    def signal(self, name: str, value: Any = None, *, idempotency_key: str | None = None) -> str:
        return self.store.send_signal(self.job_id, name, value, idempotency_key=idempotency_key)


OnSleep = Callable[[SleepingJob], object]


@dataclass(frozen=True)
class DurableVerdict:
    """A durable job's life: every attempt's ``Verdict`` in order (``verdicts``; an attempt that
    went to sleep is one too, ``Slept``), and what the store holds of the job at its end."""

    job_id: uuid.UUID
    store: InMemoryDurableStore
    verdicts: tuple[Verdict, ...]

    @property
    def job(self) -> StoredJob:
        return self.store.job(self.job_id)

    @property
    def last(self) -> Verdict:
        if not self.verdicts:
            raise ValueError("the job has not run (it sleeps for something nothing sent)")
        return self.verdicts[-1]

    @property
    def state(self) -> JobState:
        """``succeeded``, ``quarantined``, ``cancelled``, or ``sleeping`` when it waits for a
        signal or a child that nothing is going to send or end."""
        return self.job.state

    @property
    def succeeded(self) -> bool:
        return self.state is JobState.SUCCEEDED

    @property
    def quarantined(self) -> bool:
        return self.state is JobState.QUARANTINED

    @property
    def sleeping(self) -> bool:
        return self.state is JobState.SLEEPING

    @property
    def result(self) -> dict[str, Any] | None:
        return self.last.result if self.succeeded else None

    @property
    def error_code(self) -> str | None:
        return self.last.error_code

    @property
    def waiting_for(self) -> dict[str, str] | None:
        return dict(self.job.waiting_for) if self.job.waiting_for is not None else None

    @property
    def wake_at(self) -> datetime | None:
        return self.job.wake_at

    @property
    def attempts(self) -> int:
        """The attempts the life has run (an attempt that went to sleep is one)."""
        return len(self.verdicts)

    @property
    def steps(self) -> dict[str, StepRecord]:
        """Every record of the job by name: steps, sleeps, signal waits and children."""
        return dict(self.job.steps)

    @property
    def values(self) -> dict[str, Any]:
        """Each record's value by name (a step's return value, a signal's, a child's result)."""
        return {name: record.value for name, record in self.job.steps.items()}

    @property
    def sleeps(self) -> list[Sleep]:
        return list(self.job.sleeps)

    @property
    def signals(self) -> list[SentSignal]:
        """The signals sent to the job, each with the wait that took it (``taken_by``)."""
        return list(self.job.signals)

    @property
    def children(self) -> list[StoredJob]:
        return self.store.children_of(self.job_id)

    @property
    def now(self) -> datetime:
        """The store's clock at the life's end."""
        return self.store.clock.now()


def run_durable(
    target: Registry | JobDefinition[Any, Any, Any],
    *args: Any,
    signals: Mapping[str, Any] | Sequence[Signal] | None = None,
    children: Mapping[str, ChildAnswer] | Registry | None = None,
    on_sleep: OnSleep | None = None,
    store: InMemoryDurableStore | None = None,
    job_id: uuid.UUID | None = None,
    max_attempts: int | None = None,
    policy: RetryPolicy | None = None,
) -> DurableVerdict:
    """Run a durable job's life in memory and return its ``DurableVerdict``:
    ``run_durable(order, payload)`` or ``run_durable(registry, "shop.order", payload)``.

    ``signals``: ``{"warehouse": value}`` sent before the first attempt, or a list of
    ``Signal(name, value, after=seconds)`` sent when the clock reaches their time. ``children``:
    by type, the result its children succeed with, a function of the payload giving it, a
    ``ChildEnd``, or a ``JobDefinition`` to run; a ``Registry`` runs every child by its type's
    handler. ``on_sleep(sleeping)``: called each time the job goes to sleep, to send a signal
    then. ``store`` and ``job_id``: go on with a job an earlier life left asleep (or share a
    clock). ``max_attempts``: by default the type's, else 3. ``policy``: the retry policy."""
    outside_a_loop("run_durable", "run_durable_async")
    return asyncio.run(
        run_durable_async(
            target,
            *args,
            signals=signals,
            children=children,
            on_sleep=on_sleep,
            store=store,
            job_id=job_id,
            max_attempts=max_attempts,
            policy=policy,
        )
    )


async def run_durable_async(
    target: Registry | JobDefinition[Any, Any, Any],
    *args: Any,
    signals: Mapping[str, Any] | Sequence[Signal] | None = None,
    children: Mapping[str, ChildAnswer] | Registry | None = None,
    on_sleep: OnSleep | None = None,
    store: InMemoryDurableStore | None = None,
    job_id: uuid.UUID | None = None,
    max_attempts: int | None = None,
    policy: RetryPolicy | None = None,
) -> DurableVerdict:
    """``run_durable`` in a running event loop."""
    registry, name, payload = target_of(target, args, "run_durable")
    store = store or InMemoryDurableStore()
    store.children.update(_answers(children))
    limit = max_attempts or registry.max_attempts_for(name, DEFAULT_MAX_ATTEMPTS)
    job = store.add_job(name, as_stored(payload), job_id=job_id, max_attempts=limit)
    life = _Life(store, job, _schedule(store, signals), on_sleep, policy or RetryPolicy())
    return await life.run(registry, payload)


class _Life:
    """One job's attempts until it ends or waits for nothing to come."""

    def __init__(
        self,
        store: InMemoryDurableStore,
        job: StoredJob,
        schedule: list[tuple[datetime, Signal]],
        on_sleep: OnSleep | None,
        policy: RetryPolicy,
    ) -> None:
        self.store, self.job, self.schedule = store, job, schedule
        self.on_sleep, self.policy = on_sleep, policy

    async def run(self, registry: Registry, payload: Any) -> DurableVerdict:
        job_type = registry.get(self.job.type)
        verdicts: list[Verdict] = []
        for _ in range(MAX_RUNS):
            if not self._until_due():
                return DurableVerdict(self.job.id, self.store, tuple(verdicts))
            fence = self.store.claim(self.job.id)
            context = with_durable(
                make_context(
                    self.job.type,
                    attempt=fence.attempt,
                    max_attempts=self.job.max_attempts,
                    job_id=self.job.id,
                ),
                self.store,
                fence,
            )
            verdict = await run_attempt(registry, job_type, payload, context, self.policy, None)
            verdicts.append(verdict)
            self._settle(verdict)
            await run_children(self.store, self.policy)
        raise RuntimeError(f"job {self.job.id} ran {MAX_RUNS} attempts without ending")

    def _settle(self, verdict: Verdict) -> None:
        """Store the attempt's outcome as the consumer's finish does; a retry's delay passes at
        once on the clock."""
        durable = verdict.context.durable
        assert durable is not None
        match verdict.outcome:
            case Succeeded(result=result):
                self.store.finish(durable.fence, JobState.SUCCEEDED, result=as_stored(result))
            case RetryLater(delay_seconds=delay):
                self.store.finish(durable.fence, JobState.RETRYING)
                self.store.clock.advance(delay)
            case Quarantine(reason_code=code):
                self.store.finish(durable.fence, JobState.QUARANTINED, error_code=code)
        if verdict.sleeping and self.on_sleep is not None:
            self.on_sleep(SleepingJob(self.job.id, self.store, self.job.sleeps[-1]))

    def _until_due(self) -> bool:
        """Move the clock to the job's next due time, sending the scheduled signals met on the
        way: True when it is due, False when it has ended or waits for nothing to come."""
        while True:
            self._send_due_signals()
            if self.job.state in (JobState.QUEUED, JobState.RETRYING):
                return True
            if self.job.state is not JobState.SLEEPING:
                return False  # finished, or running under a lease another attempt took
            wake_at = self.job.wake_at
            if wake_at is not None and wake_at <= self.store.clock.now():
                return True
            moments = [moment for moment, _ in self.schedule[:1]]
            moments += [wake_at] if wake_at is not None else []
            if not moments:
                return False
            self.store.clock.move_to(min(moments))

    def _send_due_signals(self) -> None:
        while self.schedule and self.schedule[0][0] <= self.store.clock.now():
            _, signal = self.schedule.pop(0)
            self.store.send_signal(
                self.job.id, signal.name, signal.value, idempotency_key=signal.idempotency_key
            )


async def run_children(store: InMemoryDurableStore, policy: RetryPolicy) -> None:
    """Answer the children the test answers with a value, and run those it answers with a
    handler (each a life of its own on the same store and clock)."""
    for child in store.answer_children():
        answer = store.children[child.type]
        registry = answer.registry if isinstance(answer, JobDefinition) else answer
        if child.attempts == 0 and "max_attempts" not in child.options:  # the type's limit
            child.max_attempts = registry.max_attempts_for(child.type, DEFAULT_MAX_ATTEMPTS)
        life = _Life(store, child, [], None, policy)
        await life.run(registry, child.payload)


def _answers(children: Mapping[str, ChildAnswer] | Registry | None) -> dict[str, ChildAnswer]:
    if children is None:
        return {}
    if isinstance(children, Registry):
        return {job_type.name: children for job_type in children}
    return dict(children)


def _schedule(
    store: InMemoryDurableStore, signals: Mapping[str, Any] | Sequence[Signal] | None
) -> list[tuple[datetime, Signal]]:
    """The signals by the time they are sent, from the life's start."""
    if signals is None:
        return []
    if isinstance(signals, Mapping):
        listed = [Signal(name, value) for name, value in signals.items()]
    else:
        listed = list(signals)
    for signal in listed:
        if not isinstance(signal, Signal):
            raise TypeError(f"signals= is a dict of values or a list of Signal, not {signal!r}")
    start = store.clock.now()
    timed = [(start + timedelta(seconds=signal.after), signal) for signal in listed]
    return sorted(timed, key=lambda pair: pair[0])
