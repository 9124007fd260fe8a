"""The workflows (docs/workflows.md): their listing, newest first, and one workflow: its graph
drawn as inline SVG, its jobs' states and progress, and cancelling it. The data is
``WorkflowStore.list_workflows`` and ``WorkflowStore.view`` (any client's: operators see them
all), the same view as ``GET /v1/workflows/{id}``.

The drawing is computed here as numbers (``layout``, pure): each job a box in the column of its
depth, each edge a line from a parent's box to its child's. The template only places them, so
everything it shows goes through its escaping.
"""

from __future__ import annotations

import urllib.parse
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from jobrelay.console.jobs import (
    JOBS_PATH,
    PAGE_SIZE,
    TRAIL_MAX,
    Paging,
    Progress,
    progress_of,
)
from jobrelay.console.security import Flash
from jobrelay.console.web import (
    ActingDep,
    ConsoleRoute,
    OperatorDep,
    PageError,
    parse_job_id,
    redirect,
    render,
    store_of,
)
from jobrelay.core.errors import InvalidCursor
from jobrelay.core.pages import Page, decode_cursor
from jobrelay.core.states import TERMINAL_STATES
from jobrelay.core.workflows import WorkflowJob, WorkflowState, WorkflowView, check_workflow
from jobrelay.db.client_store import ClientStore
from jobrelay.db.workflow_store import WorkflowStore

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

WORKFLOWS_PATH = "/ui/workflows"

# The drawing's geometry, in SVG units (the picture scales to the page's width).
BOX_WIDTH = 210
BOX_HEIGHT = 78
COLUMN_GAP = 64  # room for the edges between two columns
ROW_GAP = 18
MARGIN = 12
BAR_INSET = 10  # the progress bar's inset from the box's sides
LABEL_CHARS = 26  # what fits on a box's line; the full text is the box's tooltip


def no_such_workflow() -> PageError:
    return PageError(404, "No such workflow", "No workflow has this id.")


