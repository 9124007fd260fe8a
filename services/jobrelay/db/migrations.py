"""The schema's migrations, run from the package itself.

The alembic scripts ship inside the package (``jobrelay/migrations``), so ``jobrelay migrate``
works from any directory and from an installed wheel, and never reads another project's
``alembic.ini``. ``alembic upgrade head`` in a checkout still works through the top-level
``alembic.ini``, which points at the same scripts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import psycopg
from alembic import command
from alembic.config import Config

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import mask_url
from jobrelay.db.engine import libpq_url

SCRIPTS = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str, *, configure_logger: bool = True) -> Config:
    """An alembic configuration with no ini file: the scripts are found by package path."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPTS))
    config.attributes["url"] = url
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


def upgrade(url: str, revision: str = "head", *, configure_logger: bool = True) -> None:
    command.upgrade(alembic_config(url, configure_logger=configure_logger), revision)


def downgrade(url: str, revision: str, *, configure_logger: bool = True) -> None:
    command.downgrade(alembic_config(url, configure_logger=configure_logger), revision)
