"""What every page of the console shares: the templates, the signed-in operator and the CSRF
check (dependencies), the session and flash cookies, redirects, and the route class that turns
any error into an HTML page (never problem+json, never a traceback).

Templates are Jinja2 with autoescape on for every template: a payload, a result, an error, a
type or a client name is always text on the page, whatever it holds.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
import uuid
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from jinja2 import Environment, FileSystemLoader, StrictUndefined
from starlette.exceptions import HTTPException
from starlette.staticfiles import StaticFiles
from starlette.types import Scope

from jobrelay.console.context import context_of
from jobrelay.console.keys import ConsoleNotReady
from jobrelay.console.security import (
    Flash,
    Session,
    csrf_matches,
    csrf_token,
    read_flash,
    read_session,
    sign_flash,
)
from jobrelay.core.clients import ClientListing
from jobrelay.core.errors import BrokerUnavailable, StoreUnavailable
from jobrelay.core.settings import Settings
from jobrelay.db.client_store import ClientStore
from jobrelay.db.quarantine_store import QuarantineBusy
from jobrelay.db.store import Store
from jobrelay.operations import Operations

log = logging.getLogger("jobrelay.console")

SESSION_COOKIE = "jobrelay_console"
FLASH_COOKIE = "jobrelay_console_flash"
COOKIE_PATH = "/ui"
CSRF_FIELD = "csrf"
SIGNIN_PATH = "/ui/signin"
STATIC_PATH = "/ui/static"
HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"

# Every console answer: only our own scripts, styles and images (no inline script can run even
# if one slipped into a page), never framed, never cached, no referrer to other sites.
PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def when(value: datetime | str | None) -> str:
    """A moment (or its ISO text, as the trace and reports hold it) as operators compare it
    across machines: UTC, to the millisecond."""
    if value is None:
        return "—"
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


def moment(value: datetime | str | None) -> str:
    """``when`` without its " UTC", for table cells under a "(UTC)" heading."""
    return when(value).removesuffix(" UTC")


def count(value: int) -> str:
    """A count with thousands separators: 966,667."""
    return f"{value:,}"


def pretty_json(value: Any) -> str:
    """JSON as indented text (the template escapes it like any other text)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


TEMPLATES = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=True,  # every template, whatever its name
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
TEMPLATES.filters["when"] = when
TEMPLATES.filters["count"] = count
TEMPLATES.filters["moment"] = moment


# --- errors ----------------------------------------------------------------------------------


class NotSignedIn(Exception):
    """No valid session, or its client is gone, disabled or no longer an admin."""


class CsrfRefused(Exception):
    """A form that changes something came without its CSRF token, or with a wrong one."""


class PageError(Exception):
    """A page of its own for a request that cannot be answered: its status and message."""

    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(title)
        self.status = status
        self.title = title
        self.message = message


class ConsoleRoute(APIRoute):
    """Every console route: security headers on every answer, and any error as an HTML page
    (or, without a session, a 303 to the sign-in page that comes back here afterwards)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def html_errors(request: Request) -> Response:
            try:
                response = await handler(request)
            except Exception as error:
                response = await error_response(request, error)
            response.headers.update(PAGE_HEADERS)
            return response

        return html_errors


async def error_response(request: Request, error: Exception) -> Response:
    if isinstance(error, NotSignedIn):
        return to_signin(request)
    page = _page_error(request, error)
    operator = getattr(request.state, "operator", None)  # set once the session was checked
    return await render(
        request, "error.html", {"error": page}, status=page.status, operator=operator
    )


def _page_error(request: Request, error: Exception) -> PageError:
    if isinstance(error, PageError):
        return error
    if isinstance(error, CsrfRefused):
        return PageError(
            403,
            "Refused: this form did not come from your console session",
            "Its security token is missing or wrong, so nothing was changed. Go back, reload "
            "the page and try again.",
        )
    if isinstance(error, RequestValidationError):
        return PageError(400, "This request is not valid", "Check the form or the link.")
    if isinstance(error, ConsoleNotReady):
        return PageError(503, "The console is not ready", str(error))
    if isinstance(error, StoreUnavailable):
        log.warning("console: database unavailable: %s", error)
        return PageError(
            503,
            "The database is unavailable",
            "Nothing was changed by this request. Try again in a moment.",
        )
    if isinstance(error, QuarantineBusy):
        return PageError(
            503,
            "The quarantine queue is busy",
            "A replay or a sweep holds it right now; nothing was changed. Try again.",
        )
    if isinstance(error, BrokerUnavailable):
        log.warning("console: broker unavailable: %s", error)
        return PageError(
            503,
            "The broker is unreachable",
            "RabbitMQ could not be reached, so nothing was changed. Try again later.",
        )
    if isinstance(error, HTTPException):
        return PageError(error.status_code, "This request cannot be answered", "")
    # The class name only: exception texts may carry payload fragments or URLs.
    log.error(
        "console: unexpected error on %s %s: %s",
        request.method,
        request.url.path,
        type(error).__name__,
    )
    return PageError(500, "Internal error", "Nothing was changed unless the page said so.")


class ConsoleAssets(StaticFiles):
    """The console's stylesheet and script; a missing file is a short HTML page, like every
    other error under /ui (never problem+json)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            return await super().get_response(path, scope)
        except HTTPException as error:
            page = f"<!doctype html><title>{error.status_code}</title><p>No such file.</p>"
            return HTMLResponse(page, status_code=error.status_code, headers=PAGE_HEADERS)


