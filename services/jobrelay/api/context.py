"""``ApiContext``: everything the API's routes, dependencies and problem handlers (and the
console's pages) read, as one typed value, built by one wiring (``wire``), held by the app as
``app.state.context`` (``hold``) and read through ``context_of``, typed, for the cost of an
attribute read.

It exists once the app can serve: ``create_app``'s lifespan wires it at startup, on the store
it opens (``api/app.py``); given a store (tests, benchmarks), ``create_app`` wires it at once,
on that store. An app that only writes its OpenAPI document has none.
"""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request
from starlette.applications import Starlette

from jobrelay.api.metrics import ApiMetrics
from jobrelay.api.waiting import FinishWaiters
from jobrelay.auth import Authenticator
from jobrelay.broker.health import BrokerProbe
from jobrelay.console.broker import BrokerCheck
from jobrelay.console.context import ConsoleContext
from jobrelay.console.keys import ConsoleKey
from jobrelay.core.clients import RateLimit
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings
from jobrelay.core.type_catalog import RegisteredTypes
from jobrelay.db.store import Store
from jobrelay.db.type_store import PgTypeStore


@dataclass(frozen=True, slots=True)
class ApiContext:
    """Frozen: no reader can swap a part for the others (``wire`` builds it whole)."""

    settings: Settings
    # The job types whose handlers this process loads (JOBRELAY_HANDLERS).
    registry: Registry
    # Open from startup to shutdown: the lifespan's, or the test's that injected it.
    store: Store
    # Token lookups, cached while the listener runs (api/notifications.py).
    auth: Authenticator
    # What submissions are validated against: the registry first, then the schemas the
    # consumers registered (core/type_catalog.py).
    types: RegisteredTypes
    # The app's own, shared with its middleware (metrics_dir: api/multiprocess.py).
    metrics: ApiMetrics
    # The ?wait= requests, woken by the listener's finished jobs (api/waiting.py).
    waiters: FinishWaiters
    # Every client's submission limit unless its row sets its own (docs/overload.md); None
    # when JOBRELAY_RATE_LIMIT_PER_SECOND is unset: no limit but the client's own.
    rate_limit: RateLimit | None
    # /readyz's and the console's kept broker connection, opened by the first probe and
    # closed at shutdown (broker/health.py).
    broker_probe: BrokerProbe
    # The console's (console/context.py): its session key, and its banner's answer over
    # broker_probe.
    console_key: ConsoleKey
    console_broker: BrokerCheck


def wire(settings: Settings, registry: Registry, store: Store, metrics: ApiMetrics) -> ApiContext:
    """The one wiring of the API's context, in production as in the tests. ``metrics`` is made
    before it, with the app: the middleware holds them."""
    broker_probe = BrokerProbe(settings.amqp_url)
    return ApiContext(
        settings=settings,
        registry=registry,
        store=store,
        auth=Authenticator(store),
        types=RegisteredTypes(PgTypeStore(store), registry),
        metrics=metrics,
        waiters=FinishWaiters(),
        rate_limit=RateLimit.of(settings.rate_limit_per_second, settings.rate_limit_burst),
        broker_probe=broker_probe,
        console_key=ConsoleKey(settings.console_secret),
        console_broker=BrokerCheck(broker_probe.check),
    )


def hold(app: Starlette, context: ApiContext) -> None:
    """The one place the app is given its context. The console reads the same value as its
    ``ConsoleContext`` (it imports nothing of the API): the annotation has mypy check that
    ``ApiContext`` has every member the console reads."""
    console_view: ConsoleContext = context
    app.state.context = console_view


def context_of(request: Request) -> ApiContext:
    """The app's context (``hold``): one attribute read, typed."""
    context: ApiContext = request.app.state.context
    return context
