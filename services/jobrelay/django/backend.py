"""``JobrelayBackend``: Django's Tasks framework on jobrelay (docs/django.md).

``my_task.enqueue(...)`` writes a jobrelay job and its outbox row through Django's own
database connection (``jobrelay.enqueue``, services/jobrelay/transactional.py): inside the
caller's ``transaction.atomic()`` the job commits or rolls back with the caller's rows; outside
one, Django's connection autocommits and the job is accepted at once. The dispatcher relays it
and ``jobrelay consumer`` (with ``DJANGO_SETTINGS_MODULE`` set) runs it
(services/jobrelay/django/worker.py).

A task's job type is its dotted path (``task.module_path``), its payload
``{"args": [...], "kwargs": {...}}``. Its ``queue_name`` is its jobrelay queue: jobrelay routes
by type (JOBRELAY_TYPE_QUEUES), so a task whose ``queue_name`` is not the queue its type is
routed to is refused (``InvalidTask``) rather than run silently somewhere else.
"""

from __future__ import annotations

import functools
import importlib
import os
import sys
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import psycopg
from django.apps import apps  # type: ignore[import-untyped,unused-ignore]
from django.core import checks  # type: ignore[import-untyped,unused-ignore]
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped,unused-ignore]
from django.db import connections  # type: ignore[import-untyped,unused-ignore]
from django.db.backends.base.base import BaseDatabaseWrapper  # type: ignore[import-untyped,unused-ignore]
from django.utils.asyncio import async_unsafe  # type: ignore[import-untyped,unused-ignore]
from sqlalchemy import TextClause
from sqlalchemy.dialects.postgresql import psycopg as sa_psycopg
from typing_extensions import ParamSpec

from jobrelay.core.bounds import MAX_ATTEMPTS_MAX, TYPE_NAME_MAX
from jobrelay.core.jobs import Job
from jobrelay.core.settings import DEFAULT_SCHEMA, parse_type_queues, validate_schema_name
from jobrelay.db import queries as q
from jobrelay.db.schema import in_schema
from jobrelay.django.compat import (
    DEFAULT_TASK_QUEUE_NAME,
    BaseTaskBackend,
    InvalidTask,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    normalize_json,
    task_enqueued,
)
from jobrelay.django.results import READY, task_result_of
from jobrelay.transactional import UnknownClient, enqueue

T = TypeVar("T")
P = ParamSpec("P")

# The OPTIONS a JobrelayBackend reads (docs/django.md).
KNOWN_OPTIONS = frozenset(
    {
        "client",
        "database",
        "max_attempts",
        "schema",
        "type_queues",
        "task_modules",
        "timeout_seconds",
    }
)


# The module of an installed app that holds its tasks, as Django's convention names it.
TASKS_MODULE = "tasks"