# --- the operator ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operator:
    """The admin client signed in to this request's session."""

    client_id: uuid.UUID
    name: str
    session: Session
    csrf: str


def store_of(request: Request) -> Store:
    return context_of(request).store


def settings_of(request: Request) -> Settings:
    return context_of(request).settings


def operations_of(request: Request) -> Operations:
    context = context_of(request)
    return Operations(context.store, context.settings, context.registry)


async def console_key(request: Request) -> bytes:
    context = context_of(request)
    return await context.console_key.get(context.store)


async def admin_client(store: Store, client_id: uuid.UUID) -> ClientListing | None:
    """The client, if it still exists, is enabled and is an admin (asked on every request: a
    disabled client's session ends at once)."""
    for client in await ClientStore(store).list_clients():
        if client.id == client_id:
            return client if client.is_admin and client.disabled_at is None else None
    return None


async def _operator(request: Request) -> Operator:
    key = await console_key(request)
    session = read_session(key, request.cookies.get(SESSION_COOKIE), now=time.time())
    if session is None:
        raise NotSignedIn()
    client = await admin_client(store_of(request), session.client_id)
    if client is None:
        raise NotSignedIn()
    operator = Operator(client.id, client.name, session, csrf_token(key, session))
    request.state.operator = operator
    return operator


async def _acting_operator(request: Request) -> Operator:
    """The operator, once the form proved it came from their session: checked before the
    route runs, so a refused form changes nothing."""
    operator = await _operator(request)
    sent = (await request.form()).get(CSRF_FIELD)
    key = await console_key(request)
    if not isinstance(sent, str) or not csrf_matches(key, operator.session, sent):
        raise CsrfRefused()
    return operator


OperatorDep = Annotated[Operator, Depends(_operator)]
# For every POST that changes something.
ActingDep = Annotated[Operator, Depends(_acting_operator)]


# --- answers -----------------------------------------------------------------------------------


async def render(
    request: Request,
    template: str,
    context: Mapping[str, Any],
    *,
    status: int = 200,
    operator: Operator | None = None,
    fragment: bool = False,
) -> HTMLResponse:
    """The page, with the flash message of the last action (shown once: its cookie goes);
    a ``fragment`` (a part of a page, refreshed by script) leaves the message for the page."""
    flash = None if fragment else await _take_flash(request)
    html = TEMPLATES.get_template(template).render(
        {
            "operator": operator,
            "flash": flash,
            "path": request.url.path,
            "static": STATIC_PATH,
            "csrf_field": CSRF_FIELD,
            **context,
        }
    )
    response = HTMLResponse(html, status_code=status)
    if flash is not None:
        response.delete_cookie(FLASH_COOKIE, path=COOKIE_PATH)
    return response


async def _take_flash(request: Request) -> Flash | None:
    value = request.cookies.get(FLASH_COOKIE)
    if not value:
        return None
    try:
        key = await console_key(request)
    except (ConsoleNotReady, StoreUnavailable):
        return None  # the page says why on its own
    return read_flash(key, value, now=time.time())


async def redirect(request: Request, path: str, flash: Flash | None = None) -> RedirectResponse:
    """Redirect-after-POST (303): the outcome goes with it in a short-lived signed cookie."""
    response = RedirectResponse(path, status_code=303)
    if flash is not None:
        key = await console_key(request)
        response.set_cookie(
            FLASH_COOKIE,
            sign_flash(key, flash, now=time.time()),
            max_age=60,
            path=COOKIE_PATH,
            secure=request.url.scheme == "https",
            httponly=True,
            samesite="strict",
        )
    return response


def to_signin(request: Request) -> RedirectResponse:
    """To the sign-in page, coming back to this page afterwards (a GET), and without the
    session cookie that failed."""
    wanted = request.url.path
    if request.url.query:
        wanted += "?" + request.url.query
    target = SIGNIN_PATH
    if request.method == "GET" and wanted not in ("/ui/", "/ui"):
        target += "?" + urllib.parse.urlencode({"next": wanted})
    response = RedirectResponse(target, status_code=303)
    if SESSION_COOKIE in request.cookies:
        response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)
    return response


def set_session_cookie(response: Response, request: Request, value: str, lifetime: int) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        value,
        max_age=lifetime,
        path=COOKIE_PATH,
        secure=request.url.scheme == "https",
        httponly=True,
        samesite="strict",
    )


def clear_session_cookie(response: Response) -> None:
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict")


def parse_job_id(raw: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(raw.strip())
    except ValueError:
        return None
