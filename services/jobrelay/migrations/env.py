"""Alembic environment: the URL comes from ``JOBRELAY_DATABASE_URL`` (or ``-x url=...``)."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import create_engine, pool

from jobrelay.core.settings import Settings, normalize_database_url
from jobrelay.db.tables import metadata

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def database_url() -> str:
    """In SQLAlchemy's form: libpq's several hosts (``h1:5432,h2:5433``) do not parse there."""
    explicit = context.get_x_argument(as_dictionary=True).get("url")
    given = explicit or config.attributes.get("url")
    return normalize_database_url(given) if given else Settings().database_url


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
        return
    # Nothing prepared (psycopg prepares a statement after its fifth run): a migration runs
    # each statement about once, and through PgBouncer's transaction pooling a prepared
    # statement would outlive its transaction on a server session shared with other clients.
    engine = create_engine(
        database_url(), poolclass=pool.NullPool, connect_args={"prepare_threshold": None}
    )
    with engine.connect() as connection:
        context.configure(connection=connection, target_metadata=metadata)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    context.configure(url=database_url(), target_metadata=metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    run_migrations_online()
