"""What the client returns: the API's job and workflow views as typed, frozen values.

Plain dataclasses read by ``read_answer`` (standard library only, so that the slim client
needs no pydantic): each field's JSON value is checked against its type hint, a field the
API added later is ignored (an older client keeps working), a missing one without a default
is an error. ``as_json`` gives a view back as the API's document (``jobrelay jobs show``)."""

from __future__ import annotations

import dataclasses
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import cache
from typing import Any, TypeVar

Answer = TypeVar("Answer")


class UnexpectedAnswer(ValueError):
    """The JSON is not the view asked for (``_calls.py`` makes it an ``ApiError``)."""


def read_answer(model: type[Answer], document: object) -> Answer:
    """``document`` (parsed JSON) as a ``model``, or ``UnexpectedAnswer``."""
    return typing.cast(Answer, _reader(typing.cast(Any, model))(document))


def as_json(view: object) -> Any:
    """A view as the JSON document it was read from: ids and times as text, ISO 8601 with
    ``Z`` for UTC (as the API writes them)."""
    if dataclasses.is_dataclass(view) and not isinstance(view, type):
        return {item.name: as_json(getattr(view, item.name)) for item in dataclasses.fields(view)}
    if isinstance(view, datetime):
        text = view.isoformat()
        return text[: -len("+00:00")] + "Z" if text.endswith("+00:00") else text
    if isinstance(view, uuid.UUID):
        return str(view)
    if isinstance(view, Mapping):
        return {key: as_json(value) for key, value in view.items()}
    if isinstance(view, list | tuple):
        return [as_json(value) for value in view]
    return view


Read = Callable[[object], Any]


