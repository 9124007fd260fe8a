"""The sequences with jobs waiting in line (``GET /v1/admin/sequences``, ``jobrelay sequences
list``), blocked first, each blocker linking to its job's page, where its replay and cancel
buttons are (either one unblocks the sequence: docs/flow-control.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from jobrelay.console.web import ConsoleRoute, OperatorDep, render, store_of
from jobrelay.db.sequence_store import SequenceStore

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

SEQUENCES_PATH = "/ui/sequences"


@router.get(SEQUENCES_PATH)
async def sequences_page(
    request: Request, operator: OperatorDep, blocked: Annotated[bool, Query()] = False
) -> Response:
    listed = await SequenceStore(store_of(request)).waiting(blocked=blocked)
    context = {"sequences": listed, "blocked": blocked}
    return await render(request, "sequences.html", context, operator=operator)
