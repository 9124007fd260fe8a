"""The clients: who may submit (tokens, grace periods of rotated tokens, disabling) and how
fast (per-client rate limits, counted in PostgreSQL so every API process shares them)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from jobrelay.core.clients import (
    Client,
    ClientChange,
    ClientListing,
    RateLimit,
    check_type_patterns,
)
from jobrelay.core.ids import new_id
from jobrelay.db import queries as q
from jobrelay.db.store import Store


class ClientStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def create_client(
        self,
        name: str,
        token_hash: str,
        *,
        is_admin: bool,
        type_patterns: Sequence[str] | None = None,
    ) -> uuid.UUID | None:
        """The new client's id, or None when the name is taken. ``type_patterns`` (checked by
        ``check_type_patterns``): the types it may submit; None: the default rule."""
        row = await self.store.fetch_one(
            q.INSERT_CLIENT,
            id=new_id(),
            name=name,
            token_hash=token_hash,
            is_admin=is_admin,
            type_patterns=_stored(type_patterns),
        )
        return None if row is None else row.id

    async def set_client_type_patterns(
        self, name: str, type_patterns: Sequence[str] | None
    ) -> uuid.UUID | None:
        """Give a client the types it may submit, or (None) the default rule again; None when
        there is no such client. Every API process reads them again at once (notified)."""
        row = await self.store.fetch_one(
            q.SET_CLIENT_TYPE_PATTERNS, name=name, type_patterns=_stored(type_patterns)
        )
        return None if row is None else row.id

    async def client_by_token_hash(self, token_hash: str) -> Client | None:
        """The enabled client whose current token, or previous token still in its grace
        period, has this hash."""
        row = await self.store.fetch_one(q.CLIENT_BY_TOKEN_HASH, token_hash=token_hash)
        if row is None:
            return None
        return Client(
            id=row.id,
            name=row.name,
            is_admin=row.is_admin,
            valid_for_seconds=row.valid_for_seconds,
            rate_limit=RateLimit.of(row.rate_limit_per_second, row.rate_limit_burst),
            type_patterns=None if row.type_patterns is None else tuple(row.type_patterns),
        )

    async def set_client_rate_limit(self, name: str, limit: RateLimit | None) -> uuid.UUID | None:
        """Give a client its own submission limit, or (None) the API's again; None when there
        is no such client."""
        row = await self.store.fetch_one(
            q.SET_CLIENT_RATE_LIMIT,
            name=name,
            per_second=limit.per_second if limit else None,
            burst=limit.burst if limit else None,
        )
        return None if row is None else row.id

    async def take_rate_token(
        self, client_id: uuid.UUID, limit: RateLimit, count: int = 1
    ) -> float | None:
        """Count ``count`` submissions against the client's limit (at most a burst: a batch
        larger than that counts as one burst): None when they fit, otherwise the seconds until
        they will (nothing is counted then)."""
        row = await self.store.fetch_one(
            q.TAKE_RATE_TOKEN,
            client_id=client_id,
            cost=limit.interval * min(count, limit.burst),
            window=limit.interval * limit.burst,
        )
        assert row is not None
        return None if row.allowed else max(0.0, row.retry_after or 0.0)

    async def set_client_disabled(self, name: str, *, disabled: bool) -> ClientChange | None:
        """Disable or enable a client by name; None when there is no such client."""
        row = await self.store.fetch_one(q.SET_CLIENT_DISABLED, name=name, disable=disabled)
        if row is None:
            return None
        return ClientChange(
            id=row.id, changed=row.changed, disabled=row.was_disabled != row.changed
        )

    async def rotate_client_token(
        self, name: str, token_hash: str, *, grace_seconds: float
    ) -> ClientChange | None:
        """Give a client a new token; its previous one works ``grace_seconds`` more (0: stops
        at once). None when there is no such client."""
        row = await self.store.fetch_one(
            q.ROTATE_CLIENT_TOKEN, name=name, token_hash=token_hash, grace_seconds=grace_seconds
        )
        if row is None:
            return None
        return ClientChange(
            id=row.id,
            changed=True,
            disabled=row.disabled_at is not None,
            previous_token_expires_at=row.previous_token_expires_at,
        )

    async def list_clients(self) -> list[ClientListing]:
        """Every client, oldest first."""
        rows = await self.store.fetch_all(q.LIST_CLIENTS)
        return [ClientListing(**row._asdict()) for row in rows]


def _stored(type_patterns: Sequence[str] | None) -> list[str] | None:
    """Patterns as the ``text[]`` column takes them (checked: ``check_type_patterns``)."""
    return None if type_patterns is None else list(check_type_patterns(type_patterns))
