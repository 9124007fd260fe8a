"""The overview: the system at one instant (the same ``SystemStats`` as ``GET /v1/admin/stats``
and ``jobrelay stats``) and the last hour's finished jobs per minute, as a chart; and a banner
while the broker is unreachable (``console/broker.py``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request, Response

from jobrelay.console.broker import BrokerCheck
from jobrelay.console.charts import minute_chart
from jobrelay.console.context import context_of
from jobrelay.console.web import ConsoleRoute, OperatorDep, render, store_of
from jobrelay.core.states import JobState
from jobrelay.db.store import Store

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

LIVE_PATH = "/ui/overview/live"
# How often the page's script asks for a fresh fragment (the page works without it).
LIVE_SECONDS = 5


async def overview_context(store: Store, broker: BrokerCheck) -> dict[str, Any]:
    stats = await store.stats()
    chart = minute_chart(await store.finished_per_minute())
    return {
        "stats": stats,
        "states": [(state.value, stats.jobs_by_state.get(state.value, 0)) for state in JobState],
        "chart": chart,
        "broker_down": not await broker.reachable(),
        "as_of": datetime.now(UTC),
        "live_path": LIVE_PATH,
        "live_seconds": LIVE_SECONDS,
    }


@router.get("/ui/")
async def overview(request: Request, operator: OperatorDep) -> Response:
    context = await overview_context(store_of(request), context_of(request).console_broker)
    return await render(request, "overview.html", context, operator=operator)


@router.get(LIVE_PATH)
async def overview_live(request: Request, operator: OperatorDep) -> Response:
    """The overview's body alone, for the page's refresh script."""
    context = await overview_context(store_of(request), context_of(request).console_broker)
    response = await render(
        request, "overview_body.html", context, operator=operator, fragment=True
    )
    response.headers["X-Console-Fragment"] = "overview"
    return response
