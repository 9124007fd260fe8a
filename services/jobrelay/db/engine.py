"""Engine construction and the translation of driver errors into jobrelay's own errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from sqlalchemy import exc as sa_exc
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import mask_url


def libpq_url(url: str) -> str:
    """psycopg takes ``postgresql://``; SQLAlchemy URLs say ``postgresql+psycopg://``."""
    scheme, sep, rest = url.partition("://")
    return f"{scheme.split('+', 1)[0]}{sep}{rest}"


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    application_name: str = "jobrelay",
    autocommit: bool = False,
) -> AsyncEngine:
    """An engine with its own pool. ``autocommit``: every connection in the pool is in
    autocommit for good (set once at connect, never reset), for single-statement work."""
    options: dict[str, Any] = (
        {"isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None} if autocommit else {}
    )
    return create_async_engine(
        url,
        **options,
        pool_size=pool_size,
        # No overflow: connections opened and closed per burst cost more than waiting for one.
        max_overflow=0,
        # No pre-ping: it costs a round trip per checkout. A connection that died with the
        # server fails its statement once (StoreUnavailable, the caller retries) and SQLAlchemy
        # then invalidates the whole pool, so one failure per restart, not per connection.
        pool_pre_ping=False,
        pool_recycle=1800,
        pool_timeout=10,
        connect_args={"application_name": application_name, "connect_timeout": 5},
    )


def is_connection_error(error: BaseException) -> bool:
    """True when the database could not be reached or the connection broke.

    Such errors leave the outcome of an in-flight COMMIT unknown; callers treat them as
    "try again later", never as "the job failed".
    """
    if isinstance(error, sa_exc.DBAPIError) and error.connection_invalidated:
        return True
    if isinstance(error, sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    if isinstance(error, sa_exc.TimeoutError):  # pool exhausted while connections hang
        return True
    # Raised by the driver directly on the fast path (Store.fetch_all).
    if isinstance(error, psycopg.OperationalError | psycopg.InterfaceError):
        return True
    return isinstance(error, OSError | ConnectionError)


@asynccontextmanager
async def translated_errors(url: str) -> AsyncIterator[None]:
    """Turn connection failures into ``StoreUnavailable`` with the password masked."""
    try:
        yield
    except Exception as error:
        if is_connection_error(error):
            raise StoreUnavailable(
                f"database unavailable at {mask_url(url)}: {type(error).__name__}"
            ) from None
        raise
