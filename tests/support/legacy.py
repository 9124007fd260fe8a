"""An install as jobrelay made it before revision 0012: every object in ``public``.

The revisions 0001-0011 as they ship, run by an alembic environment of that time (no schema of
its own: the objects and the version table land on the session's search_path, ``public`` in a
test database), so that `jobrelay migrate` has a real old install to move.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool

from jobrelay.db.migrations import SCRIPTS

LAST_PUBLIC_REVISION = "0011"

# migrations/env.py before 0012, for a connection handed over by the caller.
LEGACY_ENV = """
from alembic import context

from jobrelay.db.tables import metadata  # its naming convention names the constraints

context.configure(connection=context.config.attributes["connection"], target_metadata=metadata)
with context.begin_transaction():
    context.run_migrations()
"""


def migrate_in_public(url: str, work_dir: Path, revision: str = LAST_PUBLIC_REVISION) -> None:
    scripts = work_dir / "legacy_migrations"
    shutil.copytree(SCRIPTS, scripts, ignore=shutil.ignore_patterns("__pycache__", "env.py"))
    for version in (scripts / "versions").glob("*.py"):
        number = version.name.split("_", 1)[0]
        if number.isdigit() and number > LAST_PUBLIC_REVISION:
            version.unlink()
    (scripts / "env.py").write_text(LEGACY_ENV)
    config = Config()
    config.set_main_option("script_location", str(scripts))
    engine = create_engine(url, poolclass=pool.NullPool, connect_args={"prepare_threshold": None})
    try:
        with engine.connect() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()
