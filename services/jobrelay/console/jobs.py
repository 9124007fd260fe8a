"""Jobs: the listing (filters, find by id, keyset pages), one job with its trace as a timeline,
and cancelling one. The listing is the store's of ``GET /v1/jobs`` (``Store.list_jobs``, a
client's jobs newest first through ``ix_jobs_client_id_created_at_id``); across clients it is
each client's page merged, so no page reads more than a page per client."""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Protocol

from fastapi import APIRouter, Query, Request, Response

from jobrelay.console.charts import timeline
from jobrelay.console.context import context_of
from jobrelay.console.security import Flash
from jobrelay.console.web import (
    ActingDep,
    ConsoleRoute,
    Operator,
    OperatorDep,
    PageError,
    parse_job_id,
    pretty_json,
    redirect,
    render,
    store_of,
    when,
)
from jobrelay.core.durable import StepRecord
from jobrelay.core.errors import InvalidCursor, JobNotFound, NotCancellable
from jobrelay.core.jobs import CancelAnswer
from jobrelay.core.pages import Page, decode_cursor
from jobrelay.core.states import TERMINAL_STATES, JobState
from jobrelay.core.trace import trace_document
from jobrelay.db.client_store import ClientStore
from jobrelay.operations import cancel_any_job

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

JOBS_PATH = "/ui/jobs"
PAGE_SIZE = 50
# "Previous" links carry the cursors of the pages before (at most this many; further back, the
# newest page is one click away).
TRAIL_MAX = 30
FIRST_PAGE = "~"  # in a trail: the page without a cursor
STATES = [state.value for state in JobState]
# A quarantined job too: its cancel unblocks its sequence (docs/flow-control.md, "Sequences").
CANCELLABLE = frozenset(JobState) - TERMINAL_STATES | {JobState.QUARANTINED}

Text = Annotated[str, Query(max_length=200)]


class Linked(Protocol):
    """A listing's filters: ``link`` writes the listing's address with them."""

    def link(self, **extra: str) -> str: ...


@dataclass(frozen=True)
class Filters:
    state: str
    type: str
    client: str

    def link(self, **extra: str) -> str:
        """The listing with these filters (and ``extra``, e.g. a cursor)."""
        wanted = {"state": self.state, "type": self.type, "client": self.client, **extra}
        query = urllib.parse.urlencode({k: v for k, v in wanted.items() if v})
        return f"{JOBS_PATH}?{query}" if query else JOBS_PATH


@dataclass(frozen=True)
class Paging:
    """Where this page is: its cursor and the trail of cursors before it."""

    cursor: str
    trail: list[str]

    @classmethod
    def of(cls, cursor: str, trail: str) -> Paging:
        return cls(cursor, [step for step in trail.split(",") if step][-TRAIL_MAX:])

    def links(self, filters: Linked, next_cursor: str | None) -> dict[str, str | None]:
        here = self.cursor or FIRST_PAGE
        forward = None
        if next_cursor is not None:
            forward = filters.link(cursor=next_cursor, trail=",".join([*self.trail, here]))
        back = None
        if self.trail:
            previous = self.trail[-1]
            back = filters.link(
                cursor="" if previous == FIRST_PAGE else previous, trail=",".join(self.trail[:-1])
            )
        elif self.cursor:  # the trail was cut short: back to the start
            back = filters.link()
        newest = filters.link() if self.cursor else None
        return {"next": forward, "previous": back, "newest": newest}


def _page(cursor: str) -> Page:
    try:
        return Page(PAGE_SIZE, decode_cursor(cursor) if cursor else None)
    except InvalidCursor:
        raise PageError(
            400, "This page link is not valid", "Start again from the newest jobs."
        ) from None


async def listing(
    request: Request,
    operator: Operator,
    filters: Filters,
    paging: Paging,
    *,
    notice: str | None = None,
    status: int = 200,
    find_value: str = "",
) -> Response:
    if filters.state and filters.state not in STATES:
        raise PageError(400, "Unknown state", f"A job's state is one of {', '.join(STATES)}.")
    page = _page(paging.cursor)
    store = store_of(request)
    clients = await ClientStore(store).list_clients()
    owners = [c for c in clients if c.name == filters.client] if filters.client else clients
    jobs = await store.list_jobs_of_clients(
        [owner.id for owner in owners],
        state=filters.state or None,
        job_type=filters.type or None,
        limit=page.limit,
        after=page.after,
    )
    names = {client.id: client.name for client in clients}
    context: dict[str, Any] = {
        "rows": [(job, names.get(job.client_id, "?")) for job in jobs],
        "filters": filters,
        "states": STATES,
        "client_names": [client.name for client in clients],
        "links": paging.links(filters, page.next_cursor(jobs)),
        "notice": notice,
        "find_value": find_value,
        "unknown_client": bool(filters.client) and not owners,
    }
    return await render(request, "jobs.html", context, status=status, operator=operator)


