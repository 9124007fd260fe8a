"""API clients as the rest of the system sees them: who is calling, what a listing shows, what
a change of a client did, and which job types a client may submit (``may_submit``). Tokens are
made here (``new_token``) and never kept: the store holds their hashes."""

from __future__ import annotations

import math
import re
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

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

    type_patterns: tuple[str, ...] | None = None
    """The types it may submit (``may_submit``); None: the default rule."""


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
    type_patterns: list[str] | None = None
    """The types it may submit; None: the default rule (``may_submit``)."""


@dataclass(frozen=True)
class ClientChange:
    """What enabling, disabling or rotating a client found and did."""

    id: uuid.UUID
    changed: bool
    disabled: bool
    previous_token_expires_at: datetime | None = None


# --- which types a client may submit (docs/submitting.md, "Which client may submit what") ---

# Shell-style globs of ``*`` (any run of characters, dots included) and ``?`` (one character)
# over the characters job types are made of. No ``[...]``, no ``%`` or backslash: the same
# pattern is matched by ``fnmatchcase`` here and, translated to LIKE, by the SQL function
# ``jobrelay_enqueue_check`` (migration 0013), and these two agree on exactly this alphabet.
TYPE_PATTERN = re.compile(r"[A-Za-z0-9_.:/*?-]+")
TYPE_PATTERN_MAX = 200
TYPE_PATTERNS_MAX = 50


def parse_type_patterns(text: str) -> tuple[str, ...]:
    """The patterns of ``--types 'shop.*,mail.send'`` (comma-separated, spaces around them
    ignored, each kept once), checked; ``ValueError`` saying what is wrong."""
    return check_type_patterns(part.strip() for part in text.split(","))


def check_type_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    """``patterns`` as a client keeps them (in order, each once), or ``ValueError``: at least
    one, at most ``TYPE_PATTERNS_MAX``, each 1 to ``TYPE_PATTERN_MAX`` characters of letters,
    digits, ``_ . : / -`` and the wildcards ``*`` and ``?``."""
    kept = tuple(dict.fromkeys(patterns))
    if not kept or kept == ("",):
        raise ValueError("give at least one type pattern, e.g. 'shop.*,mail.send'")
    if len(kept) > TYPE_PATTERNS_MAX:
        raise ValueError(f"at most {TYPE_PATTERNS_MAX} type patterns")
    for pattern in kept:
        if not pattern:
            raise ValueError("a type pattern is empty (two commas in a row?)")
        if len(pattern) > TYPE_PATTERN_MAX:
            raise ValueError(f"a type pattern is at most {TYPE_PATTERN_MAX} characters")
        if not TYPE_PATTERN.fullmatch(pattern):
            raise ValueError(
                f"type pattern {pattern[:60]!r} may hold only letters, digits, _ . : / - and "
                "the wildcards * and ?"
            )
    return kept


def matches_any(patterns: Iterable[str], job_type: str) -> bool:
    """Whether one of ``patterns`` matches the whole of ``job_type`` (case-sensitive)."""
    return any(fnmatchcase(job_type, pattern) for pattern in patterns)


def may_submit(client: Client, job_type: str, *, open_to_api: bool) -> bool:
    """Whether ``client`` may submit ``job_type`` over HTTP. Its patterns, when it has them,
    decide alone. Without: an admin client may submit any type, another client any type that
    is ``open_to_api`` (not a Django task, not declared with ``api=False``)."""
    if client.type_patterns is not None:
        return matches_any(client.type_patterns, job_type)
    return client.is_admin or open_to_api
