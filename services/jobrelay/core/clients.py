"""API clients as the rest of the system sees them: who is calling, what a listing shows, and
what a change of a client did. Tokens are never here, only in the store (as hashes)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Client:
    id: uuid.UUID
    name: str
    is_admin: bool
    valid_for_seconds: float | None = None
    """Set when the caller used the previous token of a rotation: how long it still works."""


@dataclass(frozen=True)
class ClientListing:
    """A client as ``jobrelay clients list`` shows it (never its token or hash)."""

    id: uuid.UUID
    name: str
    is_admin: bool
    created_at: datetime
    disabled_at: datetime | None
    previous_token_expires_at: datetime | None
    """While a rotation's grace period runs: when the previous token stops working."""


@dataclass(frozen=True)
class ClientChange:
    """What enabling, disabling or rotating a client found and did."""

    id: uuid.UUID
    changed: bool
    disabled: bool
    previous_token_expires_at: datetime | None = None
