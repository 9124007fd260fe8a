"""The console's signing key: ``JOBRELAY_CONSOLE_SECRET`` when it is set, else the row of
``console_keys`` that migration 0006 made, read once per process (every API process and worker
reads the same row, so a session signed by one is good on all)."""

from __future__ import annotations

import asyncio

from pydantic import SecretStr

from jobrelay.core.errors import ConfigurationError
from jobrelay.db.store import Store


class ConsoleNotReady(ConfigurationError):
    """The database has no console key: it was not migrated to revision 0006 yet."""


class ConsoleKey:
    def __init__(self, secret: SecretStr | None) -> None:
        self._key = secret.get_secret_value().encode() if secret is not None else None
        self._reading = asyncio.Lock()

    async def get(self, store: Store) -> bytes:
        if self._key is None:
            async with self._reading:  # one read, however many requests arrive at once
                if self._key is None:
                    self._key = await self._from_database(store)
        return self._key

    @staticmethod
    async def _from_database(store: Store) -> bytes:
        key = await store.console_key()
        if key is None:
            raise ConsoleNotReady("the database has no console key yet: run jobrelay migrate")
        return key
