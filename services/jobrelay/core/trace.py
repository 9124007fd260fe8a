"""The story of one job, from its rows: what ``jobrelay jobs trace`` and the API answer.

What a trace must tell from one job id alone: whether the intent was recorded, when the
outbox was published, how many deliveries and attempts there were, which result was stored and
why the job stopped. The store reads a ``JobTrace`` (plain values, one snapshot);
``trace_document`` summarizes it into the document both the API and the CLI show
(docs/life-of-a-job.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from jobrelay.core.failures import public_failure
from jobrelay.core.jobs import Job, JournalEntry
from jobrelay.core.journal import UNCLAIMED_DELIVERY_MARKERS
from jobrelay.core.states import JobEvent, JobState
from jobrelay.core.workflows import DEPENDENCY_FAILED_CODE


@dataclass(frozen=True)
class OutboxEntry:
    id: int
    created_at: datetime
    available_at: datetime
    published_at: datetime | None
    publish_attempts: int
    last_error: str | None


@dataclass(frozen=True)
class StoredResult:
    result: dict[str, Any]
    attempt: int
    created_at: datetime


@dataclass(frozen=True)
class SignalEntry:
    """A signal sent to the job (``job_signals``), and the wait that took it, if one did."""

    name: str
    sent_at: datetime
    taken_by: str | None  # the step name of the wait that took it
    taken_at: datetime | None


@dataclass(frozen=True)
class JobTrace:
    """Everything recorded about one job, read in one snapshot (its steps in ``job.steps``)."""

    job: Job
    client_name: str
    outbox: list[OutboxEntry]
    events: list[JournalEntry]
    result: StoredResult | None
    signals: list[SignalEntry] = field(default_factory=list)


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def why_it_stopped(
    job: Job,
    result: StoredResult | None,
    *,
    deferred: bool = False,
    cancelled_by: str | None = None,
    moment: Callable[[datetime | None], str | None] = _iso,
) -> str:
    """``moment`` writes the times in it (ISO 8601 unless a page writes them its own way);
    ``cancelled_by``: who cancelled, as the journal says it ("by an operator ..."), when it
    does."""
    if job.state == JobState.SUCCEEDED:
        attempt = result.attempt if result else job.attempts
        return "succeeded on " + _attempt_words(job, attempt)
    if job.state == JobState.QUARANTINED:
        return f"quarantined: {job.last_error_code or 'unknown'}: {job.last_error or ''}".strip()
    if job.state == JobState.CANCELLED and job.last_error_code == DEPENDENCY_FAILED_CODE:
        return f"cancelled: {DEPENDENCY_FAILED_CODE}: {job.last_error or ''}".strip()
    if job.state == JobState.CANCELLED:
        return f"cancelled {cancelled_by or 'by its client'}"
    if job.state == JobState.SLEEPING:
        return "not stopped: " + sleeping_words(job, moment)
    if job.state == JobState.WAITING:
        return f"not stopped: waiting for the jobs it depends on in workflow {job.workflow_id}"
    if job.state == JobState.RETRYING:
        return (
            f"not stopped: retrying after {job.last_error_code}, next attempt due "
            f"{moment(job.available_at)}"
        )
    if job.state == JobState.RUNNING:
        running = (
            f"not stopped: running {_attempt_words(job, job.attempts, budget=False)}, "
            f"lease until {moment(job.lease_until)}"
        )
        return running + _progress_words(job)
    if job.no_consumer:
        return (
            "not stopped: queued, no_consumer: no running consumer runs its type "
            f"{job.type}; it runs once one starts"
        )
    if deferred:
        return (
            "not stopped: deferred, the consumer that received it did not know its type; "
            f"due again {moment(job.available_at)}"
        )
    return "not stopped: queued, waiting for a consumer"


def sleeping_words(job: Job, moment: Callable[[datetime | None], str | None] = _iso) -> str:
    """What a sleeping job waits for, in words: its time, a signal or a child (with a deadline
    when it has one)."""
    waiting = job.waiting_for or {}
    deadline = f" until {moment(job.wake_at)}" if job.wake_at else ""
    if "signal" in waiting:
        return f"sleeping, waiting for signal {waiting['signal']!r}{deadline}"
    if "child" in waiting:
        return f"sleeping, waiting for child job {waiting['child']}{deadline}"
    return f"sleeping{deadline}"


def _cancelled_by(events: Sequence[JournalEntry]) -> str | None:
    """Who asked for the cancel, as its journal entry says ("by its client", "by an operator
    with jobrelay jobs cancel"); None when no entry says it."""
    asked = (JobEvent.CANCEL_REQUESTED, JobEvent.CANCELLED)
    return next(
        (e.detail for e in events if e.event in asked and (e.detail or "").startswith("by ")),
        None,
    )


def _attempt_words(job: Job, attempt: int, *, budget: bool = True) -> str:
    """Attempt ``attempt`` (of the job's life) as its run counts it: since its latest replay,
    with the life's number beside it (docs/states.md, "Attempts and replays"); ``budget``:
    with the run's budget ("of 3")."""
    if not job.replayed_attempts:
        return f"attempt {attempt}" + (f" of {job.max_attempts}" if budget else "")
    of = f" of {job.run_max_attempts}" if budget else ""
    return (
        f"attempt {attempt - job.replayed_attempts}{of} since its replay "
        f"(attempt {attempt} of its life)"
    )


def trace_document(
    trace: JobTrace,
    *,
    tracebacks: bool = True,
    moment: Callable[[datetime | None], str | None] = _iso,
) -> dict[str, Any]:
    """``tracebacks=False``: what the job's owner sees (failures without their traceback);
    ``moment``: how ``why`` writes its times (the console's pages write them their way)."""
    job, events, result = trace.job, trace.events, trace.result
    counts = Counter(event.event for event in events)
    received = next((e for e in events if e.event == JobEvent.RECEIVED), None)
    claims = counts[JobEvent.CLAIMED]
    # Deliveries that ended without a claim: no attempts left, or a type the consumer lacked.
    unclaimed = sum(1 for e in events if is_unclaimed_delivery(e))
    failures = [e for e in events if e.error is not None]
    last = next(
        (e.event for e in reversed(events) if e.event != JobEvent.PUBLISHED), JobEvent.RECEIVED
    )
    return {
        "job_id": str(job.id),
        "type": job.type,
        "intent": {
            "recorded": True,
            "recorded_at": _iso(received.at if received else job.created_at),
            "client": trace.client_name,
            "idempotency_key": job.idempotency_key,
        },
        "outbox": [
            {
                "id": row.id,
                "created_at": _iso(row.created_at),
                "due_at": _iso(row.available_at),
                "published_at": _iso(row.published_at),
                "publish_attempts": row.publish_attempts,
                "last_error": row.last_error,
            }
            for row in trace.outbox
        ],
        "published": counts[JobEvent.PUBLISHED],
        "deliveries": {
            "total": claims
            + counts[JobEvent.DUPLICATE_DELIVERY]
            + counts[JobEvent.DEFERRED]
            + unclaimed,
            "claimed": claims,
            "duplicate": counts[JobEvent.DUPLICATE_DELIVERY],
            "deferred": counts[JobEvent.DEFERRED],
        },
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "replayed_attempts": job.replayed_attempts,
        "retries_scheduled": counts[JobEvent.RETRY_SCHEDULED],
        "lease_expiries": counts[JobEvent.LEASE_EXPIRED],
        "stale_completions_rejected": counts[JobEvent.STALE_COMPLETION_REJECTED],
        "replays": counts[JobEvent.REPLAYED],
        "result": (
            {
                "stored_at": _iso(result.created_at),
                "attempt": result.attempt,
                "value": result.result,
            }
            if result
            else None
        ),
        "state": job.state.value,
        "workflow_id": str(job.workflow_id) if job.workflow_id else None,
        "progress": job.progress,
        "why": why_it_stopped(
            job,
            result,
            deferred=last == JobEvent.DEFERRED,
            cancelled_by=_cancelled_by(events),
            moment=moment,
        ),
        "last_failure": _failure(failures[-1], tracebacks) if failures else None,
        "wake_at": _iso(job.wake_at),
        "waiting_for": job.waiting_for,
        "steps": [step.as_json() for step in job.steps or ()],
        "signals": [
            {
                "name": signal.name,
                "sent_at": _iso(signal.sent_at),
                "taken_by": signal.taken_by,
                "taken_at": _iso(signal.taken_at),
            }
            for signal in trace.signals
        ],
        "events": [
            {
                "at": _iso(e.at),
                "event": e.event,
                "attempt": e.attempt,
                "detail": e.detail,
                "error": _failure(e, tracebacks)["error"] if e.error is not None else None,
            }
            for e in events
        ],
    }


def _progress_words(job: Job) -> str:
    """What its handler last reported, as the trace's ``why`` says it ("" for nothing)."""
    if not job.progress:
        return ""
    fraction, message = job.progress.get("fraction", 0), job.progress.get("message")
    return f"; {fraction:.0%} done" + (f": {message}" if message else "")


def _failure(event: JournalEntry, tracebacks: bool) -> dict[str, Any]:
    error = event.error if tracebacks else public_failure(event.error)
    return {"at": _iso(event.at), "attempt": event.attempt, "event": event.event, "error": error}


def is_unclaimed_delivery(entry: JournalEntry) -> bool:
    """A delivery that ended the job without claiming it: quarantined by the consumer that
    received it, with no attempt run (so no failure of its own)."""
    return (
        entry.event == JobEvent.QUARANTINED
        and entry.error is None
        and entry.detail in UNCLAIMED_DELIVERY_MARKERS
    )


def timeline(document: dict[str, Any]) -> list[dict[str, Any]]:
    """A trace document's journal with its steps and signals among the entries, in time order
    (``jobrelay jobs trace``, the console's job page): each line ``{"at", "line", ...}``, where
    ``line`` is ``event`` (a journal entry as it is), ``step`` (a step, sleep, signal wait or
    child as recorded) or ``signal`` (a signal sent, and which wait took it). What one transaction
    wrote shares its instant (``now()``): there the cause comes first, a signal before the
    entries it made (``signalled``, ``woke``), a step before the entry of the sleep it began."""
    lines: list[tuple[str, int, int, dict[str, Any]]] = []
    for index, event in enumerate(document["events"]):
        lines.append((event["at"], 2, index, {"line": "event", **event}))
    for index, step in enumerate(document.get("steps") or ()):
        lines.append((step["at"], 1, index, {"line": "step", **step}))
    for index, signal in enumerate(document.get("signals") or ()):
        lines.append(
            (signal["sent_at"], 0, index, {"line": "signal", "at": signal["sent_at"], **signal})
        )
    return [line for *_, line in sorted(lines, key=_moment_order)]


def _moment_order(line: tuple[str, int, int, dict[str, Any]]) -> tuple[datetime, int, int]:
    at, rank, index, _ = line
    return datetime.fromisoformat(at), rank, index
