"""The app's routes looked up outside its router: by the shedding middleware, which answers
before routing (a shed request is still counted under its route template, and only the job read
that waits is exempt), and by a 405's ``Allow`` (every method served at the path)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from fastapi import routing as fastapi_routing
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

_CACHE_KEY = "jobrelay_flat_routes"


def flat_routes(routes: Sequence[BaseRoute]) -> Iterator[BaseRoute]:
    """The routes one by one: recent FastAPI versions keep an included router as one route
    that holds the router's own (``iter_route_contexts`` walks them); older ones copied each
    route into the app's router."""
    walk = getattr(fastapi_routing, "iter_route_contexts", None)
    if walk is None:
        yield from routes
        return
    for context in walk(routes):
        yield context.original_route


def app_routes(scope: Scope) -> list[BaseRoute]:
    """The flat routes of the app serving this request, listed once per app (its routes are
    all included before it serves its first request)."""
    app = scope["app"]
    cached: list[BaseRoute] | None = getattr(app.state, _CACHE_KEY, None)
    if cached is None:
        cached = list(flat_routes(app.router.routes))
        setattr(app.state, _CACHE_KEY, cached)
    return cached


def route_of(scope: Scope) -> BaseRoute | None:
    """The route that serves this path and method, or None (also outside an app)."""
    if "app" not in scope:
        return None
    for route in app_routes(scope):
        match, _ = route.matches(scope)
        if match is Match.FULL:
            return route
    return None


def path_template(route: BaseRoute | None) -> str:
    """The route's template as the OpenAPI document names it (``/v1/jobs/{job_id}``), or
    ``unmatched``."""
    return getattr(route, "path_format", None) or "unmatched"


def allowed_methods(scope: Scope) -> list[str]:
    """Every method some route serves at this path, sorted: Starlette's 405 names only the
    methods of the first route whose path matched (``/v1/jobs`` has a GET route and a POST
    route)."""
    methods: set[str] = set()
    for route in app_routes(scope):
        match, _ = route.matches(scope)
        if match is not Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)
