"""Engine construction and the translation of driver errors into jobrelay's own errors."""

from __future__ import annotations

import select
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import psycopg
from psycopg import _queries as psycopg_queries
from sqlalchemy import event, exc as sa_exc
from sqlalchemy.engine import ExceptionContext, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import DEFAULT_SCHEMA, libpq_url, mask_url, normalize_database_url
from jobrelay.db.schema import install as install_schema

__all__ = [
    "PRIMARY_GONE_SQLSTATES",
    "PoolMode",
    "connect_args",
    "is_primary_gone",
    "libpq_url",
    "make_engine",
    "translated_errors",
]

# psycopg converts a statement's text (``%(name)s`` placeholders to ``$n``) once and caches
# the result, but only for texts up to 4,096 bytes: FINISH_JOBS and the relay's flow lease are
# longer and were parsed again, with psycopg's regular expressions, on every run (2-3 % of a
# consumer's CPU). Every statement of db/sql/ fits under this limit
# (tests/unit/test_queries_cached.py), and psycopg caches the longest through this raise
# (tests/integration/test_statements_prepare.py); the cache itself holds 128 texts.
STATEMENT_CACHE_LENGTH = 16_384
psycopg_queries.MAX_CACHED_STATEMENT_LENGTH = max(
    psycopg_queries.MAX_CACHED_STATEMENT_LENGTH, STATEMENT_CACHE_LENGTH
)

# ``Settings.pool_mode``: "transaction" behind PgBouncer's transaction pooling, where
# consecutive transactions of one connection may run on different server sessions.
PoolMode = Literal["session", "transaction"]


def make_engine(
    url: str,
    *,
    pool_size: int = 10,
    pool_timeout: float = 10.0,
    application_name: str = "jobrelay",
    autocommit: bool = False,
    generic_plans: bool = False,
    pool_mode: PoolMode = "session",
    schema: str = DEFAULT_SCHEMA,
) -> AsyncEngine:
    """An engine with its own pool. ``autocommit``: every connection in the pool is in
    autocommit for good (set once at connect, never reset), for single-statement work.
    ``generic_plans``: statements prepared on its connections (psycopg prepares one after its
    fifth run) keep one generic plan instead of being planned again on every run.
    ``pool_mode`` "transaction": nothing is prepared and no session state is set at connect
    (``generic_plans`` is moot then), see ``connect_args``. ``schema``: jobrelay's schema, which
    every statement names in place of the default one (db/schema.py)."""
    options: dict[str, Any] = (
        {"isolation_level": "AUTOCOMMIT", "pool_reset_on_return": None} if autocommit else {}
    )
    engine = create_async_engine(
        url,
        **options,
        pool_size=pool_size,
        # No overflow: connections opened and closed per burst cost more than waiting for one.
        max_overflow=0,
        pool_recycle=1800,
        # Past it the caller gets StoreUnavailable: the API answers 503 rather than queueing.
        pool_timeout=pool_timeout,
        connect_args=connect_args(application_name, pool_mode),
    )
    install_schema(engine.sync_engine, schema)
    event.listen(engine.sync_engine, "checkout", _refuse_closed_connection)
    event.listen(engine.sync_engine, "handle_error", _primary_gone_is_a_disconnect)
    if generic_plans and pool_mode == "session":
        event.listen(engine.sync_engine, "connect", _keep_generic_plans)
    return engine


def connect_args(application_name: str, pool_mode: PoolMode) -> dict[str, Any]:
    """psycopg's connection arguments. Behind a transaction pooler a server session is shared
    by many clients in turn: psycopg's automatic prepared statements (named ``_pg3_0``, … per
    client connection, made after a statement's fifth run) would land on sessions where another
    client's statement of the same name exists (``DuplicatePreparedStatement``) or be looked for
    on a session that never saw them, so nothing is prepared there."""
    args: dict[str, Any] = {"application_name": application_name, "connect_timeout": 5}
    if pool_mode == "transaction":
        args["prepare_threshold"] = None
    return args


