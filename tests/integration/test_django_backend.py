"""``jobrelay.django.JobrelayBackend`` against real PostgreSQL (docs/django.md): Django's
``task.enqueue`` writes the job through Django's own connection, in Django's transaction;
``get_result`` reads it back as a ``TaskResult``; the consumer's worker runs the tasks.

Django is configured once for the test process (tests/support/django_kit.py) and pointed at
each test's fresh database. Django refuses its ORM on a thread with a running event loop, so
the async tests call it on a thread (``in_thread``)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from jobrelay.core.errors import ConfigurationError
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings, libpq_url
from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth, make_client
from tests.support import django_kit
from tests.support.consumer_kit import StandInDelivery, worker
from tests.support.factories import set_job


@pytest.fixture
def django_db(direct_database_url: str, store: Store) -> Iterator[str]:
    """Django on the test's database (directly: its sessions are counted on the server), with
    the backend's client in it."""
    django_kit.configure(direct_database_url)
    yield direct_database_url
    from django.db import connections

    connections.close_all()


@pytest.fixture
async def client_made(store: Store) -> str:
    return await make_client(store, django_kit.CLIENT)


def tasks() -> Any:
    from tests.support import django_test_tasks

    return django_test_tasks


async def in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function`` on a thread of the default executor, with fresh Django connections there
    (a thread's connection from an earlier test would be to that test's dropped database)."""
    from django.db import connections

    def call() -> Any:
        connections.close_all()
        try:
            return function(*args, **kwargs)
        finally:
            connections.close_all()

    return await asyncio.to_thread(call)


def rows(url: str, sql: str, **params: Any) -> list[Any]:
    """Read on a connection of the test's own, never Django's."""
    with psycopg.connect(libpq_url(url), autocommit=True) as connection:
        return connection.execute(sql, params).fetchall()


JOB_AND_OUTBOX = """
    SELECT j.type, j.payload, j.priority, j.run_at, j.max_attempts, c.name, o.available_at
    FROM jobrelay.jobs j JOIN jobrelay.clients c ON c.id = j.client_id JOIN jobrelay.outbox o ON
        o.job_id = j.id
    WHERE j.id = %(id)s