@cache
def _reader(hint: Any) -> Read:
    """How a JSON value is read as ``hint`` (a dataclass, ``X | None``, list, dict, UUID,
    datetime, a number, a text, a bool or ``Any``): worked out once per type, so that reading
    an answer only runs the readers (a job view in a few microseconds)."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return _as_is
    if origin in (typing.Union, types.UnionType):
        (inner,) = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        read_inner = _reader(inner)
        return lambda value: None if value is None else read_inner(value)
    if dataclasses.is_dataclass(hint):
        return _dataclass_reader(typing.cast(type, hint))
    if origin is list:
        read_item = _reader(typing.get_args(hint)[0])
        return lambda value: [read_item(item) for item in _checked(value, list)]
    if origin is dict:
        read_item = _reader(typing.get_args(hint)[1])
        return lambda value: {
            str(key): read_item(item) for key, item in _checked(value, dict).items()
        }
    if hint is uuid.UUID:
        return lambda value: _parsed(uuid.UUID, _checked(value, str))
    if hint is datetime:
        return lambda value: _parsed(datetime.fromisoformat, _checked(value, str))
    if hint is float:
        return _number
    if hint is int:
        return lambda value: _checked(value, int) if not isinstance(value, bool) else _not(value)
    return lambda value: _checked(value, hint)


def _dataclass_reader(model: type) -> Read:
    hints = typing.get_type_hints(model)
    readers = {item.name: _reader(hints[item.name]) for item in dataclasses.fields(model)}
    defaults = {
        item.name: item.default for item in dataclasses.fields(model) if item.default is not _NONE
    }
    factories: dict[str, Callable[[], Any]] = {
        item.name: typing.cast(Callable[[], Any], item.default_factory)
        for item in dataclasses.fields(model)
        if item.default_factory is not _NONE
    }
    required = [name for name in readers if name not in defaults and name not in factories]

    def read(value: object) -> Any:
        given = _checked(value, dict)
        for name in required:
            if name not in given:
                raise UnexpectedAnswer(f"{model.__name__} has no {name}")
        values = {name: factory() for name, factory in factories.items()}
        values.update(defaults)
        for name, item in given.items():
            read_field = readers.get(name)  # a field the API added later: None, ignored
            if read_field is not None:
                values[name] = read_field(item)
        # Filled as the frozen dataclass's __init__ would, without its object.__setattr__ per
        # field: the same object at a fraction of the cost (every field is set here).
        made: Any = object.__new__(model)
        made.__dict__.update(values)
        return made

    return read


_NONE: Any = dataclasses.MISSING


def _as_is(value: object) -> object:
    return value


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return _not(value)
    return float(value)


def _parsed(parse: Callable[[str], Answer], text: str) -> Answer:
    try:
        return parse(text)
    except ValueError as error:
        raise UnexpectedAnswer(str(error)) from None


def _not(value: object) -> typing.NoReturn:
    raise UnexpectedAnswer(f"a number, not {value!r}")


def _checked(value: object, kind: type[Answer]) -> Answer:
    if not isinstance(value, kind):
        raise UnexpectedAnswer(f"a {kind.__name__}, not {type(value).__name__}")
    return value


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobLinks:
    self: str
    events: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class Progress:
    """What a running handler last reported (``context.progress``): 0 to 1, and when."""

    fraction: float
    message: str | None = None
    at: datetime


@dataclasses.dataclass(frozen=True, kw_only=True)
class Step:
    """One step a durable handler recorded (docs/durable-execution.md): ``kind`` is ``step``,
    ``sleep``, ``signal`` or ``child``; ``status`` ``done``, ``waiting`` or ``timed_out``;
    ``value`` only when read with ``steps="values"``."""

    name: str
    kind: str
    status: str
    at: datetime
    attempt: int
    wake_at: datetime | None = None
    child_id: uuid.UUID | None = None
    value: Any = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    """One job as the API shows it (``GET /v1/jobs/{id}``). ``state`` is one of ``waiting``
    (a workflow's job whose parents have not all succeeded), ``queued``, ``running``,
    ``sleeping`` (a durable handler's sleep, or its wait for a signal or a child),
    ``retrying``, ``succeeded``, ``quarantined``, ``cancelled``; ``result`` is set once it
    succeeded. ``wake_at``, ``waiting_for`` (``{"signal": name}``, ``{"child": id}``) and
    ``steps`` (the single job's read only) are a durable handler's."""

    id: uuid.UUID
    type: str
    state: str
    idempotency_key: str
    payload: dict[str, Any]
    attempts: int
    max_attempts: int
    created_at: datetime
    updated_at: datetime
    available_at: datetime
    run_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    finished_at: datetime | None = None
    lease_until: datetime | None = None
    last_error_code: str | None = None
    last_error: str | None = None
    result: dict[str, Any] | None = None
    priority: int = 0
    concurrency_key: str | None = None
    unique_key: str | None = None
    deduplicated: bool = False
    """True when a job of the same type and unique key (live, or ended within the
    submission's ``unique_for_seconds``) answered the submission: this job is that one, and
    the submission made none (docs/flow-control.md)."""
    debounced: bool = False
    """True when the submission's debounce gave its payload and a later start to this job,
    the key's queued one, and made none."""
    sequence_key: str | None = None
    blocked_by: uuid.UUID | None = None
    """Waiting in its sequence behind this quarantined job (the single job's read only)."""
    workflow_id: uuid.UUID | None = None
    progress: Progress | None = None
    wake_at: datetime | None = None
    waiting_for: dict[str, str] | None = None
    parent_job_id: uuid.UUID | None = None
    steps: list[Step] | None = None
    links: JobLinks

    @property
    def finished(self) -> bool:
        """Succeeded, quarantined or cancelled: it will not change again by itself."""
        return self.state in FINISHED_STATES


FINISHED_STATES = frozenset({"succeeded", "quarantined", "cancelled"})


@dataclasses.dataclass(frozen=True, kw_only=True)
class Signal:
    """What ``Client.signal`` did: ``status`` ``sent`` (kept; the job woke if it slept waiting
    for it) or ``repeated`` (its key was used for this job before: nothing new kept)."""

    job_id: uuid.UUID
    name: str
    status: str


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchItemAnswer:
    status: int
    job: Job | None = None
    error: dict[str, Any] | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchAnswer:
    results: list[BatchItemAnswer]


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobPage:
    """One page of ``GET /v1/jobs``; ``Client.jobs`` follows ``next_cursor`` itself."""

    items: list[Job]
    next_cursor: str | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkflowJob:
    """One job of a workflow as its view shows it; ``after`` names the refs it waits for."""

    id: uuid.UUID
    type: str
    state: str
    after: list[str] = dataclasses.field(default_factory=list)
    last_error_code: str | None = None
    progress: Progress | None = None


@dataclasses.dataclass(frozen=True, kw_only=True)
class WorkflowView:
    """A workflow as the API shows it (``GET /v1/workflows/{id}``). ``state`` is ``running``,
    ``succeeded`` (every job did), ``failed`` (a job is quarantined and nothing else can run)
    or ``cancelled``; ``jobs`` maps each ref to its job, in the order they were submitted;
    ``counts`` is how many jobs are in each state."""

    id: uuid.UUID
    state: str
    on_failure: str
    created_at: datetime
    cancelled_at: datetime | None = None
    jobs: dict[str, WorkflowJob]
    counts: dict[str, int] = dataclasses.field(default_factory=dict)
