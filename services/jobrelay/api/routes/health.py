"""``/healthz``, ``/readyz`` and ``/metrics``: public, for probes and scrapers."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from jobrelay.api import openapi
from jobrelay.api.context import context_of
from jobrelay.api.schemas import Health
from jobrelay.core.errors import BrokerUnavailable, StoreUnavailable

router = APIRouter(route_class=openapi.JsonBodyRoute, tags=["health"])


@router.get(
    "/healthz", operation_id="getLiveness", response_model=Health, summary="The process is alive"
)
async def healthz() -> Health:
    return Health(status="ok")


@router.get(
    "/readyz",
    operation_id="getReadiness",
    response_model=Health,
    responses={503: {"model": Health}},
    summary="The database and the broker are reachable",
)
async def readyz(request: Request) -> Any:
    context = context_of(request)
    probe = context.broker_probe  # one connection (broker/health.py)
    checks: dict[str, str] = {}
    try:
        await context.store.ping()
        checks["database"] = "ok"
    except StoreUnavailable:
        checks["database"] = "unavailable"
    try:
        await probe.check()
        checks["broker"] = "ok"
    except BrokerUnavailable:
        checks["broker"] = "unavailable"
    ready = all(value == "ok" for value in checks.values())
    body = Health(status="ok" if ready else "unavailable", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)


@router.get(
    "/metrics",
    operation_id="getMetrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(request: Request) -> Response:
    context = context_of(request)
    owned = context.metrics
    # The system's counts, read at most every few seconds by this worker (never an error).
    await owned.stats.refresh(context.store)
    return Response(owned.exposition(), media_type=CONTENT_TYPE_LATEST)
