"""The periodic schedules of the API's registry (``JOBRELAY_HANDLERS``), each with its latest
tick, that tick's job and the next tick: the document of ``jobrelay schedules``."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from jobrelay.console.context import context_of
from jobrelay.console.web import ConsoleRoute, OperatorDep, PageError, render, store_of
from jobrelay.core.schedules import SCHEDULER_CLIENT
from jobrelay.db.schedule_store import ScheduleStore
from jobrelay.operations import schedule_document

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get("/ui/schedules")
async def schedules_page(request: Request, operator: OperatorDep) -> Response:
    registry = context_of(request).registry
    store = ScheduleStore(store_of(request))
    now = await store.now()
    client_id = await store.scheduler_client_id()
    if client_id is None:
        raise PageError(
            503,
            "The console is not ready",
            f"The database has no client {SCHEDULER_CLIENT!r}: run jobrelay migrate.",
        )
    schedules = sorted(registry.schedules.values(), key=lambda schedule: schedule.name)
    documents = [await schedule_document(s, now, store, client_id) for s in schedules]
    context = {"now": now, "schedules": documents}
    return await render(request, "schedules.html", context, operator=operator)