class JobrelayBackend(BaseTaskBackend):
    supports_defer = True  # run_after is a job's run_at
    supports_async_task = True  # the consumer awaits an async task on its event loop
    supports_get_result = True  # the job's row, from any process
    supports_priority = True  # SPEC section 16's priority has Django's range, -100 to 100

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        options = dict(self.options)
        unknown = sorted(set(options) - KNOWN_OPTIONS)
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}] OPTIONS: unknown {', '.join(unknown)} "
                f"(known: {', '.join(sorted(KNOWN_OPTIONS))})"
            )
        client = options.get("client")
        if not isinstance(client, str) or not client:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}] OPTIONS needs 'client': the jobrelay client whose jobs the "
                "tasks are (its name or id)"
            )
        self.client: str = client
        self.database: str = str(options.get("database", "default"))
        self.schema = _schema(alias, options.get("schema", DEFAULT_SCHEMA))
        self.routes: dict[str, str] = _routes(alias, options.get("type_queues"))
        self.task_modules = _module_names(alias, options.get("task_modules", ()))
        self.timeout_seconds = _positive(
            alias, "timeout_seconds", options.get("timeout_seconds", 300)
        )
        # None: jobrelay's default (DEFAULT_MAX_ATTEMPTS); Django's tasks have no such field.
        self.max_attempts = _attempts(alias, options.get("max_attempts"))
        if "QUEUES" not in params:
            # Every queue the routes name is a queue of this backend: which one a task may
            # name is decided per task by validate_task.
            self.queues = {DEFAULT_TASK_QUEUE_NAME, *self.routes.values()}

    def queue_of(self, job_type: str) -> str:
        """The jobrelay queue a job of ``job_type`` is published to."""
        return self.routes.get(job_type, DEFAULT_TASK_QUEUE_NAME)

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        job_type = task.module_path
        if task.func.__module__ == "__main__":
            raise InvalidTask(
                f"Task {job_type!r} is defined in __main__: a consumer cannot import it by "
                "that name; define it in a module."
            )
        if len(job_type) > TYPE_NAME_MAX:
            raise InvalidTask(
                f"Task path {job_type[:60]!r}... is longer than a jobrelay job type "
                f"({TYPE_NAME_MAX} characters)."
            )
        if task.run_after is not None and task.run_after.utcoffset() is None:
            # Even with USE_TZ off: a job's run_at is an instant, and a naive time is none.
            raise InvalidTask("run_after must be an aware datetime.")
        routed = self.queue_of(job_type)
        if task.queue_name != routed:
            raise InvalidTask(
                f"Task {job_type!r} names queue {task.queue_name!r}, but jobrelay routes its "
                f"type to queue {routed!r} (JOBRELAY_TYPE_QUEUES, or OPTIONS 'type_queues'): "
                "route the type there, or leave queue_name as it is routed."
            )

    def enqueue(self, task: Task[P, T], args: P.args, kwargs: P.kwargs) -> TaskResult[T]:  # type: ignore[valid-type]
        self.validate_task(task)
        # Django's own check (a TypeError for what JSON cannot hold), before any statement.
        payload = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        connection = self._connection()
        connection.validate_no_broken_transaction()
        try:
            # Django's errors, as its own cursor raises them; one that may have broken the
            # connection marks it, so the request's end closes it rather than keep it.
            with connection.wrap_database_errors:
                job = self._enqueue(connection, task, payload)
        except UnknownClient as error:
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}] OPTIONS 'client': {error}") from None
        result: TaskResult[T] = TaskResult(
            task=task,
            id=str(job.id),
            status=READY,
            enqueued_at=job.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        # As Django's own backends do (inside atomic(), before the caller's commit, too).
        task_enqueued.send(type(self), task_result=result)
        return result

    def _enqueue(
        self, connection: BaseDatabaseWrapper, task: Task[Any, Any], payload: dict[str, Any]
    ) -> Job:
        """The job of ``task`` written through Django's connection (its raw psycopg one: the
        statements run in whatever transaction or savepoint Django has open on it)."""
        return enqueue(
            connection.connection,
            client=self.client,
            type=task.module_path,
            payload=payload,
            # Django's tasks have no idempotency key: every enqueue is a job of its own.
            key=f"django:{uuid.uuid4()}",
            run_at=task.run_after,
            priority=task.priority,
            max_attempts=self.max_attempts,
            schema=self.schema,
        )

    def get_result(self, result_id: str) -> TaskResult[Any]:
        job_id = _job_id(result_id)
        connection = self._connection()
        with connection.cursor() as cursor:
            cursor.execute(
                _psycopg_sql(q.DJANGO_TASK_RESULT, self.schema),
                {"id": str(job_id), "client": self.client},
            )
            row = cursor.fetchone()
            names = [column.name for column in cursor.description or ()]
        if row is None:
            raise TaskResultDoesNotExist(result_id)
        job = dict(zip(names, row, strict=True))
        return task_result_of(job, self._task_of(job["type"], result_id), self.alias)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        """The database is one jobrelay can write through (without connecting to it: checks
        run where no database may answer). ``manage.py check`` runs this only where Django's
        tasks checks are registered before the checks run: on Django 6 once ``django.tasks``
        was imported, on the backport with ``django_tasks`` in ``INSTALLED_APPS``; elsewhere
        the first enqueue or get_result says the same (ImproperlyConfigured)."""
        try:
            self._database()
        except ImproperlyConfigured as error:
            yield checks.Error(str(error), id="jobrelay.E001")

    def _database(self) -> BaseDatabaseWrapper:
        """Django's connection ``database``, once it is PostgreSQL on psycopg 3."""
        try:
            connection = connections[self.database]
        except Exception as error:  # Django's ConnectionDoesNotExist
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}] OPTIONS 'database': {error}"
            ) from None
        if connection.vendor != "postgresql":
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: jobrelay writes jobs through DATABASES"
                f"[{self.database!r}], which must be PostgreSQL (it is {connection.vendor})"
            )
        if connection.Database is not psycopg:
            raise ImproperlyConfigured(
                f"TASKS[{self.alias!r}]: DATABASES[{self.database!r}] must use psycopg 3 "
                "(pip install 'psycopg[binary]'), not psycopg2"
            )
        return connection

    @async_unsafe  # type: ignore[untyped-decorator,unused-ignore]
    def _connection(self) -> BaseDatabaseWrapper:
        """``_database()``, connected: its ``connection`` is the psycopg ``Connection``. As
        Django's own ``cursor()`` does: refused on an event loop (SynchronousOnlyOperation)
        before any query, and a persistent connection that fails its health check
        (CONN_HEALTH_CHECKS) is replaced first, rather than handed over broken."""
        connection = self._database()
        connection.close_if_health_check_failed()
        connection.ensure_connection()
        return connection

    def _task_of(self, job_type: str, result_id: str) -> Task[Any, Any]:
        """The Django task a job is of; a job of another type is no task's result. Its module
        is imported only when it is one a consumer imports for tasks (an installed app's
        ``tasks``, the ``task_modules``) or already is: a job's type, which any client may
        write, never has another module imported here."""
        module_name, _, name = job_type.rpartition(".")
        module = sys.modules.get(module_name)
        if module is None and self._holds_tasks(module_name):
            module = importlib.import_module(module_name)
        found = getattr(module, name, None) if module is not None else None
        if not isinstance(found, Task):
            raise TaskResultDoesNotExist(f"{result_id} is a jobrelay job, not a Django task's")
        return found

    def _holds_tasks(self, module_name: str) -> bool:
        app, _, last = module_name.rpartition(".")
        return module_name in self.task_modules or (last == TASKS_MODULE and apps.is_installed(app))


