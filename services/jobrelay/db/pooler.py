"""Is a connection pooler in front of ``JOBRELAY_DATABASE_URL``? One probe at start.

With ``JOBRELAY_DATABASE_POOL_MODE`` unset ("auto"), each service, the CLI's commands that read
the database and ``make run`` ask once, on one connection, before any pool is used. PostgreSQL
tells a client its session's pid at login (BackendKeyData, ``connection.info.backend_pid``);
PgBouncer sends its own random cancel key there instead, so through it that pid differs from
what ``pg_backend_pid()`` returns, and on a direct connection (or a TCP proxy such as HAProxy)
the two are equal. A pooler found takes transaction mode's settings (no prepared statements, no
session state at connect, no LISTEN but on ``JOBRELAY_LISTEN_DATABASE_URL``), which work behind
both of PgBouncer's modes, with one warning naming the setting; ``session`` set explicitly
keeps a pooler in session mode at full speed, with no probe. docs/pgbouncer.md.
"""

from __future__ import annotations

import logging

import psycopg

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import Settings, libpq_url, mask_url
from jobrelay.db import queries
from jobrelay.db.engine import driver_reason

log = logging.getLogger(__name__)

PROBE_APPLICATION_NAME = "jobrelay-pool-probe"


def settle_pool_mode(settings: Settings, *, strict: bool = False) -> Settings:
    """``settings`` with ``database_pool_mode`` "session" or "transaction": as set, or, when
    "auto", as the probe finds. A service whose probe cannot connect takes transaction mode's
    settings, which work whatever answers once the database does, and says so; ``strict``
    (the CLI): ``StoreUnavailable`` instead, the command's one line."""
    if settings.database_pool_mode != "auto":
        return settings
    try:
        pooled = pooler_in_front(settings.database_url)
    except psycopg.Error as error:
        if strict:
            raise StoreUnavailable(
                f"database unavailable at {mask_url(settings.database_url)}: "
                f"{driver_reason(error, settings.database_url)}"
            ) from None
        log.warning(
            "could not tell whether a connection pooler is in front of the database (%s): "
            "running without prepared statements or LISTEN, as behind PgBouncer; set "
            "JOBRELAY_DATABASE_POOL_MODE=session (or transaction) to skip this check",
            type(error).__name__,
            extra={"event": "pool_mode_unknown"},
        )
        pooled = True
    else:
        if pooled:
            log.warning(
                "a connection pooler answers at JOBRELAY_DATABASE_URL and "
                "JOBRELAY_DATABASE_POOL_MODE is unset: running in transaction mode (no "
                "prepared statements, LISTEN only on JOBRELAY_LISTEN_DATABASE_URL); set "
                "JOBRELAY_DATABASE_POOL_MODE=transaction, or =session for a pooler in session "
                "mode, to say so (docs/pgbouncer.md)",
                extra={"event": "pooler_detected"},
            )
    mode = "transaction" if pooled else "session"
    return settings.model_copy(update={"database_pool_mode": mode})


def pooler_in_front(url: str) -> bool:
    """True when the session that answers is not the one the login named: a pooler's."""
    with psycopg.connect(
        libpq_url(url),
        autocommit=True,
        prepare_threshold=None,  # nothing left behind on a pooled session
        connect_timeout=5,
        application_name=PROBE_APPLICATION_NAME,
    ) as connection:
        row = connection.execute(queries.SERVER_PID.text).fetchone()
        return row is None or row[0] != connection.info.backend_pid
