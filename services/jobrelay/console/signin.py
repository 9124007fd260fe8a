"""Signing in with an admin token and out again; and the console's own "not found" page."""

from __future__ import annotations

import logging
import time
from typing import Annotated

from fastapi import APIRouter, Form, Request, Response
from fastapi.responses import RedirectResponse

from jobrelay.console.context import context_of
from jobrelay.console.security import Flash, Session, safe_next, sign_session
from jobrelay.console.web import (
    SIGNIN_PATH,
    ActingDep,
    ConsoleRoute,
    OperatorDep,
    PageError,
    clear_session_cookie,
    console_key,
    redirect,
    render,
    set_session_cookie,
    settings_of,
)
from jobrelay.core.errors import Forbidden, Unauthorized

log = logging.getLogger("jobrelay.console")

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
# The catch-all, included after every other console route (console/__init__.py).
fallback = APIRouter(route_class=ConsoleRoute, include_in_schema=False)


@router.get(SIGNIN_PATH)
async def signin_page(request: Request, next: str = "/ui/") -> Response:
    return await render(request, "signin.html", {"next": safe_next(next)})


@router.post(SIGNIN_PATH)
async def signin(
    request: Request,
    token: Annotated[str, Form()] = "",
    next: Annotated[str, Form()] = "/ui/",
) -> Response:
    """An enabled admin client's token opens a session; anything else gets the same refusal,
    which says nothing about why (unknown, disabled or not an admin)."""
    auth = context_of(request).auth
    try:
        client = await auth.admin_for_token(token.strip())
    except (Unauthorized, Forbidden):
        log.info("console sign-in refused", extra={"event": "console_signin_refused"})
        return await render(request, "refused.html", {"next": safe_next(next)}, status=403)
    lifetime = settings_of(request).console_session_seconds
    session = Session.new(client.id, now=time.time(), lifetime_seconds=lifetime)
    response = RedirectResponse(safe_next(next), status_code=303)
    signed = sign_session(await console_key(request), session)
    set_session_cookie(response, request, signed, lifetime)
    log.info(
        "console sign-in",
        extra={"event": "console_signin", "client": client.name, "client_id": str(client.id)},
    )
    return response


@router.post("/ui/signout")
async def signout(request: Request, operator: ActingDep) -> Response:
    response = await redirect(request, SIGNIN_PATH, Flash("ok", "Signed out."))
    clear_session_cookie(response)
    log.info("console sign-out", extra={"event": "console_signout", "client": operator.name})
    return response


# Every method: whatever is asked of /ui is answered by the console, as an HTML page.
@fallback.api_route(
    "/ui/{rest:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
)
async def not_found(operator: OperatorDep, rest: str) -> Response:
    raise PageError(404, "Not found", "There is no such page in the console.")