"""


# --- enqueue --------------------------------------------------------------------------------


def test_a_task_enqueued_in_a_committed_atomic_block_is_a_job_with_its_outbox_row(
    django_db: str, client_made: str
) -> None:
    from django.db import transaction

    run_after = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
    with transaction.atomic():
        result = (
            tasks().greet.using(priority=-3, run_after=run_after).enqueue("Ada", punctuation="?")
        )
        assert rows(django_db, JOB_AND_OUTBOX, id=result.id) == []  # not committed yet

    assert str(result.status) == "READY"
    assert (result.args, result.kwargs) == (["Ada"], {"punctuation": "?"})
    [(job_type, payload, priority, run_at, max_attempts, client, due)] = rows(
        django_db, JOB_AND_OUTBOX, id=result.id
    )
    assert job_type == "tests.support.django_test_tasks.greet"
    assert payload == {"args": ["Ada"], "kwargs": {"punctuation": "?"}}
    assert (priority, run_at, due) == (-3, run_after, run_after)
    assert (client, max_attempts) == (django_kit.CLIENT, 2)  # OPTIONS client and max_attempts


def test_a_task_enqueued_in_a_rolled_back_atomic_block_leaves_no_job(
    django_db: str, client_made: str
) -> None:
    from django.db import transaction

    class Abandon(Exception):
        pass

    with pytest.raises(Abandon), transaction.atomic():
        result = tasks().add.enqueue(1, 2)
        raise Abandon

    assert rows(django_db, "SELECT id FROM jobrelay.jobs WHERE id = %(id)s", id=result.id) == []
    assert rows(django_db, "SELECT count(*) FROM jobrelay.outbox") == [(0,)]


def test_a_task_enqueued_in_a_rolled_back_inner_atomic_block_leaves_no_job_of_the_outer_one(
    django_db: str, client_made: str
) -> None:
    from django.db import transaction

    class Abandon(Exception):
        pass

    with transaction.atomic():
        kept = tasks().add.enqueue(1, 1)
        with pytest.raises(Abandon), transaction.atomic():  # a savepoint, rolled back to
            dropped = tasks().add.enqueue(2, 2)
            raise Abandon
        assert rows(django_db, "SELECT count(*) FROM jobrelay.jobs") == [(0,)]  # not committed yet

    assert rows(django_db, "SELECT id FROM jobrelay.jobs") == [(uuid.UUID(kept.id),)]
    assert rows(django_db, "SELECT id FROM jobrelay.jobs WHERE id = %(id)s", id=dropped.id) == []


def test_a_task_enqueued_outside_an_atomic_block_is_accepted_at_once(
    django_db: str, client_made: str
) -> None:
    result = tasks().add.enqueue(2, 3)

    # Another session sees it: Django's connection autocommits outside atomic().
    [(job_type, payload, priority, *_)] = rows(django_db, JOB_AND_OUTBOX, id=result.id)
    assert (job_type, payload) == (
        "tests.support.django_test_tasks.add",
        {"args": [2, 3], "kwargs": {}},
    )
    assert priority == 7  # the task's own priority


def test_each_enqueue_is_a_job_of_its_own(django_db: str, client_made: str) -> None:
    first, second = tasks().add.enqueue(1, 1), tasks().add.enqueue(1, 1)

    assert first.id != second.id
    assert rows(django_db, "SELECT count(*) FROM jobrelay.jobs") == [(2,)]


async def test_aenqueue_writes_the_job_too(django_db: str, client_made: str) -> None:
    result = await tasks().async_add.aenqueue(4, 5)

    assert rows(django_db, "SELECT type FROM jobrelay.jobs WHERE id = %(id)s", id=result.id) == [
        ("tests.support.django_test_tasks.async_add",)
    ]


async def test_an_enqueue_on_the_event_loop_is_refused_as_djangos_orm_refuses_it(
    django_db: str, client_made: str
) -> None:
    from django.core.exceptions import SynchronousOnlyOperation

    with pytest.raises(SynchronousOnlyOperation):
        tasks().add.enqueue(1, 2)  # aenqueue is the one for async code

    assert rows(django_db, "SELECT count(*) FROM jobrelay.jobs") == [(0,)]


def test_arguments_json_cannot_hold_are_refused_with_djangos_error_writing_nothing(
    django_db: str, client_made: str
) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks().greet.enqueue(object())

    assert rows(django_db, "SELECT count(*) FROM jobrelay.jobs") == [(0,)]


def test_a_client_that_does_not_exist_is_a_configuration_error(django_db: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="OPTIONS 'client'"):
        tasks().add.enqueue(1, 2)


@pytest.fixture
def persistent_connections(django_db: str) -> Iterator[dict[str, Any]]:
    """Django's connections kept between requests (CONN_MAX_AGE None), as a production
    site often has them; the settings of every thread's connection, to change further."""
    from django.db import connections

    database = connections.settings["default"]
    database["CONN_MAX_AGE"] = None
    try:
        yield database
    finally:
        database["CONN_MAX_AGE"] = 0
        database["CONN_HEALTH_CHECKS"] = False
        connections.close_all()


def end_the_session_of_djangos_connection(url: str) -> None:
    """The server ends the session of this thread's Django connection, as a restart of the
    server or a proxy's idle timeout does: Django's side does not know it yet."""
    from django.db import connection

    # With a timeout, it returns once the session has ended (PostgreSQL 14 and later).
    [(ended,)] = rows(
        url,
        "SELECT pg_terminate_backend(%(pid)s, 10000)",
        pid=connection.connection.info.backend_pid,
    )
    assert ended


def test_a_persistent_connection_that_fails_its_health_check_is_replaced_before_an_enqueue(
    django_db: str, client_made: str, persistent_connections: dict[str, Any]
) -> None:
    from django.db import close_old_connections

    persistent_connections["CONN_HEALTH_CHECKS"] = True
    tasks().add.enqueue(1, 1)  # opens the connection, kept
    close_old_connections()  # a request ends; the next one checks the connection once
    end_the_session_of_djangos_connection(django_db)

    result = tasks().add.enqueue(2, 2)

    assert rows(
        django_db, "SELECT count(*) FROM jobrelay.jobs WHERE id = %(id)s", id=result.id
    ) == [(1,)]


