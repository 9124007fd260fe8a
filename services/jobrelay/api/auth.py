"""Bearer-token authentication with a short cache, so a hot client costs no query per request."""

from __future__ import annotations

import time

from jobrelay.core.errors import Forbidden, Unauthorized
from jobrelay.core.fingerprint import token_hash
from jobrelay.db.store import Client, Store

# A disabled client is refused within this many seconds on every API process.
CACHE_SECONDS = 5.0
CACHE_MAX_ENTRIES = 10_000


class Authenticator:
    def __init__(self, store: Store, cache_seconds: float = CACHE_SECONDS) -> None:
        self.store = store
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Client | None]] = {}

    async def client_for(self, authorization: str | None) -> Client:
        token = _bearer_token(authorization)
        if token is None:
            raise Unauthorized("send Authorization: Bearer <token>")
        digest = token_hash(token)
        client = await self._lookup(digest)
        if client is None:
            raise Unauthorized("the token is unknown or its client is disabled")
        return client

    async def admin_for(self, authorization: str | None) -> Client:
        client = await self.client_for(authorization)
        if not client.is_admin:
            raise Forbidden()
        return client

    async def _lookup(self, digest: str) -> Client | None:
        now = time.monotonic()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        client = await self.store.client_by_token_hash(digest)
        if len(self._cache) >= CACHE_MAX_ENTRIES:
            self._cache.clear()
        self._cache[digest] = (now + self.cache_seconds, client)
        return client


def _bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > 512:
        return None
    return token