@router.get(JOBS_PATH)
async def jobs_page(
    request: Request,
    operator: OperatorDep,
    state: Text = "",
    type: Text = "",
    client: Text = "",
    cursor: Annotated[str, Query(max_length=200)] = "",
    trail: Annotated[str, Query(max_length=200 * TRAIL_MAX)] = "",
) -> Response:
    filters = Filters(state.strip(), type.strip(), client.strip())
    return await listing(request, operator, filters, Paging.of(cursor, trail))


@router.get(JOBS_PATH + "/find")
async def find_job(request: Request, operator: OperatorDep, id: Text = "") -> Response:
    """To the job's page; a malformed or unknown id is said so on the listing."""
    wanted = parse_job_id(id)
    if wanted is not None and await store_of(request).get_job(wanted) is not None:
        return await redirect(request, f"{JOBS_PATH}/{wanted}")
    if wanted is None:
        notice, status = f"{id.strip()!r} is not a job id (a UUID).", 400
    else:
        notice, status = f"There is no job {wanted}.", 404
    empty = Filters("", "", "")
    return await listing(
        request, operator, empty, Paging.of("", ""), notice=notice, status=status, find_value=id
    )


@dataclass(frozen=True)
class Progress:
    """What a job's handler last reported (``Job.progress``), as its bar shows it."""

    fraction: float  # 0 to 1
    percent: str
    message: str | None
    at: str


def progress_of(reported: Mapping[str, Any] | None) -> Progress | None:
    """The bar of a report, or None without one. The consumer checked the fraction when the
    handler reported it; it is clamped anyway, so a row written by hand cannot skew a bar."""
    if not reported:
        return None
    try:
        fraction = min(max(float(reported.get("fraction") or 0), 0.0), 1.0)
    except (TypeError, ValueError):
        fraction = 0.0
    message = reported.get("message")
    return Progress(
        fraction=fraction,
        percent=f"{fraction * 100:.0f}%",
        message=None if message is None else str(message),
        at=_reported_at(reported.get("at")),
    )


@dataclass(frozen=True)
class StepRow:
    """A recorded step as the job page's table shows it: its value as indented JSON text (the
    template escapes it and folds it away)."""

    name: str
    kind: str
    status: str
    attempt: int
    at: str
    wake_at: str | None
    child_id: uuid.UUID | None
    value: str


def step_row(step: StepRecord) -> StepRow:
    return StepRow(
        name=step.name,
        kind=step.kind.value,
        status=step.status.value.replace("_", " "),
        attempt=step.attempt,
        at=when(step.at),
        wake_at=when(step.wake_at) if step.wake_at else None,
        child_id=step.child_id,
        value=pretty_json(step.value),
    )


def _reported_at(value: Any) -> str:
    try:
        return when(value) if isinstance(value, str) else "—"
    except ValueError:  # not ISO time: shown as it is
        return str(value)


@router.get(JOBS_PATH + "/{job_id}")
async def job_page(request: Request, operator: OperatorDep, job_id: str) -> Response:
    wanted = parse_job_id(job_id)
    store = store_of(request)
    trace = await store.trace(wanted) if wanted is not None else None
    if trace is None:
        raise PageError(404, "No such job", "No job has this id (retention may have deleted it).")
    job = trace.job
    # The operators' view shows what each step recorded (folded): read with the values.
    steps = await store.steps_of(job.id, with_values=True) if job.steps else ()
    # The operators' view: failures with their tracebacks, times as the page writes them.
    document = trace_document(trace, moment=when)
    replayable = job.state == JobState.QUARANTINED
    context = {
        "job": job,
        "trace": document,
        "client_name": trace.client_name,
        "payload": pretty_json(job.payload),
        "result": pretty_json(trace.result.result) if trace.result else None,
        "failure": document["last_failure"],
        "timeline": timeline(trace.events),
        "outbox": trace.outbox,
        "progress": progress_of(job.progress),
        "steps": [step_row(step) for step in steps],
        "signals": trace.signals,
        "cancellable": job.state in CANCELLABLE and job.cancel_requested_at is None,
        "replayable": replayable,
        "broker_down": replayable and not await context_of(request).console_broker.reachable(),
    }
    return await render(request, "job.html", context, operator=operator)


CANCEL_OUTCOMES = {
    CancelAnswer.CANCELLED: "Cancelled.",
    CancelAnswer.REQUESTED: "Cancel requested: its consumer stops the handler, and the job "
    "ends cancelled unless the attempt finishes first.",
}


@router.post(JOBS_PATH + "/{job_id}/cancel")
async def cancel_job(request: Request, operator: ActingDep, job_id: uuid.UUID) -> Response:
    try:
        answer, _ = await cancel_any_job(
            store_of(request), job_id, how=f"in the console ({operator.name})"
        )
        flash = Flash("ok", CANCEL_OUTCOMES[answer])
    except JobNotFound:
        flash = Flash("error", "Not cancelled: the job is gone.")
    except NotCancellable as error:
        flash = Flash("error", f"Not cancelled: {error.detail}.")
    return await redirect(request, f"{JOBS_PATH}/{job_id}", flash)