def depths(after: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each ref's depth: 0 for a job that waits for none, else 1 + its deepest parent's.

    ``after`` is every ref with the refs it waits for, an acyclic graph as every stored
    workflow is; ``check_workflow``'s order puts each parent before its children."""
    depth: dict[str, int] = {}
    for ref in check_workflow(list(after.items())):
        depth[ref] = 1 + max((depth[parent] for parent in after[ref]), default=-1)
    return depth


@dataclass(frozen=True)
class Box:
    """One job as the drawing shows it."""

    job: WorkflowJob
    x: float
    y: float
    ref_label: str
    type_label: str
    progress: Progress | None
    bar_width: float  # the filled part of the progress bar

    @property
    def href(self) -> str:
        return f"{JOBS_PATH}/{self.job.id}"


@dataclass(frozen=True)
class Edge:
    """A line from the parent's box (its right side) to the child's (its left side)."""

    parent: str
    child: str
    x1: float
    y1: float
    x2: float
    y2: float


@dataclass(frozen=True)
class Graph:
    width: float
    height: float
    box_width: int
    box_height: int
    bar_inset: int
    boxes: list[Box]
    edges: list[Edge]


def shorten(text: str, limit: int = LABEL_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def layout(jobs: Sequence[WorkflowJob]) -> Graph:
    """Columns by depth, the jobs of a column in the order they were submitted."""
    depth = depths({job.ref: job.after for job in jobs})
    rows_used: dict[int, int] = {}
    boxes: dict[str, Box] = {}
    for job in jobs:
        column = depth[job.ref]
        row = rows_used.get(column, 0)
        rows_used[column] = row + 1
        progress = progress_of(job.progress)
        bar = (BOX_WIDTH - 2 * BAR_INSET) * (progress.fraction if progress else 0)
        boxes[job.ref] = Box(
            job=job,
            x=MARGIN + column * (BOX_WIDTH + COLUMN_GAP),
            y=MARGIN + row * (BOX_HEIGHT + ROW_GAP),
            ref_label=shorten(job.ref),
            type_label=shorten(job.type),
            progress=progress,
            bar_width=round(bar, 1),
        )
    edges = [_edge(boxes[parent], boxes[job.ref]) for job in jobs for parent in job.after]
    columns = max(depth.values(), default=-1) + 1
    rows = max(rows_used.values(), default=0)
    return Graph(
        width=2 * MARGIN + columns * BOX_WIDTH + max(columns - 1, 0) * COLUMN_GAP,
        height=2 * MARGIN + rows * BOX_HEIGHT + max(rows - 1, 0) * ROW_GAP,
        box_width=BOX_WIDTH,
        box_height=BOX_HEIGHT,
        bar_inset=BAR_INSET,
        boxes=list(boxes.values()),
        edges=edges,
    )


def _edge(parent: Box, child: Box) -> Edge:
    middle = BOX_HEIGHT / 2
    return Edge(
        parent=parent.job.ref,
        child=child.job.ref,
        x1=parent.x + BOX_WIDTH,
        y1=parent.y + middle,
        x2=child.x,
        y2=child.y + middle,
    )


def cancellable(view: WorkflowView) -> bool:
    """Not cancelled yet, and a job of it has not finished (so the cancel would change one)."""
    return view.cancelled_at is None and any(job.state not in TERMINAL_STATES for job in view.jobs)


async def _view(request: Request, workflow_id: str) -> WorkflowView:
    wanted = parse_job_id(workflow_id)  # a UUID, as a job's id is
    view = await WorkflowStore(store_of(request)).view(wanted) if wanted is not None else None
    if view is None:
        raise no_such_workflow()
    return view


WORKFLOW_STATES = [state.value for state in WorkflowState]


@dataclass(frozen=True)
class WorkflowFilters:
    state: str
    client: str

    def link(self, **extra: str) -> str:
        """The listing with these filters (and ``extra``, e.g. a cursor)."""
        wanted = {"state": self.state, "client": self.client, **extra}
        query = urllib.parse.urlencode({k: v for k, v in wanted.items() if v})
        return f"{WORKFLOWS_PATH}?{query}" if query else WORKFLOWS_PATH


def _page(cursor: str) -> Page:
    try:
        return Page(PAGE_SIZE, decode_cursor(cursor) if cursor else None)
    except InvalidCursor:
        raise PageError(
            400, "This page link is not valid", "Start again from the newest workflows."
        ) from None


@router.get(WORKFLOWS_PATH)
async def workflows_page(
    request: Request,
    operator: OperatorDep,
    state: Annotated[str, Query(max_length=200)] = "",
    client: Annotated[str, Query(max_length=200)] = "",
    cursor: Annotated[str, Query(max_length=200)] = "",
    trail: Annotated[str, Query(max_length=200 * TRAIL_MAX)] = "",
) -> Response:
    """Every client's workflows (or one client's, of one state), newest first, a page at a
    time."""
    filters = WorkflowFilters(state.strip(), client.strip())
    if filters.state and filters.state not in WORKFLOW_STATES:
        raise PageError(
            400, "Unknown state", f"A workflow's state is one of {', '.join(WORKFLOW_STATES)}."
        )
    paging = Paging.of(cursor, trail)
    page = _page(paging.cursor)
    store = store_of(request)
    clients = await ClientStore(store).list_clients()
    owner = next((c for c in clients if c.name == filters.client), None)
    workflows = []
    if not filters.client or owner is not None:
        workflows = await WorkflowStore(store).list_workflows(
            client_id=owner.id if owner else None,
            limit=page.limit,
            after=page.after,
            state=WorkflowState(filters.state) if filters.state else None,
        )
    names = {c.id: c.name for c in clients}
    context = {
        "rows": [(w, names.get(w.client_id, "?"), sorted(w.counts.items())) for w in workflows],
        "filters": filters,
        "states": WORKFLOW_STATES,
        "client_names": [c.name for c in clients],
        "links": paging.links(filters, page.next_cursor(workflows)),
        "unknown_client": bool(filters.client) and owner is None,
    }
    return await render(request, "workflows.html", context, operator=operator)


@router.get(WORKFLOWS_PATH + "/{workflow_id}")
async def workflow_page(request: Request, operator: OperatorDep, workflow_id: str) -> Response:
    view = await _view(request, workflow_id)
    context = {
        "workflow": view,
        "graph": layout(view.jobs),
        "counts": sorted(view.counts.items()),
        "cancellable": cancellable(view),
    }
    return await render(request, "workflow.html", context, operator=operator)


@router.post(WORKFLOWS_PATH + "/{workflow_id}/cancel")
async def cancel_workflow(
    request: Request, operator: ActingDep, workflow_id: uuid.UUID
) -> Response:
    view = await WorkflowStore(store_of(request)).cancel(
        workflow_id, None, detail=f"by an operator in the console ({operator.name})"
    )
    if view is None:
        raise no_such_workflow()
    flash = Flash(
        "ok",
        "Workflow cancelled: its jobs that had not started are cancelled, its running ones "
        "asked to stop.",
    )
    return await redirect(request, f"{WORKFLOWS_PATH}/{workflow_id}", flash)