def _keep_generic_plans(dbapi_connection: Any, _record: Any) -> None:
    """``plan_cache_mode`` for the session, set once at connect: once the tables are analyzed,
    PostgreSQL judges the flow pick's custom plan cheaper than its generic one and plans it on
    every run, about 1 ms of a 2.3 ms pick (docs/flow-control.md, "What flow control costs")."""
    cursor = dbapi_connection.cursor()
    cursor.execute("SET plan_cache_mode = force_generic_plan")
    cursor.close()


def _refuse_closed_connection(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
    """The liveness check of every checkout, without a round trip.

    After a database restart every pooled connection is dead, and each would fail one request
    (the fast path, ``Store.fetch_all``, drives the driver itself, so SQLAlchemy never sees its
    errors). A server that ends a session closes its socket, so an idle pooled connection whose
    socket is readable (end of file, or the server's last error) is dead: refusing it makes the
    pool open a new one in its place and recycle every connection older than this one, so no
    request fails once the database answers again. A ping per checkout would find the same at
    the cost of a round trip on every statement of the hot path.
    """
    if _closed_by_server(dbapi_connection.driver_connection):
        raise sa_exc.InvalidatePoolError("the database closed this pooled connection")


def _closed_by_server(connection: psycopg.AsyncConnection[Any]) -> bool:
    if connection.closed or connection.broken:
        return True
    try:
        readable, _, _ = select.select([connection.pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    # An idle connection in the pool has nothing to read unless the server has hung up.
    return bool(readable)


# SQLSTATEs of a server that is not, or no longer, the primary: a write refused in recovery
# (25006 read_only_sql_transaction: a standby, or a demoted primary still answering), and a
# server shutting down or starting up (57P01 admin_shutdown, 57P02 crash_shutdown, 57P03
# cannot_connect_now), as Patroni's failover and switchover make them.
PRIMARY_GONE_SQLSTATES = frozenset({"25006", "57P01", "57P02", "57P03"})


def is_primary_gone(error: BaseException) -> bool:
    """True when ``error`` (psycopg's, or SQLAlchemy's wrapping it) says the connection's
    server cannot take the next write: one of ``PRIMARY_GONE_SQLSTATES``, a connection
    exception (class 08), or a lost connection (psycopg's OperationalError without a
    SQLSTATE: ``server closed the connection unexpectedly``, ``the connection is lost``).
    Such a connection is never used again; libpq's ``target_session_attrs=read-write`` finds
    the new primary for the next one."""
    original = getattr(error, "orig", None) or error
    if not isinstance(original, psycopg.Error):
        return False
    sqlstate = original.sqlstate
    if sqlstate is None:
        return isinstance(original, psycopg.OperationalError)
    return sqlstate in PRIMARY_GONE_SQLSTATES or sqlstate.startswith("08")


def _primary_gone_is_a_disconnect(context: ExceptionContext) -> None:
    """SQLAlchemy's ``handle_error``: its psycopg dialect calls a disconnect only a connection
    psycopg already marked broken; a server in recovery or shutting down answers on a healthy
    socket. As a disconnect, the connection is dropped and every connection pooled before it is
    replaced at its next checkout (``invalidate_pool_on_disconnect``), so one failed statement
    moves the whole pool to the new primary, and the error says ``connection_invalidated``."""
    if context.original_exception is not None and is_primary_gone(context.original_exception):
        context.is_disconnect = True


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
    if is_primary_gone(error):  # 25006 is an InternalError, raw or wrapped
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
                f"database unavailable at {mask_url(url)}: {driver_reason(error, url)}"
            ) from None
        raise


def driver_reason(error: BaseException, url: str) -> str:
    """The driver's own first line (``password authentication failed for user …``,
    ``Connection refused``), with any password masked; the class name when it says nothing."""
    original = getattr(error, "orig", None) or error
    lines = [line.strip() for line in str(original).strip().splitlines() if line.strip()]
    if not lines:
        return type(original).__name__
    reason = mask_url(lines[0])
    password = _password_of(url)
    if password and len(password) >= 4:  # a shorter one would mask ordinary words
        reason = reason.replace(password, "***")
    return reason[:300]


def _password_of(url: str) -> str | None:
    try:
        return make_url(normalize_database_url(url)).password
    except Exception:
        return None
