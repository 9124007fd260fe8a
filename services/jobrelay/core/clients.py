"""API clients as the rest of the system sees them: who is calling, what a listing shows, and
what a change of a client did. Tokens are made here (``new_token``) and never kept: the store
holds their hashes."""

from __future__ import annotations

import math
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

# The longest an old token stays accepted after a rotation (`clients rotate --grace`).
MAX_GRACE_SECONDS = 30 * 86400.0


def new_token() -> str:
    """A bearer token: 256 random bits; only its SHA-256 is stored."""
    return "jr_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class RateLimit:
    """Submissions a client may make: ``per_second`` on average, ``burst`` at once."""

    per_second: float
    burst: int

    @property
    def interval(self) -> float:
        """Seconds between two submissions at the steady rate."""
        return 1.0 / self.per_second

    @classmethod
    def of(cls, per_second: float | None, burst: int | None) -> RateLimit | None:
        """None without a rate; without a burst, one second's worth (at least one)."""
        if per_second is None:
            return None
        return cls(per_second, burst if burst is not None else max(1, math.ceil(per_second)))

    def describe(self) -> str:
        return f"{self.per_second:g}/s, bursts of {self.burst}"


@dataclass(frozen=True)
class Client:
    id: uuid.UUID
    name: str
    is_admin: bool
    valid_for_seconds: float | None = None
    """Set when the caller used the previous token of a rotation: how long it still works."""

    rate_limit: RateLimit | None = None
    """The client's own submission limit; None: the API's settings apply."""


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

    rate_limit_per_second: float | None = None
    rate_limit_burst: int | None = None


@dataclass(frozen=True)
class ClientChange:
    """What enabling, disabling or rotating a client found and did."""

    id: uuid.UUID
    changed: bool
    disabled: bool
    previous_token_expires_at: datetime | None = None
