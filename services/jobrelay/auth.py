"""Bearer tokens to clients, with a cache, so a hot client costs no query per request: the API's
``Authorization: Bearer`` check (``api/auth.py``) and the console's sign-in share it.

The cache is trusted only while the API process LISTENs (``api/notifications.py``) on the
channel that every change of a client's tokens notifies (``db/channels.py::CLIENTS_CHANNEL``:
disable, enable, rotate): a notification empties it, so a disabled client or a rotated token is
refused at once by every API process. While that connection is down, every request is looked up.
"""

from __future__ import annotations

import time

from jobrelay.core.clients import Client
from jobrelay.core.errors import Forbidden, Unauthorized
from jobrelay.core.fingerprint import token_hash
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store

# A safety net only: notifications empty the cache at once.
CACHE_SECONDS = 5.0
CACHE_MAX_ENTRIES = 10_000
MAX_TOKEN_LENGTH = 512


class Authenticator:
    def __init__(self, store: Store, cache_seconds: float = CACHE_SECONDS) -> None:
        self.store = store
        self.clients = ClientStore(store)
        self.cache_seconds = cache_seconds
        self._cache: dict[str, tuple[float, Client | None]] = {}
        self._generation = 0  # bumped by every invalidation: a lookup in flight is not cached
        self.listening = False

    async def client_for_token(self, token: str | None) -> Client:
        if not token or len(token) > MAX_TOKEN_LENGTH:
            raise Unauthorized("send Authorization: Bearer <token>")
        client = await self._lookup(token_hash(token))
        if client is None:
            raise Unauthorized("the token is unknown or its client is disabled")
        return client

    async def admin_for_token(self, token: str | None) -> Client:
        client = await self.client_for_token(token)
        if not client.is_admin:
            raise Forbidden()
        return client

    def invalidate(self) -> None:
        self._generation += 1
        self._cache.clear()

    async def _lookup(self, digest: str) -> Client | None:
        now = time.monotonic()
        if self.listening:
            cached = self._cache.get(digest)
            if cached is not None and cached[0] > now:
                return cached[1]
        generation = self._generation
        client = await self.clients.client_by_token_hash(digest)
        if self.listening and generation == self._generation:
            ttl = self.cache_seconds
            if client is not None and client.valid_for_seconds is not None:
                ttl = min(ttl, client.valid_for_seconds)  # a previous token's grace ends
            if len(self._cache) >= CACHE_MAX_ENTRIES:
                self._cache.clear()
            self._cache[digest] = (now + ttl, client)
        return client
