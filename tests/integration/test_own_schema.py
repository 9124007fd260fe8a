"""jobrelay in its own schema (SPEC section 25, "Its own schema"), against real PostgreSQL and
RabbitMQ: an application database with its own ``alembic_version`` and ``jobs`` takes `jobrelay
migrate` untouched; an install made before revision 0012, with every object in ``public``, is
moved by it with every job where it was; and another schema name works end to end.

Each test has a database of its own layout (the ``layout`` marker) instead of the migrated
template: `jobrelay migrate` runs on it, through the CLI, before the test's fixtures use it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, Literal

import psycopg
import pytest
from alembic.script import ScriptDirectory

import jobrelay
from jobrelay.core.settings import Settings
from jobrelay.db.engine import libpq_url
from jobrelay.db.migrations import alembic_config
from jobrelay.db.store import Store
from tests.conftest import auth
from tests.support import databases, legacy
from tests.support.processes import run_cli, service_env
from tests.support.servers import Servers
from tests.support.system import System

# The revision `jobrelay migrate` ends at: the newest of the scripts that ship.
HEAD = ScriptDirectory.from_config(alembic_config("")).get_current_head()

APPLICATION_REVISION = "a1b2c3d4e5f6"  # the application's own alembic head
OTHER_SCHEMA = "app_jobs"
SLEEP = {"type": "demo.sleep", "payload": {"seconds": 0}}


def layout_of(request: pytest.FixtureRequest) -> str:
    marker = request.node.get_closest_marker("layout")
    return marker.args[0] if marker else "application"


def schema_of(request: pytest.FixtureRequest) -> str:
    return OTHER_SCHEMA if layout_of(request) == "other_schema" else "jobrelay"


def execute(url: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """One statement in its own transaction, on a session with the database's own search_path
    (``public``: jobrelay's schema is not on it)."""
    with psycopg.connect(libpq_url(url)) as connection:
        cursor = connection.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@pytest.fixture
def direct_database_url(
    servers: Servers, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[str]:
    url = databases.create_empty_database(servers.database_url, "jobrelay_own")
    try:
        layout = layout_of(request)
        if layout == "application":
            make_application_tables(url)
        elif layout == "public_install":
            legacy.migrate_in_public(url, tmp_path)
            request.node.jobs_before = fill_public_install(url)
        env = service_env(Settings(database_url=url, database_schema=schema_of(request)))
        migrated = run_cli(env, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        request.node.migrate_output = migrated.stdout
        yield url
    finally:
        databases.drop_database(servers.database_url, url)


@pytest.fixture
def settings(
    database_url: str, pool_mode: str, tmp_path: Path, request: pytest.FixtureRequest
) -> Settings:
    return Settings(
        database_url=database_url,
        database_pool_mode=pool_mode,
        database_schema=schema_of(request),
        amqp_url="amqp://guest:guest@127.0.0.1:1/",
        results_dir=tmp_path / "results",
        poll_interval_seconds=0.2,
        builtins=True,  # the jobs are of the demo types, off by default
    )


@pytest.fixture
async def store(
    database_url: str, pool_mode: Literal["session", "transaction"], settings: Settings
) -> AsyncIterator[Store]:
    store = Store.connect(
        database_url, pool_size=20, pool_mode=pool_mode, schema=settings.database_schema
    )
    yield store
    await store.close()


# --- an application database ---------------------------------------------------------------


def make_application_tables(url: str) -> None:
    """What an application that already uses Alembic has: its version table and a ``jobs``."""
    execute(
        url,
        "CREATE TABLE public.alembic_version (version_num varchar(32) PRIMARY KEY);"
        f"INSERT INTO public.alembic_version VALUES ('{APPLICATION_REVISION}');"
        "CREATE TABLE public.jobs (id serial PRIMARY KEY, title text NOT NULL);"
        "INSERT INTO public.jobs (title) VALUES ('the application''s own row')",
    )


@pytest.mark.layout("application")
async def test_an_application_database_takes_migrate_and_keeps_its_own_tables(
    database_url: str, direct_database_url: str, system: System
) -> None:
    assert execute(direct_database_url, "SELECT version_num FROM public.alembic_version") == [
        (APPLICATION_REVISION,)
    ]
    assert execute(direct_database_url, "SELECT id, title FROM public.jobs") == [
        (1, "the application's own row")
    ]
    assert execute(direct_database_url, "SELECT version_num FROM jobrelay.alembic_version") == [
        (HEAD,)
    ]
    in_public = execute(
        direct_database_url,
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'public' AND c.relkind IN ('r', 'S', 'i', 'v') "
        "AND c.relname NOT LIKE 'alembic_version%' AND c.relname NOT LIKE 'jobs%'",
    )
    functions_in_public = execute(
        direct_database_url,
        "SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace",
    )
    assert in_public == [(0,)] and functions_in_public == [(0,)]

    # The application's own transaction, on its own connection (search_path public): its row,
    # a job from Python and one from the SQL function, committed together.
    with psycopg.connect(libpq_url(database_url), prepare_threshold=None) as connection:
        connection.execute("INSERT INTO jobs (title) VALUES ('an order')")
        from_python = jobrelay.enqueue(
            connection, client="alice", key="order-1", type="demo.sleep", payload={"seconds": 0}
        )
        row = connection.execute(
            "SELECT jobrelay.jobrelay_enqueue('alice', 'demo.sleep', '{\"seconds\": 0}', 'order-2')"
        ).fetchone()
        assert row is not None
        from_sql = row[0]

    with system.running("application"):
        await system.wait_for("succeeded", from_python.id, from_sql, what="both jobs to succeed")
    assert execute(direct_database_url, "SELECT title FROM public.jobs ORDER BY id") == [
        ("the application's own row",),
        ("an order",),
    ]


# --- an install made before 0012, in public ------------------------------------------------


def fill_public_install(url: str) -> dict[str, tuple[Any, ...]]:
    """Jobs in every state, written at revision 0011 in ``public`` as that version wrote them
    (the SQL function for the accept, then each job moved to its state), by name: the row
    (id, state, attempts, lease_token) of each."""
    names = {}
    with psycopg.connect(libpq_url(url)) as connection:
        connection.execute(
            "INSERT INTO clients (id, name, token_hash) VALUES (gen_random_uuid(), 'old', 'h')"
        )

        def enqueue(name: str) -> uuid.UUID:
            row = connection.execute(
                "SELECT jobrelay_enqueue('old', 'demo.sleep', '{\"seconds\": 0}', %s)", (name,)
            ).fetchone()
            assert row is not None
            names[name] = row[0]
            return uuid.UUID(str(row[0]))

        def published(job: uuid.UUID) -> None:
            connection.execute(
                "UPDATE outbox SET published_at = now(), publish_attempts = 1 WHERE job_id = %s",
                (job,),
            )

        for name in ("queued-1", "queued-2", "queued-3"):
            enqueue(name)
        retrying = enqueue("retrying")  # its outbox row is due: published again, then run
        connection.execute(
            "UPDATE jobs SET state = 'retrying', attempts = 1, last_error_code = 'boom' "
            "WHERE id = %s",
            (retrying,),
        )
        running = enqueue("running")
        published(running)
        connection.execute(
            "UPDATE jobs SET state = 'running', attempts = 1, lease_token = gen_random_uuid(), "
            "lease_until = now() + interval '1 hour' WHERE id = %s",
            (running,),
        )
        for name, state, code in (
            ("succeeded", "succeeded", None),
            ("quarantined", "quarantined", "handler_failed"),
            ("cancelled", "cancelled", None),
        ):
            job = enqueue(name)
            published(job)
            connection.execute(
                "UPDATE jobs SET state = %s, attempts = 1, finished_at = now(), "
                "last_error_code = %s WHERE id = %s",
                (state, code, job),
            )
        connection.execute(
            "INSERT INTO job_results (job_id, result, attempt) VALUES (%s, '{\"answer\": 42}', 1)",
            (names["succeeded"],),
        )
        # A workflow: the child waits for its parent, and has no outbox row until released.
        workflow = uuid.uuid4()
        connection.execute(
            "INSERT INTO workflows (id, client_id, idempotency_key, request_hash, on_failure) "
            "SELECT %s, id, 'flow-1', 'h', 'cancel_dependents' FROM clients WHERE name = 'old'",
            (workflow,),
        )
        parent, child = enqueue("parent"), enqueue("child")
        connection.execute("DELETE FROM outbox WHERE job_id = %s", (child,))
        connection.execute(
            "UPDATE jobs SET workflow_id = %s, workflow_ref = 'parent' WHERE id = %s",
            (workflow, parent),
        )
        connection.execute(
            "UPDATE jobs SET workflow_id = %s, workflow_ref = 'child', state = 'waiting', "
            "waiting_for = 1 WHERE id = %s",
            (workflow, child),
        )
        connection.execute(
            "INSERT INTO job_dependencies (job_id, parent_id) VALUES (%s, %s)", (child, parent)
        )
    return jobs_in(url, "public", names)


def jobs_in(url: str, schema: str, names: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    rows = execute(
        url,
        f"SELECT id, state, attempts, lease_token FROM {schema}.jobs",  # schema: a constant
    )
    by_id = {row[0]: row for row in rows}
    return {name: by_id[job_id] for name, job_id in names.items()}


@pytest.mark.layout("public_install")
async def test_an_install_in_public_is_moved_into_the_schema_with_every_job_where_it_was(
    direct_database_url: str, system: System, request: pytest.FixtureRequest
) -> None:
    before: dict[str, tuple[Any, ...]] = request.node.jobs_before
    output: str = request.node.migrate_output
    assert "moved jobrelay's" in output and "from schema public into jobrelay" in output
    for moved in ("jobs", "outbox", "alembic_version", "jobrelay_enqueue(", "job_types"):
        assert moved in output

    in_public = execute(
        direct_database_url,
        "SELECT (SELECT count(*) FROM pg_tables WHERE schemaname = 'public'), "
        "(SELECT count(*) FROM pg_proc WHERE pronamespace = 'public'::regnamespace)",
    )
    assert in_public == [(0, 0)]
    assert execute(direct_database_url, "SELECT version_num FROM jobrelay.alembic_version") == [
        (HEAD,)
    ]
    names = {name: row[0] for name, row in before.items()}
    assert jobs_in(direct_database_url, "jobrelay", names) == before  # nothing changed by it
    pending = execute(
        direct_database_url,
        "SELECT count(*) FROM jobrelay.outbox WHERE published_at IS NULL",
    )
    assert pending == [(5,)]  # three queued, the retrying one, the workflow's parent

    should_run = ["queued-1", "queued-2", "queued-3", "retrying", "parent", "child"]
    with system.running("moved"):
        await system.wait_for(
            "succeeded", *(names[name] for name in should_run), what="the moved jobs to run"
        )
    after = jobs_in(direct_database_url, "jobrelay", names)
    for name in ("running", "succeeded", "quarantined", "cancelled"):
        assert after[name] == before[name], name
    result = execute(
        direct_database_url,
        "SELECT result FROM jobrelay.job_results WHERE job_id = %s",
        (names["succeeded"],),
    )
    assert result == [({"answer": 42},)]
    async with system.admin_api() as api:
        stats = await api.get("/v1/admin/stats", headers=auth(system.admin))
    assert stats.status_code == 200, stats.text
    by_state = stats.json()["jobs_by_state"]
    assert by_state.get("succeeded") == 1 + len(should_run)
    assert by_state.get("quarantined") == 1 and by_state.get("cancelled") == 1


@pytest.mark.layout("public_install")
def test_migrate_again_moves_nothing(direct_database_url: str, settings: Settings) -> None:
    again = run_cli(service_env(settings), "migrate")
    assert again.returncode == 0, again.stderr
    assert "moved" not in again.stdout and "is at revision head" in again.stdout


# --- another schema ------------------------------------------------------------------------


@pytest.mark.layout("other_schema")
async def test_another_schema_name_works_end_to_end(
    direct_database_url: str, database_url: str, system: System
) -> None:
    assert execute(direct_database_url, "SELECT to_regnamespace('jobrelay')") == [(None,)]
    through_api = await system.submit(SLEEP)
    with psycopg.connect(libpq_url(database_url), prepare_threshold=None) as connection:
        from_python = jobrelay.enqueue(
            connection,
            client="alice",
            key="k-1",
            type="demo.sleep",
            payload={"seconds": 0},
            schema=OTHER_SCHEMA,
        )
        row = connection.execute(
            f"SELECT {OTHER_SCHEMA}.jobrelay_enqueue("
            "'alice', 'demo.sleep', '{\"seconds\": 0}', 'k-2')"
        ).fetchone()
        assert row is not None
    jobs = [through_api, from_python.id, row[0]]

    with system.running("other"):
        await system.wait_for("succeeded", *jobs, what="every job to succeed")
    answer = await system.api.get(f"/v1/jobs/{through_api}", headers=auth(system.alice))
    assert answer.status_code == 200 and answer.json()["state"] == "succeeded"
    counted = execute(direct_database_url, f"SELECT count(*) FROM {OTHER_SCHEMA}.jobs")
    assert counted == [(3,)]
    listed = system.cli_json("jobs", "list")
    assert {str(job_id) for job_id in jobs} <= {job["id"] for job in listed["jobs"]}, json.dumps(
        listed
    )[:300]
