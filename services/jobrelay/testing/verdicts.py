"""``run_job`` / ``run_job_async``: one attempt of a handler run as a consumer runs it, and its
``Verdict``, decided by the consumer's own code (``consumer/handler_call.py``,
``core/jobs.py::decide_outcome``; docs/testing-handlers.md). A handler's durable calls
(``context.step``, ``sleep``, ...) are recorded in an ``InMemoryDurableStore``: an attempt that
goes to sleep is the verdict ``Slept`` (``run_durable`` runs the job's whole life)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, overload

from pydantic import BaseModel

from jobrelay.consumer.handler_call import HandlerRun, call_handler, refusal_failure
from jobrelay.core.bounds import DEFAULT_MAX_ATTEMPTS
from jobrelay.core.durable import DurableInterrupt, DurableRun, Fence, StepRecord, Suspended
from jobrelay.core.errors import InvalidPayload, PermanentError
from jobrelay.core.failures import Failure
from jobrelay.core.fingerprint import canonical_json
from jobrelay.core.jobs import Outcome, Quarantine, RetryLater, Succeeded, decide_outcome
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.masking import Masker
from jobrelay.core.registry import JobContext, JobDefinition, JobType, Registry, payload_document
from jobrelay.core.retry import RetryPolicy
from jobrelay.core.states import JobState
from jobrelay.testing.contexts import Progress, claimed_run, make_context
from jobrelay.testing.durable import InMemoryDurableStore

Target = Registry | JobDefinition[Any, Any, Any]


@dataclass(frozen=True)
class Slept:
    """The attempt ended asleep (``context.sleep``, or a signal or child not there yet): the
    job is ``sleeping`` until ``wake_at`` (None: until its signal or child comes), waiting for
    ``waiting_for`` (``{"signal": name}``, ``{"child": id}``, or None for a plain sleep)."""

    wake_at: datetime | None
    waiting_for: Mapping[str, str] | None


@dataclass(frozen=True)
class LostLease:
    """A durable call found the attempt's lease gone (``LeaseGone``): nothing was recorded, and
    the consumer stops and puts the job back (``queued``)."""


KitOutcome = Outcome | Slept | LostLease


@dataclass(frozen=True)
class Verdict:
    """What one attempt came to, as the consumer decides and stores it.

    ``outcome`` is the consumer's own value (``core/jobs.py``): ``Succeeded``, ``RetryLater`` or
    ``Quarantine``. ``state`` is the job's state after it (``succeeded``, ``retrying``,
    ``quarantined``); ``error_code`` and ``message`` what ``GET /v1/jobs/{id}`` would show as
    ``last_error_code`` and ``last_error`` (``invalid_payload``, ``timeout``, ``invalid_result``,
    ``unexpected_error``, ``attempts_exhausted``, or the handler's own code); ``retry_delay`` the
    seconds before the next attempt; ``failure`` what operators see (class, message, traceback);
    ``exception`` the exception itself (None when the handler did not raise)."""

    outcome: KitOutcome
    context: JobContext
    exception: BaseException | None = None
    seconds: float = 0.0

    @property
    def state(self) -> JobState:
        match self.outcome:
            case Succeeded():
                return JobState.SUCCEEDED
            case RetryLater():
                return JobState.RETRYING
            case Slept():
                return JobState.SLEEPING
            case LostLease():
                return JobState.QUEUED
        return JobState.QUARANTINED

    @property
    def succeeded(self) -> bool:
        return isinstance(self.outcome, Succeeded)

    @property
    def retrying(self) -> bool:
        return isinstance(self.outcome, RetryLater)

    @property
    def quarantined(self) -> bool:
        return isinstance(self.outcome, Quarantine)

    @property
    def sleeping(self) -> bool:
        return isinstance(self.outcome, Slept)

    @property
    def wake_at(self) -> datetime | None:
        return self.outcome.wake_at if isinstance(self.outcome, Slept) else None

    @property
    def waiting_for(self) -> dict[str, str] | None:
        """``{"signal": name}`` or ``{"child": id}`` while asleep for one, as the job view says."""
        if isinstance(self.outcome, Slept) and self.outcome.waiting_for is not None:
            return dict(self.outcome.waiting_for)
        return None

    @property
    def steps(self) -> dict[str, StepRecord]:
        """Every record the job holds by the end of the attempt, by name: its steps, and its
        sleeps, signal waits and children too when the kit's store keeps them."""
        durable = self.context.durable
        if durable is None:
            return {}
        if isinstance(durable.store, InMemoryDurableStore):
            return durable.store.records(durable.fence.job_id)
        return dict(durable.records)

    @property
    def result(self) -> dict[str, Any] | None:
        return self.outcome.result if isinstance(self.outcome, Succeeded) else None

    @property
    def error_code(self) -> str | None:
        match self.outcome:
            case RetryLater(error_code=code) | Quarantine(reason_code=code):
                return code
        return None

    @property
    def message(self) -> str | None:
        match self.outcome:
            case RetryLater(error=message) | Quarantine(error=message):
                return message
        return None

    @property
    def retry_delay(self) -> float | None:
        return self.outcome.delay_seconds if isinstance(self.outcome, RetryLater) else None

    @property
    def failure(self) -> Failure | None:
        match self.outcome:
            case RetryLater(failure=failure) | Quarantine(failure=failure):
                return failure
        return None

    @property
    def progress(self) -> list[Progress]:
        """The progress the handler reported, in order (kept by a ``make_context`` context)."""
        return list(getattr(self.context, "reports", ()))


@overload
def run_job(
    target: JobDefinition[Any, Any, Any],
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


@overload
def run_job(
    target: Registry,
    job_type: str,
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


def run_job(
    target: Target,
    *args: Any,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict:
    """Run one attempt of a job as a consumer would and return its ``Verdict``:
    ``run_job(charge, payload)`` for a definition, ``run_job(registry, "shop.charge", payload)``
    for a type of a registry. For synchronous tests; in async code ``await run_job_async``.

    ``payload`` (a model or a dict) goes through JSON, as a stored payload does, and is checked
    against the type's model: one that does not match is quarantined with ``invalid_payload``,
    the handler not run. ``attempt`` (by default 1) of ``max_attempts`` (by default the type's,
    else 3) decides between a retry and ``attempts_exhausted``; ``context``: the one to run in
    (by default ``make_context``'s; its attempt and limit count when the others are not given).
    ``policy``: the retry policy (by default the consumer's defaults, ``JOBRELAY_RETRY_*``);
    ``rng``: its jitter's random numbers."""
    outside_a_loop("run_job", "run_job_async")
    return asyncio.run(
        _run(target, args, attempt, max_attempts, context, policy or RetryPolicy(), rng)
    )


@overload
async def run_job_async(
    target: JobDefinition[Any, Any, Any],
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


@overload
async def run_job_async(
    target: Registry,
    job_type: str,
    payload: BaseModel | dict[str, Any],
    /,
    *,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict: ...


async def run_job_async(
    target: Target,
    *args: Any,
    attempt: int | None = None,
    max_attempts: int | None = None,
    context: JobContext | None = None,
    policy: RetryPolicy | None = None,
    rng: random.Random | None = None,
) -> Verdict:
    """``run_job`` in a running event loop."""
    return await _run(target, args, attempt, max_attempts, context, policy or RetryPolicy(), rng)


async def _run(
    target: Target,
    args: tuple[Any, ...],
    attempt: int | None,
    max_attempts: int | None,
    context: JobContext | None,
    policy: RetryPolicy,
    rng: random.Random | None,
) -> Verdict:
    """Decide, as ``consumer/worker.py::Worker._attempt`` does: resolve the type and the
    payload (refused: quarantined), call the handler, decide the outcome."""
    registry, name, payload = target_of(target, args)
    job_type = registry.get(name)  # UnknownJobType: a test's mistake, not a verdict
    given = context
    context = attempt_context(job_type, registry, context, attempt, max_attempts)
    if given is None:  # a context of its own records its durable calls in a fresh store
        context = first_claim(context, InMemoryDurableStore())
    elif context.durable is not None and context.loop is None and job_type.runs_in_thread:
        context = dataclasses.replace(context, loop=asyncio.get_running_loop())
    return await run_attempt(registry, job_type, payload, context, policy, rng)


def first_claim(context: JobContext, store: InMemoryDurableStore) -> JobContext:
    """``context`` with its durable calls recorded in ``store``, which holds the job claimed for
    the context's attempt (attempts before it used, none recorded)."""
    run = claimed_run(
        store, context.job_type, context.job_id, context.attempt, context.max_attempts
    )
    return dataclasses.replace(context, durable=run, loop=asyncio.get_running_loop())


def with_durable(context: JobContext, store: InMemoryDurableStore, fence: Fence) -> JobContext:
    """``context`` whose durable calls go to ``store`` under ``fence``, the records of the
    job's earlier attempts found at the claim, as the consumer's context has them."""
    run = DurableRun(store, fence, store.records(fence.job_id), now=store.clock.now())
    return dataclasses.replace(context, durable=run, loop=asyncio.get_running_loop())


async def run_attempt(
    registry: Registry,
    job_type: JobType,
    payload: Any,
    context: JobContext,
    policy: RetryPolicy,
    rng: random.Random | None,
) -> Verdict:
    """One attempt in ``context``: the payload checked, the handler called, the outcome decided
    (or the attempt's durable end: ``Slept``, ``LostLease``)."""
    mask = Masker()
    model = checked_payload(registry, job_type, payload, context, mask)
    if isinstance(model, Verdict):
        return model
    try:
        run = await call_handler(job_type, context, model)
    except DurableInterrupt as interrupt:
        return _interrupted(interrupt, context)
    if isinstance(run.error, DurableInterrupt):
        return _interrupted(run.error, context)
    return decided(run, context, policy, rng, mask)


def checked_payload(
    registry: Registry,
    job_type: JobType,
    payload: Any,
    context: JobContext,
    mask: Masker,
) -> BaseModel | Verdict:
    """The payload as its handler gets it, or the verdict of a job the consumer refuses to
    run: quarantined, its payload not its type's (``invalid_payload``) or its type without a
    handler (``no_handler``)."""
    name = job_type.name
    try:
        if job_type.handler is None:
            raise PermanentError(f"no handler for job type {name[:100]!r}", code="no_handler")
        return registry.validate_payload(name, as_stored(payload))
    except (InvalidPayload, PermanentError) as refused:
        failure = refusal_failure(refused, mask)
        return Verdict(Quarantine(refused.code, failure.message, failure), context)


def decided(
    run: HandlerRun,
    context: JobContext,
    policy: RetryPolicy,
    rng: random.Random | None,
    mask: Masker,
) -> Verdict:
    """The verdict of a handler's run, decided by the consumer's own ``decide_outcome``."""
    outcome = decide_outcome(
        attempt=context.attempt,
        max_attempts=context.max_attempts,
        result=run.result,
        error=run.error,
        policy=policy,
        rng=rng,
        mask=mask,
    )
    return Verdict(outcome, context, run.error, run.seconds)


def _interrupted(interrupt: DurableInterrupt, context: JobContext) -> Verdict:
    """The verdict of an attempt a durable call ended: asleep, or its lease gone."""
    if isinstance(interrupt, Suspended):
        return Verdict(Slept(interrupt.wake_at, interrupt.waiting_for), context, interrupt)
    return Verdict(LostLease(), context, interrupt)


def target_of(
    target: Target, args: tuple[Any, ...], caller: str = "run_job"
) -> tuple[Registry, str, Any]:
    """The registry, the type's name and the payload ``caller(...)`` was given."""
    if isinstance(target, JobDefinition):
        if len(args) != 1:
            raise TypeError(f"{caller}(definition, payload): one payload after the definition")
        return target.registry, target.name, args[0]
    if isinstance(target, Registry):
        if len(args) != 2 or not isinstance(args[0], str):
            raise TypeError(
                f"{caller}(registry, type_name, payload): a type's name, then a payload"
            )
        return target, args[0], args[1]
    raise TypeError(f"{caller} runs a JobDefinition or a Registry's type, not {target!r}")


def attempt_context(
    job_type: JobType,
    registry: Registry,
    context: JobContext | None,
    attempt: int | None,
    max_attempts: int | None,
) -> JobContext:
    """The context to run in, its attempt and limit the ones the outcome is decided by."""
    if context is None:
        limit = registry.max_attempts_for(job_type.name, DEFAULT_MAX_ATTEMPTS)
        return make_context(
            job_type.name,
            attempt=attempt if attempt is not None else 1,
            max_attempts=max_attempts if max_attempts is not None else limit,
        )
    for option, asked, known in (
        ("attempt", attempt, context.attempt),
        ("max_attempts", max_attempts, context.max_attempts),
    ):
        if asked is not None and asked != known:
            raise ValueError(f"{option}={asked} but the context's is {known}: give one of them")
    return context


def as_stored(payload: Any) -> Any:
    """The payload as the consumer reads it back from jsonb: a model as its JSON, a dict
    through JSON; ``TypeError`` or ``ValueError`` for one that no enqueue would take."""
    if isinstance(payload, BaseModel):
        payload = payload_document(payload)
    try:
        document = json.loads(canonical_json(payload))
    except (TypeError, ValueError) as error:
        raise TypeError(f"payload is not JSON: {error}") from None
    problem = unstorable_json(payload)
    if problem is not None:
        raise ValueError(f"payload cannot be stored: {problem}")
    return document


def outside_a_loop(name: str, instead: str) -> None:
    """``asyncio.run`` cannot start inside a running loop: say what to call there instead."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise RuntimeError(f"{name} is for synchronous tests; in async code await {instead}")
