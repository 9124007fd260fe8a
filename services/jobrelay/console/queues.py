"""The work queues (the report of ``GET /v1/admin/queues`` and ``jobrelay queues list``), each
with a pause or resume button. The broker's figures come through the API's kept connection;
without the broker they show as unknown and the buttons still work (a pause is a row)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request, Response

from jobrelay.console.context import context_of
from jobrelay.console.security import Flash
from jobrelay.console.web import (
    ActingDep,
    ConsoleRoute,
    OperatorDep,
    redirect,
    render,
    settings_of,
    store_of,
)
from jobrelay.core.queues import QUEUE_NAME_MAX
from jobrelay.core.settings import parse_type_queues
from jobrelay.db.flow_store import FlowStore

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

QUEUES_PATH = "/ui/queues"
Name = Annotated[str, Form(max_length=QUEUE_NAME_MAX)]


@router.get(QUEUES_PATH)
async def queues_page(request: Request, operator: OperatorDep) -> Response:
    probe = context_of(request).broker_probe
    routes = parse_type_queues(settings_of(request).type_queues)
    report = await FlowStore(store_of(request)).queues_report(routes, probe.queue_depths)
    context = {"report": report, "queues": report.as_document()["queues"]}
    return await render(request, "queues.html", context, operator=operator)


def _no_such(name: str) -> Flash:
    return Flash("error", f"There is no queue named {name!r}.")


@router.post(QUEUES_PATH + "/pause")
async def pause_queue(request: Request, operator: ActingDep, name: Name) -> Response:
    if not await FlowStore(store_of(request)).pause_queue(name, by=operator.name):
        return await redirect(request, QUEUES_PATH, _no_such(name))
    text = f"Queue {name!r} paused: none of its jobs is claimed or published until it is resumed."
    return await redirect(request, QUEUES_PATH, Flash("ok", text))


@router.post(QUEUES_PATH + "/resume")
async def resume_queue(request: Request, operator: ActingDep, name: Name) -> Response:
    if not await FlowStore(store_of(request)).resume_queue(name):
        return await redirect(request, QUEUES_PATH, _no_such(name))
    return await redirect(request, QUEUES_PATH, Flash("ok", f"Queue {name!r} resumed."))
