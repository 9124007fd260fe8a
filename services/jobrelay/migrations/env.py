"""Alembic environment: the URL comes from ``JOBRELAY_DATABASE_URL`` (or ``-x url=...``), the
schema from ``JOBRELAY_DATABASE_SCHEMA`` (or ``-x schema=...``).

Every object jobrelay creates lands in its own schema, version table included, so an
application's own ``public.alembic_version`` and tables are never touched. The revisions create
their objects unqualified: ``SET LOCAL search_path`` inside alembic's transaction puts them in
the schema (a SET LOCAL ends with the transaction, so it works through PgBouncer's transaction
pooling, where a session SET or a startup ``options`` would not).
"""

from __future__ import annotations

import re
from logging.config import fileConfig
from typing import Any

from alembic import context
from psycopg.pq import TransactionStatus
from sqlalchemy import Connection, create_engine, event, pool, text

from jobrelay.core.settings import Settings, normalize_database_url, validate_schema_name
from jobrelay.db.tables import metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    """In SQLAlchemy's form: libpq's several hosts (``h1:5432,h2:5433``) do not parse there."""
    explicit = context.get_x_argument(as_dictionary=True).get("url")
    given = explicit or config.attributes.get("url")
    return normalize_database_url(given) if given else Settings().database_url


def database_schema() -> str:
    explicit = context.get_x_argument(as_dictionary=True).get("schema")
    given = explicit or config.attributes.get("schema")
    return validate_schema_name(given) if given else Settings().database_schema


# The statements revisions run outside a transaction (``autocommit_block``: the CONCURRENTLY
# index builds of 0003, 0007, 0008 and 0009), each its own transaction, where no SET LOCAL can
# reach: the table or index they name is qualified with the schema instead.
_OUTSIDE_A_TRANSACTION = (
    re.compile(
        r"^(\s*CREATE\s+(?:UNIQUE\s+)?INDEX\s+CONCURRENTLY\s+(?:IF\s+NOT\s+EXISTS\s+)?\w+\s+ON\s+)(\w+\b)(?!\.)"
    ),
    re.compile(r"^(\s*DROP\s+INDEX\s+CONCURRENTLY\s+(?:IF\s+EXISTS\s+)?)(\w+\b)(?!\.)"),
    re.compile(r"^(\s*ALTER\s+INDEX\s+(?:IF\s+EXISTS\s+)?)(\w+\b)(?!\.)"),
)


def qualified_outside_a_transaction(statement: str, schema: str) -> str:
    for pattern in _OUTSIDE_A_TRANSACTION:
        statement = pattern.sub(rf"\g<1>{schema}.\g<2>", statement, count=1)
    return statement


def keep_in_schema(connection: Connection, schema: str) -> None:
    """Every statement of the migrations runs with ``schema`` first on its search_path.

    ``SET LOCAL search_path`` opens each transaction (alembic's, and the one it begins again
    after an ``autocommit_block``): it ends with the transaction, so it works through PgBouncer
    in transaction mode, where a session SET or a startup ``options`` would not. A statement
    in autocommit names its object with the schema instead.
    """

    def before_cursor_execute(
        _connection: Any,
        cursor: Any,
        statement: str,
        parameters: Any,
        _context: Any,
        _executemany: bool,
    ) -> tuple[str, Any]:
        driver = cursor.connection
        if driver.autocommit:
            return qualified_outside_a_transaction(statement, schema), parameters
        if driver.info.transaction_status == TransactionStatus.IDLE:
            # Opens the transaction the statement then runs in.
            cursor.execute(f"SET LOCAL search_path TO {schema}")
        return statement, parameters

    event.listen(connection, "before_cursor_execute", before_cursor_execute, retval=True)


def run_in_schema(connection: Connection) -> None:
    """The revisions, with ``schema`` made, first on the search_path and holding the version
    table. The name is validated as a plain identifier (validate_schema_name): no quoting."""
    schema = database_schema()
    keep_in_schema(connection, schema)
    context.configure(connection=connection, target_metadata=metadata, version_table_schema=schema)
    with context.begin_transaction():
        connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {schema}"))
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_in_schema(connection)
        return
    # Nothing prepared (psycopg prepares a statement after its fifth run): a migration runs
    # each statement about once, and through PgBouncer's transaction pooling a prepared
    # statement would outlive its transaction on a server session shared with other clients.
    engine = create_engine(
        database_url(), poolclass=pool.NullPool, connect_args={"prepare_threshold": None}
    )
    with engine.connect() as connection:
        run_in_schema(connection)
    engine.dispose()


if context.is_offline_mode():
    schema = database_schema()
    context.configure(
        url=database_url(),
        target_metadata=metadata,
        literal_binds=True,
        version_table_schema=schema,
    )
    with context.begin_transaction():
        context.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
        # A script runs in one session: a session SET reaches the autocommit steps too.
        context.execute(f"SET search_path TO {schema}")
        context.run_migrations()
else:
    run_migrations_online()
