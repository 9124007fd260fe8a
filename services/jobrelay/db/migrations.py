"""The schema's migrations, run from the package itself.

The alembic scripts ship inside the package (``jobrelay/migrations``), so ``jobrelay migrate``
works from any directory and from an installed wheel, and never reads another project's
``alembic.ini``. ``alembic upgrade head`` in a checkout still works through the top-level
``alembic.ini``, which points at the same scripts.

Every object lives in jobrelay's own schema (``JOBRELAY_DATABASE_SCHEMA``, migrations/env.py).
An install made before revision 0012 has them in ``public``: ``move_from_public`` moves them
into the schema, in one transaction, before alembic runs (docs/operating.md, "Moving an
install out of public").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
from alembic import command
from alembic.config import Config
from psycopg import sql

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import DEFAULT_SCHEMA, mask_url
from jobrelay.db.engine import libpq_url
from jobrelay.db.history import FUNCTIONS_0011, REVISIONS_0011, TABLES_0011

SCRIPTS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(
    url: str, *, configure_logger: bool = True, schema: str = DEFAULT_SCHEMA
) -> Config:
    """An alembic configuration with no ini file: the scripts are found by package path."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["url"] = url
    config.attributes["schema"] = schema
    config.attributes["configure_logger"] = configure_logger
    return config


def wait_for_database(
    url: str,
    *,
    timeout_seconds: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Return once the database takes a connection; ``StoreUnavailable`` after the timeout.

    A container's database answers its health check a little before it takes connections
    from every client; the migration waits for it rather than failing the whole start.
    """
    deadline = clock() + timeout_seconds
    delay = 0.2
    while True:
        try:
            with psycopg.connect(libpq_url(url), connect_timeout=5):
                return
        except psycopg.OperationalError as error:
            if clock() + delay > deadline:
                reason = mask_url(str(error).strip().splitlines()[0] if str(error) else "")
                raise StoreUnavailable(
                    f"database at {mask_url(url)} did not answer within "
                    f"{timeout_seconds:g} s: {reason}"
                ) from None
        sleep(delay)
        delay = min(delay * 2, 2.0)


def upgrade(
    url: str,
    revision: str = "head",
    *,
    configure_logger: bool = True,
    schema: str = DEFAULT_SCHEMA,
) -> None:
    command.upgrade(alembic_config(url, configure_logger=configure_logger, schema=schema), revision)


def downgrade(
    url: str, revision: str, *, configure_logger: bool = True, schema: str = DEFAULT_SCHEMA
) -> None:
    command.downgrade(
        alembic_config(url, configure_logger=configure_logger, schema=schema), revision
    )


# --- the move of an install made before 0012 out of ``public`` --------------------------------

# The revision(s) a table named alembic_version in ``public`` holds, if there is one.
PUBLIC_REVISIONS = sql.SQL("SELECT version_num FROM public.alembic_version")
# The functions of ``names`` in ``public``, with their argument types: ALTER FUNCTION needs them.
PUBLIC_FUNCTIONS = sql.SQL(
    "SELECT format('%%I(%%s)', p.proname, pg_get_function_identity_arguments(p.oid)) "
    "FROM pg_proc p "
    "WHERE p.pronamespace = 'public'::regnamespace AND p.proname = ANY(%(names)s) "
    "ORDER BY p.proname"
)
TABLE_EXISTS = sql.SQL("SELECT to_regclass(%(name)s) IS NOT NULL")
# Taken first: a second `jobrelay migrate` running at the same time waits for this one's move,
# then finds the version table in the schema and moves nothing.
LOCK_PUBLIC_VERSION = sql.SQL("LOCK TABLE public.alembic_version IN ACCESS EXCLUSIVE MODE")
CREATE_SCHEMA = sql.SQL("CREATE SCHEMA IF NOT EXISTS {schema}")
MOVE_TABLE = sql.SQL("ALTER TABLE public.{table} SET SCHEMA {schema}")
MOVE_FUNCTION = sql.SQL("ALTER FUNCTION public.{signature} SET SCHEMA {schema}")


def move_from_public(url: str, schema: str = DEFAULT_SCHEMA) -> list[str]:
    """Move a jobrelay install out of ``public`` into ``schema``, in one transaction; the
    names of what was moved (empty when there was nothing to move).

    There is one to move when ``schema`` has no ``alembic_version`` and ``public`` has one
    holding a revision of jobrelay's own (0001-0011): every table of jobrelay's (with its
    indexes, constraints, sequences and triggers), every function and the version table go.
    An ``alembic_version`` in ``public`` at any other revision is the application's: nothing
    is touched. The list of objects is the frozen one of revision 0011
    (db/history.py), not today's models. Services of the old version must be stopped:
    their statements name the tables unqualified.
    """
    with (
        psycopg.connect(libpq_url(url), connect_timeout=5, prepare_threshold=None) as connection,
        connection.transaction(),
    ):
        if not _public_install(connection, schema):
            return []
        return _move(connection, schema)


def _exists(connection: psycopg.Connection[Any], name: str) -> bool:
    row = connection.execute(TABLE_EXISTS, {"name": name}).fetchone()
    return bool(row and row[0])


def _public_install(connection: psycopg.Connection[Any], schema: str) -> bool:
    if _exists(connection, f"{schema}.alembic_version"):
        return False
    if not _exists(connection, "public.alembic_version"):
        return False
    connection.execute(LOCK_PUBLIC_VERSION)
    if _exists(connection, f"{schema}.alembic_version"):  # another migrate moved it meanwhile
        return False
    revisions = {row[0] for row in connection.execute(PUBLIC_REVISIONS)}
    return bool(revisions) and revisions <= set(REVISIONS_0011)


def _move(connection: psycopg.Connection[Any], schema: str) -> list[str]:
    target = sql.Identifier(schema)
    connection.execute(CREATE_SCHEMA.format(schema=target))
    moved: list[str] = []
    for table in (*TABLES_0011, "alembic_version"):
        if _exists(connection, f"public.{table}"):
            connection.execute(MOVE_TABLE.format(table=sql.Identifier(table), schema=target))
            moved.append(table)
    for (signature,) in connection.execute(
        PUBLIC_FUNCTIONS, {"names": list(FUNCTIONS_0011)}
    ).fetchall():
        # The name and argument types, quoted as needed.
        connection.execute(MOVE_FUNCTION.format(signature=sql.SQL(signature), schema=target))
        moved.append(signature)
    return moved
