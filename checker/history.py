"""A history file read into small frozen values (docs/history.md, format 1).

Only the fields the counts need are kept. A field or a record this reader does not know is
ignored (the format may grow); a known field of the wrong type, a line that is not a JSON
object, another format number or a missing ``end`` line is a ``HistoryError``: the checker
refuses what it cannot read rather than count from half of it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

FORMAT = 1

T = TypeVar("T")
Fields = Mapping[str, Any]


class HistoryError(Exception):
    """The file is not a complete history of format 1; the message says why, in one line."""


@dataclass(frozen=True)
class Run:
    profile: str
    seed: int | None
    limits: Mapping[str, int]  # a type's concurrency limit per concurrency key
    batch_sizes: Mapping[str, int]  # a batch type's largest call


@dataclass(frozen=True)
class Request:
    n: int
    at: float
    op: str  # submit, submit_workflow, cancel
    key: str | None


@dataclass(frozen=True)
class Answer:
    n: int
    status: int | None  # None: no answer came
    id: str | None
    jobs: Mapping[str, str]  # a workflow's jobs by ref (empty for a job)


@dataclass(frozen=True)
class StepRun:
    job_id: str
    step: str
    attempt: int


@dataclass(frozen=True)
class BatchCall:
    tag: str
    call: str
    size: int
    outcome: str


@dataclass(frozen=True)
class ReportEffect:
    job_id: str
    outcome: str


@dataclass(frozen=True)
class Job:
    id: str
    client: str | None
    key: str | None
    type: str
    state: str
    concurrency_key: str | None
    sequence_key: str | None
    sequence_no: int | None
    sequence_waits: bool
    workflow_id: str | None
    parent_job_id: str | None
    tag: str | None  # payload.tag: which job a batch effect is


@dataclass(frozen=True)
class Result:
    job_id: str
    attempt: int | None


@dataclass(frozen=True)
class Event:
    job_id: str
    seq: int
    event: str
    attempt: int | None
    at: float
    detail: str | None = None  # e.g. a quarantine's code


@dataclass(frozen=True)
class Step:
    job_id: str
    name: str
    kind: str
    attempt: int | None


@dataclass(frozen=True)
class Workflow:
    id: str
    key: str | None


@dataclass(frozen=True)
class History:
    run: Run
    requests: tuple[Request, ...] = ()
    answers: tuple[Answer, ...] = ()
    step_runs: tuple[StepRun, ...] = ()
    batch_calls: tuple[BatchCall, ...] = ()
    reports: tuple[ReportEffect, ...] = ()
    jobs: tuple[Job, ...] = ()
    results: tuple[Result, ...] = ()
    events: tuple[Event, ...] = ()
    steps: tuple[Step, ...] = ()
    workflows: tuple[Workflow, ...] = ()
    quarantined_ids: tuple[str | None, ...] = ()  # one per message of the quarantine queue
    unpublished: int = 0  # the outbox's rows never published
    queued_messages: int = 0  # messages left in the work queues
    journals: Mapping[str, tuple[Event, ...]] = field(default_factory=dict)


# --- typed fields -------------------------------------------------------------------------------


def _field(fields: Fields, name: str, kinds: tuple[type, ...], optional: bool) -> Any:
    value = fields.get(name)
    if value is None and optional:
        return None
    # bool is an int to Python, never to a history
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        wanted = " or ".join(kind.__name__ for kind in kinds)
        raise HistoryError(f"{name!r} of a {fields.get('record')} is not {wanted}: {value!r}")
    return value


def _text(fields: Fields, name: str) -> str:
    return str(_field(fields, name, (str,), optional=False))


def _maybe_text(fields: Fields, name: str) -> str | None:
    value = _field(fields, name, (str,), optional=True)
    return None if value is None else str(value)


def _int(fields: Fields, name: str) -> int:
    return int(_field(fields, name, (int,), optional=False))


def _maybe_int(fields: Fields, name: str) -> int | None:
    value = _field(fields, name, (int,), optional=True)
    return None if value is None else int(value)


def _time(fields: Fields, name: str) -> float:
    return float(_field(fields, name, (int, float), optional=False))


def _counts(fields: Fields, name: str) -> dict[str, int]:
    value = _field(fields, name, (dict,), optional=True) or {}
    return {str(key): _int(value, key) for key in value}


# --- one reader per record ----------------------------------------------------------------------


def _run(fields: Fields) -> Run:
    return Run(
        profile=str(fields.get("profile")),
        seed=_maybe_int(fields, "seed"),
        limits=_counts(fields, "limits"),
        batch_sizes=_counts(fields, "batch_sizes"),
    )


def _request(fields: Fields) -> Request:
    return Request(
        n=_int(fields, "n"),
        at=_time(fields, "at"),
        op=_text(fields, "op"),
        key=_maybe_text(fields, "key"),
    )


def _answer(fields: Fields) -> Answer:
    jobs = _field(fields, "jobs", (dict,), optional=True) or {}
    return Answer(
        n=_int(fields, "n"),
        status=_maybe_int(fields, "status"),
        id=_maybe_text(fields, "id"),
        jobs={str(ref): _text(jobs, ref) for ref in jobs},
    )


def _job(fields: Fields) -> Job:
    payload = fields.get("payload")
    tag = payload.get("tag") if isinstance(payload, dict) else None
    return Job(
        id=_text(fields, "id"),
        client=_maybe_text(fields, "client"),
        key=_maybe_text(fields, "key"),
        type=_text(fields, "type"),
        state=_text(fields, "state"),
        concurrency_key=_maybe_text(fields, "concurrency_key"),
        sequence_key=_maybe_text(fields, "sequence_key"),
        sequence_no=_maybe_int(fields, "sequence_no"),
        sequence_waits=fields.get("sequence_waits") is True,
        workflow_id=_maybe_text(fields, "workflow_id"),
        parent_job_id=_maybe_text(fields, "parent_job_id"),
        tag=tag if isinstance(tag, str) else None,
    )


def _event(fields: Fields) -> Event:
    return Event(
        job_id=_text(fields, "job_id"),
        seq=_int(fields, "seq"),
        event=_text(fields, "event"),
        attempt=_maybe_int(fields, "attempt"),
        at=_time(fields, "at"),
        detail=_maybe_text(fields, "detail"),
    )


def _effect(fields: Fields) -> StepRun | BatchCall | ReportEffect | None:
    effect = fields.get("effect")
    if effect == "step_run":
        return StepRun(
            job_id=_text(fields, "job_id"),
            step=_text(fields, "step"),
            attempt=_int(fields, "attempt"),
        )
    if effect == "batch_call":
        return BatchCall(
            tag=_text(fields, "tag"),
            call=str(fields.get("call")),  # an id of the call, whatever its JSON type
            size=_int(fields, "size"),
            outcome=_text(fields, "outcome"),
        )
    if effect == "report":
        return ReportEffect(job_id=_text(fields, "job_id"), outcome=_text(fields, "outcome"))
    return None  # an effect this reader does not know


# --- the file -----------------------------------------------------------------------------------


@dataclass
class _Lines:
    """The records read so far, by kind, before they are frozen into a ``History``."""

    run: Run
    by_kind: dict[str, list[Any]] = field(default_factory=dict)
    unpublished: int = 0
    queued_messages: int = 0
    ended: bool = False

    def add(self, kind: str, value: Any) -> None:
        self.by_kind.setdefault(kind, []).append(value)

    def of(self, kind: str, _type: type[T]) -> tuple[T, ...]:
        """The records of ``kind`` (``_type`` only types the answer)."""
        return tuple(self.by_kind.get(kind, ()))


READERS: dict[str, Callable[[Fields], Any]] = {
    "request": _request,
    "answer": _answer,
    "job": _job,
    "result": lambda f: Result(job_id=_text(f, "job_id"), attempt=_maybe_int(f, "attempt")),
    "event": _event,
    "step": lambda f: Step(
        job_id=_text(f, "job_id"),
        name=_text(f, "name"),
        kind=_text(f, "kind"),
        attempt=_maybe_int(f, "attempt"),
    ),
    "workflow": lambda f: Workflow(id=_text(f, "id"), key=_maybe_text(f, "key")),
    "quarantine_message": lambda f: _maybe_text(f, "job_id"),
}


def _read_record(lines: _Lines, fields: Fields) -> None:
    record = fields.get("record")
    if record == "end":
        lines.ended = True
    elif record == "effect":
        effect = _effect(fields)
        if effect is not None:
            lines.add(type(effect).__name__, effect)
    elif record == "outbox":
        lines.unpublished += _int(fields, "unpublished")
    elif record == "queue":
        lines.queued_messages += _int(fields, "messages")
    elif isinstance(record, str) and record in READERS:
        lines.add(record, READERS[record](fields))


def _objects(text_lines: Iterable[str]) -> Iterable[tuple[int, Fields]]:
    """Each non-blank line as a JSON object, with its line number."""
    for number, line in enumerate(text_lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as error:
            raise HistoryError(f"line {number} is not JSON ({error.msg})") from None
        if not isinstance(value, dict):
            raise HistoryError(f"line {number} is not a JSON object")
        yield number, value


def _first_line(number: int, fields: Fields) -> Run:
    if fields.get("record") != "run":
        raise HistoryError(f"line {number} is not a 'run' line: a history starts with one")
    if fields.get("format") != FORMAT:
        raise HistoryError(f"format {fields.get('format')!r}, this checker reads format {FORMAT}")
    return _run(fields)


def parse_history(text_lines: Iterable[str]) -> History:
    """The history these lines hold; ``HistoryError`` when they are not a whole one."""
    lines: _Lines | None = None
    for number, fields in _objects(text_lines):
        if lines is None:
            lines = _Lines(run=_first_line(number, fields))
            continue
        try:
            _read_record(lines, fields)
        except HistoryError as error:
            raise HistoryError(f"line {number}: {error}") from None
    if lines is None:
        raise HistoryError("the file is empty")
    if not lines.ended:
        raise HistoryError("no 'end' line: the run did not finish writing its history")
    return _frozen(lines)


def _frozen(lines: _Lines) -> History:
    events = lines.of("event", Event)
    journals: dict[str, list[Event]] = {}
    for event in events:
        journals.setdefault(event.job_id, []).append(event)
    return History(
        run=lines.run,
        requests=lines.of("request", Request),
        answers=lines.of("answer", Answer),
        step_runs=lines.of("StepRun", StepRun),
        batch_calls=lines.of("BatchCall", BatchCall),
        reports=lines.of("ReportEffect", ReportEffect),
        jobs=lines.of("job", Job),
        results=lines.of("result", Result),
        events=events,
        steps=lines.of("step", Step),
        workflows=lines.of("workflow", Workflow),
        quarantined_ids=lines.of("quarantine_message", str),
        unpublished=lines.unpublished,
        queued_messages=lines.queued_messages,
        # each job's journal in its own order, whatever order the lines came in
        journals={
            job: tuple(sorted(found, key=lambda e: e.seq)) for job, found in journals.items()
        },
    )


def read_history(path: Path) -> History:
    """The history in the file at ``path``; ``HistoryError`` when there is none to read."""
    try:
        with path.open(encoding="utf-8") as file:
            return parse_history(file)
    except FileNotFoundError:
        raise HistoryError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise HistoryError(f"{path}: cannot be read ({error})") from None
