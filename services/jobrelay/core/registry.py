"""The registry of job types: name, payload schema, handler, attempt limit, timeout.

The API uses it to validate submissions; the consumer uses it to run handlers. A user's own
registries are loaded with ``--handlers module:registry`` or JOBRELAY_HANDLERS
(``jobrelay.handlers.loading``). A handler is an ``async def`` or a plain ``def``; the consumer
runs a plain one in a new daemon thread of its own for each call, no pool
(``consumer/handler_call.py``): at most ``JOBRELAY_CONSUMER_CONCURRENCY`` of them wait on
handlers at once, and one a timeout, a lost lease or a shutdown gave up on runs on to its end.

``@registry.job(...)`` returns a ``JobDefinition``: the handler still, callable as before, that
also enqueues jobs of its type (``charge.enqueue(Charge(...))``). The core sends nothing
itself: a definition hands its checked request to the ``Enqueuer`` port, which
``jobrelay.configure`` installs (``jobrelay/configuration.py``: a ``jobrelay.Client``, or the
caller's transaction through ``jobrelay.enqueue``) and ``jobrelay.testing.Recorder`` stands in
for.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Generic, ParamSpec, Protocol, TypeVar, Unpack, cast

from pydantic import BaseModel, ValidationError

from jobrelay.core.batches import Batching, batching_of
from jobrelay.core.bounds import FLOW_KEY_MAX, IDEMPOTENCY_KEY_MAX
from jobrelay.core.durable import DurableRun, blocking
from jobrelay.core.errors import ConfigurationError, InvalidPayload, UnknownJobType
from jobrelay.core.flow import Limit, Rate, Throttle, check_priority, parse_rate, parse_throttle
from jobrelay.core.jobs import (
    Flow,
    PolicyOptions,
    is_policy_seconds,
    is_valid_flow_key,
    is_valid_idempotency_key,
)
from jobrelay.core.schedules import Schedule, check_every


@dataclass(frozen=True)
class JobContext:
    """What a handler knows about the attempt it runs in."""

    job_id: uuid.UUID
    job_type: str
    attempt: int
    max_attempts: int
    results_dir: Path
    logger: logging.LoggerAdapter[logging.Logger]
    parent_results: Mapping[str, Any] = field(default_factory=dict)
    """In a workflow (docs/workflows.md): the results of the jobs this one waits for, by ref."""

    progress_sink: ProgressSink | None = field(default=None, repr=False, compare=False)

    durable: DurableRun | None = field(default=None, repr=False, compare=False)
    """Its steps, sleeps, signals and children (docs/durable-execution.md), recorded by the
    consumer's store or the testing kit's; None: the context of a tool that runs no job."""

    loop: asyncio.AbstractEventLoop | None = field(default=None, repr=False, compare=False)
    """The event loop ``durable`` runs on: a plain ``def`` handler's calls wait for it there."""

    @property
    def idempotency_key(self) -> str:
        """Stable across attempts: pass it to external systems so a retry is not a second effect."""
        return f"jobrelay:{self.job_id}"

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report how far the attempt is (0 to 1) and what it is at. A plain call that never
        blocks, from an async or a plain handler: the consumer writes the latest report a few
        times a second at most, however often it is called (consumer/progress.py)."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            raise TypeError(f"fraction is a number from 0 to 1, not {type(fraction).__name__}")
        if not 0 <= fraction <= 1:  # NaN fails this too
            raise ValueError(f"fraction is from 0 to 1, not {fraction!r}")
        if message is not None and not isinstance(message, str):
            raise TypeError(f"message is a text, not {type(message).__name__}")
        if self.progress_sink is not None:
            self.progress_sink(
                float(fraction), None if message is None else message[:PROGRESS_MESSAGE_MAX]
            )

    # --- durable execution (docs/durable-execution.md) ---------------------------------------
    # In an ``async def`` handler each call returns an awaitable; in a plain ``def`` handler
    # (run in a thread of its own) it returns the value itself, having waited for the store.

    def step(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job and record its value (JSON) under
        ``name``: every later attempt gets the recorded value back without running ``fn``."""
        run = self._durable()
        if _on_event_loop():
            return run.step(name, fn, *args, **kwargs)
        recorded = run.begin_step(name)
        if recorded is not None:
            return recorded.value
        value = fn(*args, **kwargs)
        if inspect.iscoroutine(value):  # an ``async def`` fn: awaited on the loop, as it would be
            value = self._wait(value)
        return self._wait(run.finish_step(name, value))

    def sleep(
        self,
        seconds: float | None = None,
        *,
        until: datetime | None = None,
        name: str | None = None,
    ) -> Any:
        """End this attempt and sleep (``sleeping``: no lease, no slot, no message) for
        ``seconds`` or until ``until``; the handler runs again from the top when it wakes, and
        this call returns then. The wake time is recorded once."""
        return self._call(self._durable().sleep(seconds, until=until, name=name))

    def wait_for_signal(
        self, signal: str, *, timeout: float | None = None, name: str | None = None
    ) -> Any:
        """The value of the signal ``signal`` sent to this job (``POST /v1/jobs/{id}/signals/
        {signal}``), sleeping until it comes; ``SignalTimeout`` after ``timeout`` seconds."""
        return self._call(self._durable().wait_for_signal(signal, timeout=timeout, name=name))

    def run_child(
        self, job_type: str, payload: Any, *, key: str | None = None, **options: Any
    ) -> Any:
        """Submit a child job (once: its key defaults to ``<job id>:<step name>``) and sleep
        until it finishes: its result, or ``ChildFailed``."""
        return self._call(self._durable().run_child(job_type, payload, key=key, **options))

    def start_child(
        self, job_type: str, payload: Any, *, key: str | None = None, **options: Any
    ) -> Any:
        """Submit a child job (once) without waiting for it: its id."""
        return self._call(self._durable().start_child(job_type, payload, key=key, **options))

    def _durable(self) -> DurableRun:
        if self.durable is None:
            raise RuntimeError(
                "durable calls need a store: a consumer's (Worker(durable=...)) "
                "or the testing kit's"
            )
        return self.durable

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        if _on_event_loop():
            return coroutine
        return self._wait(coroutine)

    def _wait(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        if self.loop is None:
            coroutine.close()
            raise RuntimeError("a plain handler's durable calls need the consumer's event loop")
        return blocking(coroutine, self.loop)


def _on_event_loop() -> bool:
    """Called from an ``async def`` handler (on the loop), or from a plain one's thread?"""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# Where a context's progress reports go: the consumer's reporter (consumer/progress.py).
ProgressSink = Callable[[float, str | None], None]
# A progress message is cut to this many characters.
PROGRESS_MESSAGE_MAX = 500

AsyncHandler = Callable[[JobContext, Any], Awaitable[dict[str, Any]]]
SyncHandler = Callable[[JobContext, Any], dict[str, Any]]
Handler = AsyncHandler | SyncHandler
P = TypeVar("P", bound=BaseModel)  # a type's payload model
Params = ParamSpec("Params")  # the handler's parameters, kept by its definition
Ret = TypeVar("Ret")  # what the handler returns (a coroutine for an ``async def``)
# A type's concurrency_key= or unique=: the key of a submission, from its payload.
KeyFunction = Callable[[Any], str]


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An ``async def`` (or an object whose ``__call__`` is one, or the definition of one)."""
    if isinstance(handler, JobDefinition):
        handler = handler.handler
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - the method itself, not callable()
    )


@dataclass(frozen=True)
class JobType:
    name: str
    payload_model: type[BaseModel]
    handler: Handler | None = None
    max_attempts: int | None = None  # None: the JOBRELAY_MAX_ATTEMPTS default
    timeout_seconds: float = 300.0
    description: str = ""
    # Flow control (docs/flow-control.md): a submission's priority when it names none; the
    # type's limit (None: none); the functions that give a submission without its own
    # concurrency key or unique key one from its payload (the validated payload model, as
    # the handler gets it).
    priority: int = 0
    limit: Limit | None = None
    concurrency_key: KeyFunction | None = None
    unique: KeyFunction | None = None
    # Order and submission policies (docs/flow-control.md): the function that gives a
    # submission without its own sequence key one; the window of its unique key (seconds);
    # its throttle, and the function that gives a submission without its own throttle key one.
    sequence: KeyFunction | None = None
    unique_for: float | None = None
    throttle: Throttle | None = None
    throttle_key: KeyFunction | None = None
    # A batch handler's (``BatchContext``, a list of payloads): how its consumer gathers jobs.
    batch: Batching | None = None
    # False: closed to HTTP by default (a Django task, or declared ``api=False``): enqueued
    # from code, and over HTTP only by a client whose type patterns name it (docs/job-types.md).
    api: bool = True

    @property
    def runs_in_thread(self) -> bool:
        """A plain ``def`` handler: run in a thread so it cannot block the event loop."""
        return self.handler is not None and not is_async_handler(self.handler)


def payload_document(model: BaseModel) -> dict[str, Any]:
    """A payload model as the JSON a job stores: by its fields' aliases, which is what the
    model validates again on the consumer (``Field(alias="orderId")`` is ``orderId``)."""
    return model.model_dump(mode="json", by_alias=True)


def safe_validation_errors(error: ValidationError) -> list[dict[str, Any]]:
    """Pydantic's errors without the offending input, which may hold secrets."""
    return [
        {"loc": [str(part) for part in item["loc"]], "msg": item["msg"], "type": item["type"]}
        for item in error.errors(include_input=False, include_url=False)
    ]


def _per_key_by_default(
    owner: str, concurrency: int | None, rate: Rate | None, concurrency_key: KeyFunction | None
) -> bool:
    """``per_key`` when it is not said: a concurrency is per key exactly when a
    ``concurrency_key`` is given, a rate is over the whole type. A type's limit counts both one
    way (``core/flow.py::Limit``), so a type with all three must say which it means."""
    if concurrency_key is None:
        return False
    if rate is None:
        return concurrency is not None
    if concurrency is None:
        return False  # the rate over the whole type; the key serves a runtime limit
    raise ValueError(
        f"{owner}: a concurrency per key and a rate over the whole type cannot share one type: "
        "say per_key=True (both per key) or per_key=False (both over the type)"
    )


def flow_options(
    name: str,
    *,
    priority: int = 0,
    concurrency: int | None = None,
    concurrency_key: KeyFunction | None = None,
    rate: str | None = None,
    per_key: bool | None = None,
    unique: KeyFunction | None = None,
    sequence: KeyFunction | None = None,
    unique_for: float | None = None,
    throttle: str | None = None,
    throttle_key: KeyFunction | None = None,
) -> dict[str, Any]:
    """The flow-control fields of JobType ``name`` from ``registry.job``'s options, checked."""
    owner = f"job type {name!r}"
    try:
        check_priority(priority)
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None
    if concurrency is not None and (
        isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
    ):
        raise ValueError(f"{owner}: concurrency must be a whole number of at least 1")
    functions = (
        ("concurrency_key", concurrency_key),
        ("unique", unique),
        ("sequence", sequence),
        ("throttle_key", throttle_key),
    )
    for option, function in functions:
        if function is not None and not callable(function):
            raise ValueError(f"{owner}: {option} must be a function of the payload")
    if rate is not None and not isinstance(rate, str):
        raise ValueError(f"{owner}: rate must be a text such as '10/s', not {rate!r}")
    try:
        parsed_rate = parse_rate(rate) if rate is not None else None
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None
    limit = None
    if concurrency is not None or parsed_rate is not None:
        if per_key is None:
            per_key = _per_key_by_default(owner, concurrency, parsed_rate, concurrency_key)
        limit = Limit(concurrency=concurrency, rate=parsed_rate, per_key=per_key)
    elif per_key:
        raise ValueError(f"{owner}: per_key needs a concurrency or a rate to apply to")
    return {
        "priority": priority,
        "limit": limit,
        "concurrency_key": concurrency_key,
        "unique": unique,
        "sequence": sequence,
        **_policy_options(owner, unique, unique_for, throttle, throttle_key),
    }


def _policy_options(
    owner: str,
    unique: KeyFunction | None,
    unique_for: float | None,
    throttle: str | None,
    throttle_key: KeyFunction | None,
) -> dict[str, Any]:
    """The window and the throttle of a type, checked (``flow_options``)."""
    if unique_for is not None:
        if not is_policy_seconds(unique_for):
            raise ValueError(f"{owner}: unique_for is a number of seconds above 0, at most a year")
        if unique is None:
            raise ValueError(f"{owner}: unique_for needs unique= (the key it keeps unique)")
    if throttle is not None and not isinstance(throttle, str):
        raise ValueError(f"{owner}: throttle must be a text such as '5/s', not {throttle!r}")
    try:
        parsed = parse_throttle(throttle) if throttle is not None else None
    except ValueError as error:
        raise ValueError(f"{owner}: {error}") from None
    if throttle_key is not None and parsed is None:
        raise ValueError(f"{owner}: throttle_key needs a throttle to count under it")
    return {"unique_for": unique_for, "throttle": parsed, "throttle_key": throttle_key}


@dataclass
class Registry:
    types: dict[str, JobType] = field(default_factory=dict)
    schedules: dict[str, Schedule] = field(default_factory=dict)

    def register(self, job_type: JobType) -> JobType:
        if job_type.name in self.types:
            raise ValueError(f"job type {job_type.name!r} is registered twice")
        self.types[job_type.name] = job_type
        return job_type

    def job(
        self,
        name: str,
        payload_model: type[P],
        *,
        max_attempts: int | None = None,
        timeout_seconds: float = 300.0,
        priority: int = 0,
        concurrency: int | None = None,
        concurrency_key: KeyFunction | None = None,
        rate: str | None = None,
        per_key: bool | None = None,
        unique: KeyFunction | None = None,
        sequence: KeyFunction | None = None,
        unique_for: float | None = None,
        throttle: str | None = None,
        throttle_key: KeyFunction | None = None,
        batch_size: int | None = None,
        batch_wait: float = 1.0,
        batch_key: KeyFunction | None = None,
        api: bool = True,
    ) -> Callable[[Callable[Params, Ret]], JobDefinition[P, Params, Ret]]:
        """Decorator form: ``@registry.job("x.y", Payload)`` above an ``async def`` or a plain
        ``def`` handler ``(context, payload) -> dict``. It gives the handler's
        ``JobDefinition``: called, it is the handler; it also enqueues jobs of the type.

        Flow control (docs/flow-control.md): ``priority`` (-100..100) is its submissions'
        default; at most ``concurrency`` run at once and ``rate`` (``"10/s"``, ``"600/m"``)
        start, per concurrency key when ``per_key`` (by default: a concurrency when
        ``concurrency_key`` is given, a rate never), over the type otherwise;
        ``concurrency_key`` and ``unique`` give a submission without its own key one from its
        payload (the validated model). Order and submission policies: ``sequence`` gives a
        submission's sequence key, ``unique_for`` (seconds) keeps ``unique``'s key unique
        against jobs that ended that recently, ``throttle`` (``"5/s"``, ``"100/m"``,
        ``"1000/h"``) refuses submissions over it, per ``throttle_key`` when given.
        ``batch_size``: the handler takes a ``BatchContext`` and a list of up to that many
        payloads, gathered for up to ``batch_wait`` seconds, of one ``batch_key`` value when
        given (docs/flow-control.md, "Batch handlers"). ``api=False``: clients submit the type
        over HTTP only when their type patterns name it (code enqueues it as any other). A bad
        value is a ``ValueError`` naming the type."""
        if not isinstance(api, bool):
            raise ValueError(f"job type {name!r}: api must be True or False, not {api!r}")
        flow = flow_options(
            name,
            priority=priority,
            concurrency=concurrency,
            concurrency_key=concurrency_key,
            rate=rate,
            per_key=per_key,
            unique=unique,
            sequence=sequence,
            unique_for=unique_for,
            throttle=throttle,
            throttle_key=throttle_key,
        )
        batch = batching_of(name, batch_size, batch_wait, batch_key)

        def decorate(handler: Callable[Params, Ret]) -> JobDefinition[P, Params, Ret]:
            if not callable(handler):
                raise TypeError(f"the handler of job type {name!r} is not callable")
            self.register(
                JobType(
                    name=name,
                    payload_model=payload_model,
                    # Any callable, as before: the consumer calls it with (context, payload).
                    handler=cast(Handler, handler),
                    max_attempts=max_attempts,
                    timeout_seconds=timeout_seconds,
                    description=(handler.__doc__ or "").strip().split("\n")[0],
                    api=api,
                    batch=batch,
                    **flow,
                )
            )
            return JobDefinition(self, name, payload_model, handler)

        return decorate

    def schedule(
        self,
        name: str,
        *,
        type: str,
        payload: BaseModel | dict[str, Any] | None = None,
        every: int | timedelta | None = None,
        cron: str | None = None,
        max_attempts: int | None = None,
        priority: int | None = None,
    ) -> Schedule:
        """A periodic job (``jobrelay.core.schedules``): one job of ``type`` with ``payload``
        every ``every`` seconds (ticks aligned on the Unix epoch) or at each minute the
        five-field ``cron`` expression names, in UTC. ``type`` must be registered in this
        registry already, and ``payload`` (a dict or the type's model) must match its schema.
        ``priority`` (-100 to 100): its jobs' priority; by default the type's.
        Every mistake is a ``ValueError`` naming the schedule."""
        if isinstance(payload, BaseModel):
            payload = payload_document(payload)
        if isinstance(every, timedelta):
            try:
                every = check_every(every)
            except ValueError as error:
                raise ValueError(f"schedule {name!r}: {error}") from None
        scheduled = Schedule(
            name,
            type,
            payload if payload is not None else {},
            every=every,
            cron=cron,
            max_attempts=max_attempts,
            priority=priority,
        )
        job_type = self.types.get(type)
        if job_type is None:
            raise ValueError(
                f"schedule {name!r}: unknown job type {type!r} (register it in this registry "
                "before the schedule)"
            )
        try:
            job_type.payload_model.model_validate(scheduled.payload)
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(item['loc']) or 'payload'}: {item['msg']}"
                for item in safe_validation_errors(error)
            )
            raise ValueError(
                f"schedule {name!r}: the payload does not match the schema of {type!r}: {problems}"
            ) from None
        return self.add_schedule(scheduled)

    def add_schedule(self, schedule: Schedule) -> Schedule:
        if schedule.name in self.schedules:
            raise ValueError(f"schedule {schedule.name!r} is declared twice")
        self.schedules[schedule.name] = schedule
        return schedule

    def get(self, name: str) -> JobType:
        try:
            return self.types[name]
        except KeyError:
            raise UnknownJobType(f"unknown job type {name[:100]!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self.types

    def __iter__(self) -> Iterator[JobType]:
        return iter(self.types.values())

    def validate_payload(self, name: str, payload: Any) -> BaseModel:
        job_type = self.get(name)
        try:
            return job_type.payload_model.model_validate(payload)
        except ValidationError as error:
            raise InvalidPayload(
                f"payload does not match the schema of {name!r}",
                errors=safe_validation_errors(error),
            ) from None

    def flow_defaults(self, name: str, payload: BaseModel, asked: Flow) -> Flow:
        """What type ``name`` gives a submission of ``payload`` (validated) beside what it
        ``asked``: the type's priority and window, and each key it did not give from the type's
        function of the payload. ``InvalidPayload`` when such a function fails on the payload
        or gives no fit key: the submission cannot be keyed."""
        job_type = self.get(name)
        keys = {}
        for option, function, given in (
            ("concurrency_key", job_type.concurrency_key, asked.concurrency_key),
            ("unique", job_type.unique, asked.unique_key),
            ("sequence", job_type.sequence, asked.sequence_key),
            ("throttle_key", job_type.throttle_key, asked.throttle_key),
        ):
            if function is not None and given is None:
                keys[option] = _key_of(name, option, function, payload)
        # A priority of 0 is every job's anyway: left None, a request of a type without flow
        # options is the same value as one built without a registry.
        priority = job_type.priority or None
        return Flow(
            priority,
            keys.get("concurrency_key"),
            keys.get("unique"),
            sequence_key=keys.get("sequence"),
            unique_for_seconds=job_type.unique_for,
            throttle_key=keys.get("throttle_key"),
        )

    def throttle_for(self, name: str) -> Throttle | None:
        """Type ``name``'s throttle (``@registry.job(..., throttle=)``); None: none."""
        return self.get(name).throttle

    def largest_batch(self, names: Iterable[str]) -> int:
        """The largest ``batch_size`` of the batch types among ``names``; 0 without any."""
        sizes = (self.types[name].batch for name in names)
        return max((batch.size for batch in sizes if batch is not None), default=0)

    def limits(self) -> dict[str, Limit]:
        """The limits its types declare (``@registry.job(..., concurrency=, rate=)``)."""
        return {t.name: t.limit for t in self.types.values() if t.limit is not None}

    def max_attempts_for(self, name: str, default: int) -> int:
        limit = self.get(name).max_attempts
        return limit if limit is not None else default


# --- enqueue from the handler: the definition and its port ----------------------------------


class EnqueuedJob(Protocol):
    """What an enqueue answers, whichever way it went: ``jobrelay.Job`` (the API's view)
    through a client, ``jobrelay.core.jobs.Job`` inside the caller's transaction,
    ``jobrelay.testing.RecordedJob`` under the recorder. Each has at least these fields."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def type(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def idempotency_key(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def max_attempts(self) -> int: ...
    @property
    def run_at(self) -> datetime | None: ...
    @property
    def priority(self) -> int: ...


@dataclass(frozen=True)
class EnqueueRequest:
    """One definition's enqueue, checked: what an ``Enqueuer`` carries out."""

    registry: Registry
    type: str
    payload: dict[str, Any]
    """JSON, valid against the type's payload model."""

    key: str
    run_at: datetime | None = None
    priority: int | None = None
    connection: object | None = None
    """The caller's connection, a transaction open on it; None: through a client."""

    policies: PolicyOptions = field(default_factory=lambda: PolicyOptions())
    """The order and submission policies given (checked), by name: each way of sending takes
    them as keyword arguments."""


class Enqueuer(Protocol):
    """The port between a definition and what sends its jobs: ``jobrelay/configuration.py``
    (a client, or ``jobrelay.enqueue`` on ``request.connection``), or the testing kit's
    recorder (``jobrelay/testing/recorder.py``)."""

    def enqueue(self, request: EnqueueRequest) -> EnqueuedJob: ...

    async def enqueue_async(self, request: EnqueueRequest) -> EnqueuedJob: ...


class NotConfigured(ConfigurationError):
    """An enqueue found nothing to go through: ``jobrelay.configure`` was not called, or not
    with what this enqueue needs."""

    code = "not_configured"


def not_configured(name: str, *, is_async: bool, in_transaction: bool) -> NotConfigured:
    """The error naming the ``jobrelay.configure`` call that an enqueue of ``name`` lacks."""
    if in_transaction:
        needed = "jobrelay.configure(client_name=...), the jobrelay client its jobs belong to,"
    elif is_async:
        needed = "jobrelay.configure(async_client=jobrelay.AsyncClient(...))"
    else:
        needed = "jobrelay.configure(client=jobrelay.Client(...))"
    return NotConfigured(
        f"job type {name!r}: nothing to enqueue through: call {needed} once at start"
        + ("" if in_transaction else ", or pass connection= to enqueue in your transaction")
    )


# Set once at an application's start by ``jobrelay.configure`` (as logging is configured once);
# a definition reads it at each enqueue, never at import.
_enqueuer: Enqueuer | None = None
# A test's recorder (``jobrelay/testing/recorder.py``): while set, it takes every enqueue, even
# when the code under test calls ``jobrelay.configure`` meanwhile (an application's startup does).
_override: Enqueuer | None = None


def install_enqueuer(enqueuer: Enqueuer | None) -> Enqueuer | None:
    """Make ``enqueuer`` the configured one every definition's enqueue goes through (None:
    none), and return the one it replaces, for a test to put back."""
    global _enqueuer
    previous, _enqueuer = _enqueuer, enqueuer
    return previous


def override_enqueuer(enqueuer: Enqueuer | None) -> Enqueuer | None:
    """Make ``enqueuer`` take every enqueue over the configured one (None: the configured one
    again), and return the override it replaces."""
    global _override
    previous, _override = _override, enqueuer
    return previous


def configured_enqueuer() -> Enqueuer | None:
    """The one ``jobrelay.configure`` installed, whatever overrides it."""
    return _enqueuer


def installed_enqueuer() -> Enqueuer | None:
    """The one an enqueue goes through: the override, else the configured one."""
    return _override if _override is not None else _enqueuer


class JobDefinition(Generic[P, Params, Ret]):
    """What ``@registry.job(name, Model)`` gives: the handler itself to call (``definition(
    context, payload)`` is ``handler(context, payload)``; the consumer runs ``JobType.handler``,
    the undecorated function), and the way to enqueue jobs of its type.

    ``enqueue(payload, *, key=None, run_at=None, priority=None, connection=None,
    **policies)``:

    - ``payload``: a ``Model`` or a dict, checked against the model before anything is sent
      (``InvalidPayload``, as the registry raises).
    - ``key``: the idempotency key. Without one a fresh random key is made, so a call that is
      retried makes a second job: a caller that wants retry-safety passes its own key (say
      ``f"charge:{order.id}"``), and the same key with the same request answers the same job.
    - ``run_at`` (with a time zone) and ``priority`` (-100 to 100; by default the type's), as
      for any submission.
    - ``policies``: ``sequence_key``, ``unique_for_seconds``, ``on_duplicate``,
      ``debounce_seconds``, ``debounce_max_seconds``, ``throttle_key`` (docs/flow-control.md),
      sent as the submission's fields of those names.
    - Without ``connection``: through the client ``jobrelay.configure(client=...)`` installed,
      a ``jobrelay.Client``; the answer is the API's view, a ``jobrelay.Job``.
    - With ``connection=``: inside the caller's open transaction (psycopg or SQLAlchemy, as
      ``jobrelay.enqueue`` takes), for the client ``jobrelay.configure(client_name=...)``
      names, with this registry (the type's attempts, priority and key functions apply); the
      answer is a ``jobrelay.core.jobs.Job``. Nothing is committed: that is the caller's.

    ``await enqueue_async(...)``: the same through ``configure(async_client=...)`` (a
    ``jobrelay.AsyncClient``) or on an async connection. Both answers are ``EnqueuedJob``s.
    Nothing configured: ``NotConfigured``, naming the ``jobrelay.configure`` call needed.

    On Python 3.12+ ``inspect.iscoroutinefunction`` sees the definition of an ``async def``
    as a coroutine function; on 3.11 ask ``is_async_handler``.
    """

    # Copied from the handler (``functools.update_wrapper``), declared for type checkers.
    __name__: str
    __qualname__: str
    __wrapped__: Callable[Params, Ret]

    def __init__(
        self,
        registry: Registry,
        name: str,
        payload_model: type[P],
        handler: Callable[Params, Ret],
    ) -> None:
        self.registry = registry
        self.name = name
        self.payload_model = payload_model
        self.handler = handler
        # Its name, docstring and module for tools and tracebacks; not its __dict__, which
        # could shadow these attributes.
        functools.update_wrapper(self, handler, updated=())
        mark = getattr(inspect, "markcoroutinefunction", None)  # Python 3.12+
        if mark is not None and is_async_handler(handler):
            mark(self)

    def __call__(self, *args: Params.args, **kwargs: Params.kwargs) -> Ret:
        return self.handler(*args, **kwargs)

    def __reduce__(self) -> str:
        """Pickled (and copied) by reference, as a function is: the module attribute the
        definition stands at, the handler's name. Its registry, which holds lambdas and models,
        is never pickled, and a copy is the one definition."""
        qualname = vars(self).get("__qualname__")
        if not isinstance(qualname, str):
            raise TypeError(f"job definition {self.name!r}: its handler has no name to pickle by")
        return qualname

    def __repr__(self) -> str:
        return f"<JobDefinition {self.name!r}: {self.handler!r}>"

    @property
    def job_type(self) -> JobType:
        return self.registry.get(self.name)

    def enqueue(
        self,
        payload: P | dict[str, Any],
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        connection: object | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> EnqueuedJob:
        """A job of this type (see the class's documentation)."""
        request = self.request(
            payload, key=key, run_at=run_at, priority=priority, connection=connection, **policies
        )
        enqueuer = installed_enqueuer()
        if enqueuer is None:
            raise not_configured(self.name, is_async=False, in_transaction=connection is not None)
        return enqueuer.enqueue(request)

    async def enqueue_async(
        self,
        payload: P | dict[str, Any],
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        connection: object | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> EnqueuedJob:
        """``enqueue`` through the configured ``AsyncClient``, or on an async connection."""
        request = self.request(
            payload, key=key, run_at=run_at, priority=priority, connection=connection, **policies
        )
        enqueuer = installed_enqueuer()
        if enqueuer is None:
            raise not_configured(self.name, is_async=True, in_transaction=connection is not None)
        return await enqueuer.enqueue_async(request)

    def request(
        self,
        payload: P | dict[str, Any],
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        connection: object | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> EnqueueRequest:
        """The checked request: the payload as JSON and valid against the model, a fresh key
        when none is given; ``ValueError`` for a key, a due time, a priority or a policy no
        submission can have (``Flow`` checks each policy alone; how they go together is
        checked with the type's, where the job is accepted)."""
        if key is None:
            key = str(uuid.uuid4())
        elif not isinstance(key, str) or not is_valid_idempotency_key(key):
            raise ValueError(
                f"key must be 1 to {IDEMPOTENCY_KEY_MAX} visible ASCII characters (0x21-0x7E)"
            )
        if run_at is not None and (not isinstance(run_at, datetime) or run_at.utcoffset() is None):
            raise ValueError("run_at must be a datetime with a time zone offset")
        if priority is not None:
            check_priority(priority)
        given = _given_policies(policies) if policies else PolicyOptions()
        document = self._payload(payload)
        return EnqueueRequest(
            self.registry, self.name, document, key, run_at, priority, connection, given
        )

    def _payload(self, payload: P | dict[str, Any]) -> dict[str, Any]:
        """The payload as it will be sent: a model as its JSON, a dict as given; either way
        checked against the type's model (a model changed after it was built is caught too)."""
        document = payload_document(payload) if isinstance(payload, BaseModel) else payload
        self.registry.validate_payload(self.name, document)  # InvalidPayload
        if not isinstance(document, dict):
            raise InvalidPayload(
                f"payload of {self.name!r} must be a {self.payload_model.__name__} or a dict"
            )
        return document


def _given_policies(policies: PolicyOptions) -> PolicyOptions:
    """The policies an enqueue gave, checked each alone (``Flow``: ``ValueError`` out of range;
    ``TypeError`` for a misspelt keyword, which a type checker would have caught)."""
    unknown = set(policies) - set(PolicyOptions.__annotations__)
    if unknown:
        raise TypeError(f"enqueue got unexpected keywords: {', '.join(sorted(unknown))}")
    Flow(**policies)
    return cast(PolicyOptions, {name: v for name, v in policies.items() if v is not None})


def _key_of(name: str, option: str, function: KeyFunction, payload: BaseModel) -> str:
    """``function(payload)``, a type's key function, or ``InvalidPayload`` saying how it
    failed (its exception's class only: the message may quote the payload)."""
    try:
        key = function(payload)
    except Exception as error:
        problem = f"its {option}= function raised {type(error).__name__}"
    else:
        if is_valid_flow_key(key):
            return key
        problem = f"its {option}= function gave {_unfit(key)}"
    raise InvalidPayload(
        f"job type {name!r}: {problem} on this payload",
        errors=[{"loc": [], "msg": problem, "type": f"{option}_function"}],
    )


def _unfit(key: object) -> str:
    """What is wrong with a key that is not a fit one (``is_valid_flow_key``)."""
    if not isinstance(key, str):
        return f"{type(key).__name__}, not a text"
    if not 1 <= len(key) <= FLOW_KEY_MAX:
        return f"a text of {len(key)} characters (1 to {FLOW_KEY_MAX})"
    return "a text with a NUL character"
