"""jobrelay installed as a user installs it: a wheel beside an application of their own.

The application here has its own top-level ``services`` package (a common name), so jobrelay's
import package must not be ``services``; and the migrations must come from inside the wheel,
whatever ``alembic.ini`` the application's folder holds.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from jobrelay.db.engine import libpq_url
from tests.support.processes import ROOT

APP_SERVICES = '''"""The application's own services package, named like jobrelay's source folder."""
GREETING = "hello from the app"
'''

APP_JOBS = """from pydantic import BaseModel

from jobrelay import JobContext, PermanentError, Registry, TransientError

registry = Registry()


class Hello(BaseModel):
    name: str


@registry.job("app.hello", Hello)
async def hello(context: JobContext, payload: Hello) -> dict[str, str]:
    return {"hello": payload.name}
"""

# An alembic.ini of the application's own, pointing at scripts jobrelay must never run.
FOREIGN_ALEMBIC_INI = """[alembic]
script_location = %(here)s/not_jobrelay_migrations
"""


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """jobrelay's wheel, built from this checkout and installed into a folder of its own."""
    wheels = tmp_path_factory.mktemp("wheels")
    target = tmp_path_factory.mktemp("site")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("jobrelay-*.whl")
    subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    return target


@pytest.fixture
def app_folder(tmp_path: Path) -> Path:
    app = tmp_path / "app"
    (app / "services").mkdir(parents=True)
    (app / "services" / "__init__.py").write_text(APP_SERVICES)
    (app / "myapp").mkdir()
    (app / "myapp" / "__init__.py").write_text("")
    (app / "myapp" / "jobs.py").write_text(APP_JOBS)
    (app / "alembic.ini").write_text(FOREIGN_ALEMBIC_INI)
    return app


def run_in(
    folder: Path, site: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in the application's folder, with the installed wheel first on the path
    (ahead of this checkout's editable install) and no JOBRELAY_* variables but those given."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    clean.pop("PYTHONPATH", None)
    clean["PYTHONPATH"] = str(site)
    return subprocess.run(
        [sys.executable, *args],
        cwd=folder,
        env=clean | (env or {}),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_app_with_its_own_services_package_imports_jobrelay_beside_it(
    installed_wheel: Path, app_folder: Path
) -> None:
    done = run_in(
        app_folder,
        installed_wheel,
        "-c",
        "import services, jobrelay, myapp.jobs\n"
        "print(services.GREETING)\n"
        "print(jobrelay.__file__)\n"
        "print(sorted(myapp.jobs.registry.types))",
    )
    assert done.returncode == 0, done.stderr
    greeting, jobrelay_file, types = done.stdout.splitlines()
    assert greeting == "hello from the app"
    assert Path(jobrelay_file).is_relative_to(installed_wheel), jobrelay_file
    assert types == "['app.hello']"


@pytest.fixture
def empty_database(servers: object) -> Iterator[str]:
    from tests.support import databases

    url = databases.create_empty_database(servers.database_url)  # type: ignore[attr-defined]
    yield url
    databases.drop_database(servers.database_url, url)  # type: ignore[attr-defined]


def migrate_in(
    folder: Path, wheel: Path, database_url: str, *options: str
) -> subprocess.CompletedProcess[str]:
    """``python -m jobrelay migrate`` of the installed wheel, run from ``folder``."""
    env = {"JOBRELAY_DATABASE_URL": database_url}
    return run_in(folder, wheel, "-m", "jobrelay", "migrate", *options, env=env)


def test_jobrelay_migrate_works_from_a_foreign_folder_with_its_own_alembic_ini(
    installed_wheel: Path, app_folder: Path, empty_database: str
) -> None:
    done = migrate_in(app_folder, installed_wheel, empty_database)
    assert done.returncode == 0, done.stderr
    with psycopg.connect(libpq_url(empty_database)) as connection:
        tables = {
            (schema, name)
            for schema, name in connection.execute(
                "SELECT schemaname, tablename FROM pg_tables "
                "WHERE schemaname IN ('public', 'jobrelay')"
            )
        }
    jobrelay = {"jobs", "outbox", "job_events", "job_results", "clients", "alembic_version"}
    assert {("jobrelay", name) for name in jobrelay} <= tables
    assert not {name for schema, name in tables if schema == "public"}  # nothing of it in public


def test_jobrelay_migrate_gives_up_on_an_unreachable_database_after_its_wait(
    installed_wheel: Path, app_folder: Path
) -> None:
    unreachable = "postgresql://jobrelay:s3cret@127.0.0.1:1/jobrelay"
    done = migrate_in(app_folder, installed_wheel, unreachable, "--wait", "1")
    assert done.returncode == 1
    assert "did not answer within 1 s" in done.stderr
    assert "s3cret" not in done.stderr
    assert "Traceback" not in done.stderr


def test_the_wheel_carries_the_consoles_templates_and_assets(installed_wheel: Path) -> None:
    console = installed_wheel / "jobrelay" / "console"
    for name in ("templates/base.html", "templates/job.html", "static/console.css"):
        assert (console / name).is_file(), name
    assert (console / "static" / "console.js").is_file()
