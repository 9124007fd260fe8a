"""The registry of job types: name, payload schema, handler, attempt limit, timeout.

The API uses it to validate submissions; the consumer uses it to run handlers. A user's own
registries are loaded with ``--handlers module:registry`` or JOBRELAY_HANDLERS
(``jobrelay.handlers.loading``). A handler is an ``async def`` or a plain ``def``; the consumer
runs a plain one in a thread pool.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from jobrelay.core.errors import InvalidPayload, UnknownJobType
from jobrelay.core.flow import Limit, Rate, check_priority, parse_rate
from jobrelay.core.jobs import Flow, is_valid_flow_key
from jobrelay.core.limits import FLOW_KEY_MAX
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


# Where a context's progress reports go: the consumer's reporter (consumer/progress.py).
ProgressSink = Callable[[float, str | None], None]
# A progress message is cut to this many characters.
PROGRESS_MESSAGE_MAX = 500

AsyncHandler = Callable[[JobContext, Any], Awaitable[dict[str, Any]]]
SyncHandler = Callable[[JobContext, Any], dict[str, Any]]
Handler = AsyncHandler | SyncHandler
H = TypeVar("H", bound=Callable[..., Any])
# A type's concurrency_key= or unique=: the key of a submission, from its payload.
KeyFunction = Callable[[Any], str]


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An ``async def`` (or an object whose ``__call__`` is one)."""
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

    @property
    def runs_in_thread(self) -> bool:
        """A plain ``def`` handler: run in a thread so it cannot block the event loop."""
        return self.handler is not None and not is_async_handler(self.handler)


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
    for option, function in (("concurrency_key", concurrency_key), ("unique", unique)):
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
    }


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
        payload_model: type[BaseModel],
        *,
        max_attempts: int | None = None,
        timeout_seconds: float = 300.0,
        priority: int = 0,
        concurrency: int | None = None,
        concurrency_key: KeyFunction | None = None,
        rate: str | None = None,
        per_key: bool | None = None,
        unique: KeyFunction | None = None,
    ) -> Callable[[H], H]:
        """Decorator form: ``@registry.job("x.y", Payload)`` above an ``async def`` or a plain
        ``def`` handler ``(context, payload) -> dict``.

        Flow control (docs/flow-control.md): ``priority`` (-100..100) is its submissions'
        default; at most ``concurrency`` run at once and ``rate`` (``"10/s"``, ``"600/m"``)
        start, per concurrency key when ``per_key`` (by default: a concurrency when
        ``concurrency_key`` is given, a rate never), over the type otherwise;
        ``concurrency_key`` and ``unique`` give a submission without its own key one from its
        payload (the validated model). A bad value is a ``ValueError`` naming the type."""
        flow = flow_options(
            name,
            priority=priority,
            concurrency=concurrency,
            concurrency_key=concurrency_key,
            rate=rate,
            per_key=per_key,
            unique=unique,
        )

        def decorate(handler: H) -> H:
            if not callable(handler):
                raise TypeError(f"the handler of job type {name!r} is not callable")
            self.register(
                JobType(
                    name=name,
                    payload_model=payload_model,
                    handler=handler,
                    max_attempts=max_attempts,
                    timeout_seconds=timeout_seconds,
                    description=(handler.__doc__ or "").strip().split("\n")[0],
                    **flow,
                )
            )
            return handler

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
            payload = payload.model_dump(mode="json")
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
        ``asked``: the type's priority, and each key it did not give from the type's function
        of the payload. ``InvalidPayload`` when such a function fails on the payload or gives
        no fit key: the submission cannot be keyed."""
        job_type = self.get(name)
        keys = {}
        for option, function, given in (
            ("concurrency_key", job_type.concurrency_key, asked.concurrency_key),
            ("unique", job_type.unique, asked.unique_key),
        ):
            if function is not None and given is None:
                keys[option] = _key_of(name, option, function, payload)
        # A priority of 0 is every job's anyway: left None, a request of a type without flow
        # options is the same value as one built without a registry.
        priority = job_type.priority or None
        return Flow(priority, keys.get("concurrency_key"), keys.get("unique"))

    def limits(self) -> dict[str, Limit]:
        """The limits its types declare (``@registry.job(..., concurrency=, rate=)``)."""
        return {t.name: t.limit for t in self.types.values() if t.limit is not None}

    def max_attempts_for(self, name: str, default: int) -> int:
        limit = self.get(name).max_attempts
        return limit if limit is not None else default


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