def test_an_enqueue_on_a_broken_connection_raises_djangos_error_and_the_request_end_drops_it(
    django_db: str, client_made: str, persistent_connections: dict[str, Any]
) -> None:
    from django.db import OperationalError, close_old_connections

    tasks().add.enqueue(1, 1)
    end_the_session_of_djangos_connection(django_db)

    with pytest.raises(OperationalError):  # django.db's, as its own queries raise it
        tasks().add.enqueue(2, 2)
    close_old_connections()  # the request ends: a connection that had such an error is closed
    result = tasks().add.enqueue(3, 3)

    assert rows(django_db, "SELECT payload FROM jobrelay.jobs WHERE id = %(id)s", id=result.id) == [
        ({"args": [3, 3], "kwargs": {}},)
    ]


# --- what the backend refuses -----------------------------------------------------------------


def test_a_naive_run_after_is_refused(django_db: str) -> None:
    from jobrelay.django.compat import InvalidTask

    with pytest.raises(InvalidTask, match="aware datetime"):
        tasks().add.using(run_after=datetime(2030, 1, 1))


def test_a_queue_name_other_than_the_routed_queue_is_refused(django_db: str) -> None:
    from jobrelay.django.compat import InvalidTask

    with pytest.raises(InvalidTask, match="routes its type to queue 'default'"):
        tasks().add.using(queue_name="slow")
    with pytest.raises(InvalidTask, match="routes its type to queue 'slow'"):
        tasks().slow_report.using(queue_name="default")
    assert tasks().slow_report.queue_name == "slow"  # as JOBRELAY_TYPE_QUEUES routes it


def test_a_priority_outside_minus_100_to_100_is_refused(django_db: str) -> None:
    from jobrelay.django.compat import InvalidTask

    with pytest.raises(InvalidTask, match="priority"):
        tasks().add.using(priority=101)


def test_a_task_defined_in_main_is_refused(django_db: str) -> None:
    from jobrelay.django.compat import InvalidTask, task

    def orphan() -> None:
        pass

    orphan.__module__ = "__main__"
    orphan.__qualname__ = "orphan"
    with pytest.raises(InvalidTask, match="__main__"):
        task()(orphan)


def test_a_backend_without_a_client_is_a_configuration_error(django_db: str) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from jobrelay.django import JobrelayBackend

    with pytest.raises(ImproperlyConfigured, match="needs 'client'"):
        JobrelayBackend("x", {"OPTIONS": {}})
    with pytest.raises(ImproperlyConfigured, match="unknown clients"):
        JobrelayBackend("x", {"OPTIONS": {"client": "a", "clients": "b"}})
    with pytest.raises(ImproperlyConfigured, match="'max_attempts' is a whole number"):
        JobrelayBackend("x", {"OPTIONS": {"client": "a", "max_attempts": 0}})
    with pytest.raises(ImproperlyConfigured, match="'timeout_seconds' is a positive number"):
        JobrelayBackend("x", {"OPTIONS": {"client": "a", "timeout_seconds": "soon"}})
    with pytest.raises(ImproperlyConfigured, match="is not type=queue"):
        JobrelayBackend("x", {"OPTIONS": {"client": "a", "type_queues": "orders.x"}})
    with pytest.raises(ImproperlyConfigured, match="'task_modules' is a list of module names"):
        JobrelayBackend("x", {"OPTIONS": {"client": "a", "task_modules": "orders.jobs"}})


def test_a_database_that_is_not_postgresql_is_a_configuration_error(django_db: str) -> None:
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connections

    from jobrelay.django import JobrelayBackend

    connections.settings["lite"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}
    connections.configure_settings(connections.settings)
    try:
        backend = JobrelayBackend("x", {"OPTIONS": {"client": "a", "database": "lite"}})
        with pytest.raises(ImproperlyConfigured, match="must be PostgreSQL"):
            backend.get_result(str(uuid.uuid4()))
        [error] = backend.check()  # manage.py check says so too
        assert (error.id, "must be PostgreSQL" in error.msg) == ("jobrelay.E001", True)
        assert list(tasks().add.get_backend().check()) == []
    finally:
        connections["lite"].close()
        del connections.settings["lite"]