def _routes(alias: str, given: object) -> dict[str, str]:
    """The type routes: OPTIONS 'type_queues' (a mapping, or the JOBRELAY_TYPE_QUEUES form),
    else the JOBRELAY_TYPE_QUEUES the dispatchers and consumers of this deployment read."""
    if isinstance(given, Mapping):
        return {str(k): str(v) for k, v in given.items()}
    spec = os.environ.get("JOBRELAY_TYPE_QUEUES", "") if given is None else given
    if not isinstance(spec, str):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] OPTIONS 'type_queues' is a mapping or a 'type=queue,...' text"
        )
    try:
        return parse_type_queues(spec)
    except ValueError as error:
        raise ImproperlyConfigured(f"TASKS[{alias!r}]: {error}") from None


def _module_names(alias: str, value: object) -> tuple[str, ...]:
    """OPTIONS 'task_modules': a list of dotted module names (a lone text would otherwise be
    taken letter by letter, each letter a module)."""
    if not isinstance(value, list | tuple) or not all(
        isinstance(name, str) and name for name in value
    ):
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] OPTIONS 'task_modules' is a list of module names "
            "(['orders.jobs', ...])"
        )
    return tuple(value)


def _positive(alias: str, option: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ImproperlyConfigured(f"TASKS[{alias!r}] OPTIONS {option!r} is a positive number")
    return float(value)


def _attempts(alias: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS_MAX:
        raise ImproperlyConfigured(
            f"TASKS[{alias!r}] OPTIONS 'max_attempts' is a whole number from 1 to "
            f"{MAX_ATTEMPTS_MAX}"
        )
    return value


def _job_id(result_id: object) -> uuid.UUID:
    try:
        return uuid.UUID(str(result_id))
    except ValueError:
        raise TaskResultDoesNotExist(result_id) from None


@functools.cache
def _psycopg_sql(statement: TextClause, schema: str) -> str:
    """A named statement with psycopg's placeholders (``%(name)s``), as Django's cursor takes
    them, compiled once, naming jobrelay's objects in ``schema`` (db/schema.py)."""
    dialect = sa_psycopg.dialect()  # type: ignore[no-untyped-call]
    return str(in_schema(statement, schema).compile(dialect=dialect))


def _schema(alias: str, value: object) -> str:
    """OPTIONS 'schema': jobrelay's schema in Django's database (JOBRELAY_DATABASE_SCHEMA)."""
    try:
        return validate_schema_name(value if isinstance(value, str) else repr(value))
    except ValueError as error:
        raise ImproperlyConfigured(f"TASKS[{alias!r}] OPTIONS 'schema': {error}") from None
