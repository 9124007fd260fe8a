"""The work queues' figures as the database holds them (docs/flow-control.md): for
``GET /v1/admin/queues``, ``jobrelay queues list``, ``stats`` and the console. The broker's
half (``window_in_use``: ready messages, and ``consumers``) is ``broker/depth.py``'s
``queue_depths``."""

from __future__ import annotations

from collections.abc import Mapping

from jobrelay.core.relay import QueueFigures
from jobrelay.db import queries as q
from jobrelay.db.relay_store import route_params
from jobrelay.db.store import Store


async def queue_figures(store: Store, routes: Mapping[str, str]) -> list[QueueFigures]:
    """Every queue of the ``queues`` table (and any a route names), by name: paused, backlog
    (due, unpublished, not leased) and running. ``routes``: JOBRELAY_TYPE_QUEUES with short
    queue names (``jobrelay.dispatcher.window.short_routes``)."""
    paused = {row.name: bool(row.paused) for row in await store.fetch_all(q.QUEUES)}
    params = route_params(routes)
    backlogs = {r.queue: int(r.n) for r in await store.fetch_all(q.QUEUE_BACKLOGS, **params)}
    running = {r.queue: int(r.n) for r in await store.fetch_all(q.QUEUE_RUNNING, **params)}
    names = sorted({*paused, *routes.values(), *backlogs, *running})
    return [
        QueueFigures(
            name=name,
            paused=paused.get(name, False),
            backlog=backlogs.get(name, 0),
            running=running.get(name, 0),
        )
        for name in names
    ]