# --- get_result ---------------------------------------------------------------------------------


def test_a_queued_task_is_ready(django_db: str, client_made: str) -> None:
    enqueued = tasks().greet.enqueue("Ada")

    result = tasks().greet.get_result(enqueued.id)

    assert (str(result.status), result.args, result.kwargs) == ("READY", ["Ada"], {})
    assert result.enqueued_at == enqueued.enqueued_at is not None
    assert (result.started_at, result.finished_at, result.errors, result.attempts) == (
        None,
        None,
        [],
        0,
    )
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


async def test_an_unknown_id_or_another_clients_job_does_not_exist(
    django_db: str, client_made: str, store: Store
) -> None:
    from jobrelay.django.compat import TaskResultDoesNotExist
    from jobrelay.transactional import enqueue

    await make_client(store, "someone")
    with psycopg.connect(libpq_url(django_db), autocommit=True) as connection:
        theirs = enqueue(
            connection,
            client="someone",
            type="tests.support.django_test_tasks.add",
            payload={"args": [1, 2], "kwargs": {}},
            key="k1",
        )

    for unknown in (str(uuid.uuid4()), "not-a-uuid", str(theirs.id)):
        with pytest.raises(TaskResultDoesNotExist):
            await in_thread(tasks().add.get_result, unknown)


async def test_a_job_whose_type_names_another_module_is_no_result_and_imports_nothing(
    django_db: str, client_made: str, store: Store
) -> None:
    import sys

    from jobrelay.django.compat import TaskResultDoesNotExist
    from jobrelay.transactional import enqueue

    # Any client may write any type: reading its result must not import what it names.
    assert "this" not in sys.modules  # the standard library's, which prints when imported
    with psycopg.connect(libpq_url(django_db), autocommit=True) as connection:
        job = enqueue(
            connection,
            client=django_kit.CLIENT,
            type="this.s",
            payload={"args": [], "kwargs": {}},
            key="k-other-module",
        )
    with pytest.raises(TaskResultDoesNotExist):
        await in_thread(tasks().add.get_result, str(job.id))
    assert "this" not in sys.modules


def test_every_job_state_reads_as_one_of_djangos_statuses() -> None:
    from jobrelay.django.results import STATUS_OF_STATE

    assert set(STATUS_OF_STATE) == set(JobState)
    assert {str(STATUS_OF_STATE[state]) for state in JobState} == {
        "READY",
        "RUNNING",
        "SUCCESSFUL",
        "FAILED",
    }


# --- the consumer's side -------------------------------------------------------------------------


def django_registry(type_queues: dict[str, str] | None = None) -> Registry:
    return django_registry_into(Registry(), type_queues)


def django_registry_into(registry: Registry, type_queues: dict[str, str] | None = None) -> Registry:
    from jobrelay.django.worker import add_django_tasks

    add_django_tasks(
        registry,
        {django_kit.SLOW_ROUTES.split("=")[0]: "slow"} if type_queues is None else type_queues,
    )
    return registry


async def run_once(store: Store, settings: Settings, registry: Registry, result: Any) -> Any:
    """One delivery of ``result``'s job handed to a real worker of the consumer; the task's
    result as get_result then reads it."""
    delivery = StandInDelivery(uuid.UUID(result.id), result.task.module_path)
    await worker(store, settings, registry).handle(delivery)  # type: ignore[arg-type]
    return await in_thread(result.task.get_result, result.id)


def test_the_consumer_registers_the_tasks_of_a_jobrelay_backend_only(django_db: str) -> None:
    registry = django_registry()

    names = set(registry.types)
    assert "tests.support.django_test_tasks.add" in names
    assert "tests.support.django_test_tasks.async_add" in names
    assert "tests.support.django_test_tasks.elsewhere" not in names  # ImmediateBackend's
    add = registry.get("tests.support.django_test_tasks.add")
    assert (add.priority, add.description, add.runs_in_thread) == (7, "Adds two numbers.", True)
    assert not registry.get("tests.support.django_test_tasks.async_add").runs_in_thread


