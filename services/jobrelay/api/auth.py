"""Bearer-token authentication for the routes: ``BearerClient`` is their dependency, the
document's bearer security scheme and the token lookup in one. The lookup and its cache are
``jobrelay/auth.py``'s ``Authenticator``, which the console's sign-in uses too."""

from __future__ import annotations

from fastapi import Request
from fastapi.security import HTTPBearer
from fastapi.security.base import SecurityBase

from jobrelay.api.context import context_of
from jobrelay.core.clients import Client


class BearerClient(SecurityBase):
    """The caller's client (an admin one if ``admin``), from ``Authorization: Bearer <token>``.

    One dependency rather than a ``Depends(HTTPBearer)`` inside a ``Depends(lookup)``: FastAPI
    resolves every level of dependencies on every request, and on the submission path the
    extra level cost more CPU than the cached token lookup itself. Being a ``SecurityBase``
    named ``HTTPBearer`` keeps the document's security scheme as ``HTTPBearer`` declared it.
    """

    def __init__(self, *, admin: bool = False) -> None:
        # Parses the header as FastAPI's own HTTPBearer does; a missing or malformed header is
        # our own 401 problem (auto_error=False), not FastAPI's.
        self._bearer = HTTPBearer(
            auto_error=False,
            description="A client token, from `jobrelay clients create NAME` (admin: `--admin`)",
        )
        self.model = self._bearer.model
        self.scheme_name = self._bearer.scheme_name
        self.admin = admin

    async def __call__(self, request: Request) -> Client:
        credentials = await self._bearer(request)
        token = credentials.credentials if credentials else None
        auth = context_of(request).auth
        if self.admin:
            return await auth.admin_for_token(token)
        return await auth.client_for_token(token)
