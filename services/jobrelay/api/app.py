"""The FastAPI application: ``create_app`` builds it from the settings: the context its routes
read (``api/context.py``: the store, the registry, the metrics...), the middleware and the
routers (``api/routes/``); the routes are thin, the store and the registry do the work."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from jobrelay import console, telemetry
from jobrelay.api import context, openapi, problems
from jobrelay.api.body_size import BodySizeMiddleware
from jobrelay.api.context import ApiContext
from jobrelay.api.metrics import ApiMetrics, RequestMetricsMiddleware
from jobrelay.api.notifications import ApiNotifications
from jobrelay.api.routes import admin, flow, health, jobs, workflows
from jobrelay.api.routes.jobs import BATCH_PATH
from jobrelay.api.routes.workflows import SUBMIT_PATH as WORKFLOWS_PATH
from jobrelay.api.shedding import SheddingMiddleware
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.db.listener import listen_url_for
from jobrelay.db.store import Store
from jobrelay.handlers.loading import registry_for

log = logging.getLogger("jobrelay.api")


def _without_fastapi_spans() -> dict[str, Any]:
    """FastAPI's own spans stay off (every request's: probes, scrapes, the console): a job's
    trace has one API span, ``jobrelay.accept``, the server span (``telemetry.py``). Only the
    FastAPI versions that trace by themselves take the ``telemetry`` argument."""
    if "telemetry" in inspect.signature(FastAPI.__init__).parameters:
        return {"telemetry": {"tracing": False}}
    return {}


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    registry: Registry | None = None,
    metrics_dir: Path | None = None,
) -> FastAPI:
    """The API's app. Without ``store`` (production) its lifespan opens one at startup and
    wires the app's context on it (``api/context.py``); with ``store`` (tests, benchmarks) the
    context is wired at once on that store, whose owner closes it, and nothing listens."""
    # The job types whose handlers this process loads (JOBRELAY_HANDLERS); submissions of
    # the others are validated against the schemas the consumers registered (ApiContext.types).
    registry = registry or registry_for(settings)
    log.info(
        "job types: %s",
        ", ".join(sorted(registry.types)),
        extra={"event": "job_types", "types": ",".join(sorted(registry.types))},
    )
    # metrics_dir: shared with the other workers (api/multiprocess.py).
    metrics = ApiMetrics(metrics_dir)
    if store is None:
        injected = None
        lifespan = _serving(settings, registry, metrics)
    else:
        injected = context.wire(settings, registry, store, metrics)
        lifespan = _on_injected_store(injected)
    app = FastAPI(
        title="jobrelay",
        version="1",
        description="Durable background jobs: accepted means recorded, with its outbox row.",
        openapi_tags=openapi.TAGS,
        lifespan=lifespan,
        **_without_fastapi_spans(),
    )
    if injected is not None:
        context.hold(app, injected)
    problems.install(app)
    app.add_middleware(
        BodySizeMiddleware,
        max_body_bytes=settings.max_body_bytes,
        per_path={BATCH_PATH: settings.max_batch_bytes, WORKFLOWS_PATH: settings.max_batch_bytes},
    )
    # Outside the body limit: a shed request's body is never read.
    app.add_middleware(
        SheddingMiddleware,
        admitted=settings.admitted_requests,
        max_queue_seconds=settings.api_max_queue_seconds,
        metrics=metrics,
        waiting_reads={jobs.get_job},
    )
    app.add_middleware(RequestMetricsMiddleware, metrics=metrics)
    for routes in (jobs, workflows, admin, flow, health):
        app.include_router(routes.router)
    console.install(app)  # /ui/: the operator console and its assets (docs/console.md)
    openapi.install(app, registry)
    return app


Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[None]]


def _serving(settings: Settings, registry: Registry, metrics: ApiMetrics) -> Lifespan:
    """Production's lifespan: the store opened, the context wired on it, the registered types
    kept fresh and the notifications listened to, until shutdown closes them all."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        store = Store.connect(
            settings.database_url,
            pool_size=settings.db_pool_size,
            pool_timeout=settings.db_pool_timeout_seconds,
            application_name="jobrelay-api",
            pool_mode=settings.pool_mode,
            schema=settings.database_schema,
        )
        wired = context.wire(settings, registry, store, metrics)
        context.hold(app, wired)
        # Token lookups are cached, and ?wait requests wait, while this listens (one
        # connection: api/notifications.py); behind a transaction pooler with no direct URL
        # nothing listens: every token is looked up and waiters poll.
        listen_url = listen_url_for(settings, "API")
        # The registered job types are read again on a registration's NOTIFY, on a miss
        # (at most once a second) and every 30 s (core/type_catalog.py).
        notifications = ApiNotifications(wired.auth, wired.waiters, wired.types)
        tasks = [asyncio.create_task(wired.types.keep_fresh())]
        if listen_url is not None:
            tasks.append(asyncio.create_task(notifications.listen(listen_url)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()
                # Cancelled, or ended by a bug: either way the cache was no longer trusted.
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await wired.broker_probe.close()
            await store.close()
            # Here, not at exit: uvicorn ends a process it stopped on SIGTERM by that signal,
            # and atexit handlers do not run then.
            await asyncio.to_thread(telemetry.shutdown)

    return lifespan


def _on_injected_store(injected: ApiContext) -> Lifespan:
    """The lifespan on an injected store: its owner closes it; the app closes its broker
    connection."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await injected.broker_probe.close()

    return lifespan