async def test_django_tasks_are_closed_to_http_unless_the_clients_patterns_name_them(
    django_db: str, store: Store, settings: Settings
) -> None:
    """The user's trial: a non-admin client submitted a Django task by its dotted path with
    arguments of its choosing, and it ran. Now a client without type patterns is refused
    (403 type_not_allowed, nothing written); one whose patterns name the task submits it."""
    import httpx

    from jobrelay.api.app import create_app
    from jobrelay.core.fingerprint import token_hash
    from jobrelay.db.client_store import ClientStore

    registry = django_registry()
    add = "tests.support.django_test_tasks.add"
    assert registry.get(add).api is False
    plain = await make_client(store, "plain")
    named = "jr_" + uuid.uuid4().hex
    await ClientStore(store).create_client(
        "tasks", token_hash(named), is_admin=False, type_patterns=["tests.support.*"]
    )
    app = create_app(settings, store=store, registry=registry)
    body = {"type": add, "payload": {"args": [1, 2]}}
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as api:
        refused = await api.post("/v1/jobs", json=body, headers=auth(plain, "k-1"))
        assert (refused.status_code, refused.json()["code"]) == (403, "type_not_allowed")
        assert rows(django_db, "SELECT id FROM jobrelay.jobs") == []

        allowed = await api.post("/v1/jobs", json=body, headers=auth(named, "k-2"))
        assert allowed.status_code == 202, allowed.text


def test_a_task_whose_queue_the_consumers_route_elsewhere_stops_the_consumer(
    django_db: str,
) -> None:
    with pytest.raises(ConfigurationError, match="routes it to 'default'"):
        django_registry({})


async def test_a_sync_task_runs_in_the_consumer_and_its_return_value_is_the_result(
    django_db: str, client_made: str, store: Store, settings: Settings
) -> None:
    enqueued = await in_thread(tasks().greet.enqueue, "Ada", punctuation="!")

    result = await run_once(store, settings, django_registry(), enqueued)

    assert str(result.status) == "SUCCESSFUL"
    assert result.return_value == "Hello, Ada!"
    assert result.attempts == 1 and len(result.worker_ids[0]) > 0
    assert result.enqueued_at <= result.started_at == result.last_attempted_at <= result.finished_at
    assert result.errors == []


async def test_an_async_task_runs_as_a_coroutine(
    django_db: str, client_made: str, store: Store, settings: Settings
) -> None:
    enqueued = await in_thread(tasks().async_add.enqueue, 20, 22)

    result = await run_once(store, settings, django_registry(), enqueued)

    assert (str(result.status), result.return_value) == ("SUCCESSFUL", 42)


async def test_a_task_that_takes_context_gets_its_attempt_and_its_result(
    django_db: str, client_made: str, store: Store, settings: Settings
) -> None:
    enqueued = await in_thread(tasks().attempt_seen.enqueue, "first")

    result = await run_once(store, settings, django_registry(), enqueued)

    assert result.return_value == {
        "label": "first",
        "attempt": 1,
        "id": enqueued.id,
        "status_while_running": "RUNNING",
        "workers_while_running": 1,
    }


async def test_a_failing_task_is_retried_then_fails_with_its_errors(
    django_db: str, client_made: str, store: Store, settings: Settings
) -> None:
    enqueued = await in_thread(tasks().fails.enqueue, "no stock")
    registry = django_registry()

    retrying = await run_once(store, settings, registry, enqueued)

    assert (str(retrying.status), retrying.attempts, retrying.finished_at) == ("READY", 1, None)
    [error] = retrying.errors
    assert error.exception_class is ValueError  # "builtins.ValueError"
    assert "no stock" in error.traceback and "Traceback" in error.traceback

    await set_job(store, uuid.UUID(enqueued.id), available_at=datetime.now(UTC) - timedelta(1))
    failed = await run_once(store, settings, registry, enqueued)

    assert (str(failed.status), failed.attempts, len(failed.errors)) == ("FAILED", 2, 2)
    assert failed.finished_at is not None
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value


