"""API clients: the list, with the job types each may submit; create one (optionally with its
type patterns; its token shown once, on the answer to the form, never again and never logged);
disable, enable; rotate a token (optionally with a grace period). The same store calls and the
same rules as ``jobrelay clients`` (``cli/clients.py``)."""

from __future__ import annotations

import logging
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, Response

from jobrelay.console.security import Flash
from jobrelay.console.web import (
    ActingDep,
    ConsoleRoute,
    Operator,
    OperatorDep,
    redirect,
    render,
    store_of,
)
from jobrelay.core.clients import MAX_GRACE_SECONDS, new_token, parse_type_patterns
from jobrelay.core.durations import parse_duration
from jobrelay.core.fingerprint import token_hash
from jobrelay.db.client_store import ClientStore

log = logging.getLogger("jobrelay.console")

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)

CLIENTS_PATH = "/ui/clients"
Name = Annotated[str, Form(max_length=200)]


async def clients_listing(
    request: Request,
    operator: Operator,
    *,
    problem: str | None = None,
    status: int = 200,
    form: dict[str, Any] | None = None,
) -> Response:
    context = {
        "clients": await ClientStore(store_of(request)).list_clients(),
        "problem": problem,
        "form": form or {"name": "", "admin": False, "types": ""},
    }
    return await render(request, "clients.html", context, status=status, operator=operator)


@router.get(CLIENTS_PATH)
async def clients_page(request: Request, operator: OperatorDep) -> Response:
    return await clients_listing(request, operator)


async def _shown_once(request: Request, operator: Operator, context: dict[str, Any]) -> Response:
    """The page with a new token, the answer to the form itself: the token is in no URL, no
    cookie and no log line, and the page is never cached (``Cache-Control: no-store``)."""
    return await render(request, "token.html", context, operator=operator)


@router.post(CLIENTS_PATH)
async def create_client(
    request: Request,
    operator: ActingDep,
    name: Name,
    admin: Annotated[bool, Form()] = False,
    types: Annotated[str, Form(max_length=11_000)] = "",
) -> Response:
    name = name.strip()
    form = {"name": name, "admin": admin, "types": types}
    if not 1 <= len(name) <= 100:
        return await clients_listing(
            request,
            operator,
            problem="A client name is 1 to 100 characters.",
            status=400,
            form=form,
        )
    try:  # empty: the default rule, as `clients create` without --types
        patterns = parse_type_patterns(types) if types.strip() else None
    except ValueError as error:
        return await clients_listing(
            request, operator, problem=f"Types: {error}.", status=400, form=form
        )
    token = new_token()
    client_id = await ClientStore(store_of(request)).create_client(
        name, token_hash(token), is_admin=admin, type_patterns=patterns
    )
    if client_id is None:
        return await clients_listing(
            request,
            operator,
            problem=f"A client named {name!r} already exists.",
            status=409,
            form=form,
        )
    log.info(
        "client created in the console",
        extra={"event": "client_created", "client": name, "by": operator.name, "admin": admin},
    )
    context = {
        "name": name,
        "token": token,
        "created": True,
        "admin": admin,
        "expires": None,
        "disabled": False,
    }
    return await _shown_once(request, operator, context)


async def _set_disabled(
    request: Request, operator: Operator, name: str, *, disable: bool
) -> Response:
    change = await ClientStore(store_of(request)).set_client_disabled(name, disabled=disable)
    word = "disabled" if disable else "enabled"
    if change is None:
        flash = Flash("error", f"There is no client named {name!r}.")
    elif not change.changed:
        flash = Flash("ok", f"Client {name!r} was already {word}.")
    else:
        log.info(
            "client %s in the console",
            word,
            extra={"event": f"client_{word}", "client": name, "by": operator.name},
        )
        effect = "its token is refused from now on" if disable else "its token works again"
        flash = Flash("ok", f"Client {name!r} {word}: {effect}.")
    return await redirect(request, CLIENTS_PATH, flash)


@router.post(CLIENTS_PATH + "/disable")
async def disable_client(request: Request, operator: ActingDep, name: Name) -> Response:
    return await _set_disabled(request, operator, name, disable=True)


@router.post(CLIENTS_PATH + "/enable")
async def enable_client(request: Request, operator: ActingDep, name: Name) -> Response:
    return await _set_disabled(request, operator, name, disable=False)


def _grace_seconds(text: str) -> float:
    """Seconds of a grace period typed as 90s, 15m, 2h or 1d (empty: none); ValueError."""
    if not text.strip():
        return 0.0
    seconds = parse_duration(text)
    if seconds > MAX_GRACE_SECONDS:
        raise ValueError("a grace period is at most 30d")
    return seconds


@router.post(CLIENTS_PATH + "/rotate")
async def rotate_token(
    request: Request,
    operator: ActingDep,
    name: Name,
    grace: Annotated[str, Form(max_length=40)] = "",
) -> Response:
    try:
        seconds = _grace_seconds(grace)
    except ValueError as error:
        return await redirect(request, CLIENTS_PATH, Flash("error", f"Not rotated: {error}."))
    token = new_token()
    change = await ClientStore(store_of(request)).rotate_client_token(
        name, token_hash(token), grace_seconds=seconds
    )
    if change is None:
        return await redirect(
            request, CLIENTS_PATH, Flash("error", f"There is no client named {name!r}.")
        )
    log.info(
        "client token rotated in the console",
        extra={"event": "client_rotated", "client": name, "by": operator.name},
    )
    context = {
        "name": name,
        "token": token,
        "created": False,
        "admin": None,
        "expires": change.previous_token_expires_at,
        "disabled": change.disabled,
    }
    return await _shown_once(request, operator, context)