async def test_a_permanent_error_fails_the_task_at_once(
    django_db: str, client_made: str, store: Store, settings: Settings
) -> None:
    enqueued = await in_thread(tasks().refuses.enqueue, "never")

    result = await run_once(store, settings, django_registry(), enqueued)

    assert (str(result.status), result.attempts) == ("FAILED", 1)
    assert [e.exception_class_path for e in result.errors] == [
        "jobrelay.core.errors.PermanentError"
    ]


def sessions(url: str, pid: int) -> list[Any]:
    return rows(url, "SELECT pid FROM pg_stat_activity WHERE pid = %(pid)s", pid=pid)


@pytest.mark.parametrize("name", ["database_session", "async_database_session"])
async def test_the_database_session_a_task_opened_is_closed_after_it(
    django_db: str, client_made: str, store: Store, settings: Settings, name: str
) -> None:
    task = getattr(tasks(), name)
    enqueued = await in_thread(task.enqueue)

    result = await run_once(store, settings, django_registry(), enqueued)

    pid = result.return_value
    assert isinstance(pid, int)
    for _ in range(50):  # the server ends a closed session a moment after its client left
        if not sessions(django_db, pid):
            break
        await asyncio.sleep(0.05)
    assert sessions(django_db, pid) == []


async def test_a_sync_tasks_database_session_is_closed_after_it_with_persistent_connections(
    django_db: str,
    client_made: str,
    store: Store,
    settings: Settings,
    persistent_connections: dict[str, Any],
) -> None:
    enqueued = await in_thread(tasks().database_session.enqueue)

    result = await run_once(store, settings, django_registry(), enqueued)

    # Its thread ended with the attempt: a connection kept there would be used never again.
    pid = result.return_value
    for _ in range(50):
        if not sessions(django_db, pid):
            break
        await asyncio.sleep(0.05)
    assert sessions(django_db, pid) == []


def test_a_tasks_module_that_fails_to_import_stops_the_consumer_naming_it(
    django_db: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from jobrelay.django.compat import task_backends

    (tmp_path / "broken_django_tasks.py").write_text("raise RuntimeError('no such setting')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    backend = task_backends["default"]
    monkeypatch.setattr(backend, "task_modules", (*backend.task_modules, "broken_django_tasks"))
    registry = Registry()

    with pytest.raises(
        ConfigurationError,
        match="module 'broken_django_tasks' does not import: RuntimeError: no such setting",
    ):
        django_registry_into(registry)
    assert list(registry) == []  # none of the tasks that did import: the consumer stops


def test_the_services_load_the_django_tasks_with_django_settings_module_set(
    django_db: str, make_settings: MakeSettings
) -> None:
    from jobrelay.handlers.loading import registry_for

    cfg = make_settings(type_queues=django_kit.SLOW_ROUTES)
    with_django = registry_for(cfg, environ={"DJANGO_SETTINGS_MODULE": "configured.already"})
    without = registry_for(cfg, environ={})

    added = set(with_django.types) - set(without.types)
    assert "tests.support.django_test_tasks.add" in added
    assert set(without.types) <= set(with_django.types)  # beside the built-ins
    with pytest.raises(ConfigurationError, match="routes it to 'default'"):
        registry_for(make_settings(), environ={"DJANGO_SETTINGS_MODULE": "configured.already"})


def test_an_enqueue_sends_djangos_task_enqueued_signal(django_db: str, client_made: str) -> None:
    from jobrelay.django.compat import task_enqueued

    seen: list[Any] = []

    def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
        seen.append((sender.__name__, task_result.id))

    task_enqueued.connect(receive)
    try:
        result = tasks().add.enqueue(1, 2)
    finally:
        task_enqueued.disconnect(receive)

    assert seen == [("JobrelayBackend", result.id)]


async def test_a_return_value_json_cannot_hold_fails_the_task_at_once(
    django_db: str, client_made: str, store: Store, settings: Settings
) -> None:
    enqueued = await in_thread(tasks().returns_a_set.enqueue)

    result = await run_once(store, settings, django_registry(), enqueued)

    assert (str(result.status), result.attempts) == ("FAILED", 1)
    [(code,)] = rows(
        django_db, "SELECT last_error_code FROM jobrelay.jobs WHERE id = %(id)s", id=result.id
    )
    assert code == "unstorable_return_value"
