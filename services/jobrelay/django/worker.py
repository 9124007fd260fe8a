"""The consumer's side of Django's tasks (docs/django.md, "Running the tasks").

``jobrelay consumer`` with ``DJANGO_SETTINGS_MODULE`` set (services/jobrelay/handlers/loading.py)
sets Django up once, finds the tasks of every ``JobrelayBackend`` (the ``tasks`` module of each
installed app, and each backend's OPTIONS ``task_modules``), and registers each as a job type
named by its dotted path, whose handler calls the task's function:

- a plain function in a thread of its own (services/jobrelay/consumer/handler_call.py), an
  ``async def`` on the consumer's event loop;
- Django's database connections closed before and after, in the thread that ran the task, as
  Django's request cycle does (``close_old_connections``); a plain function's are closed after
  it whatever CONN_MAX_AGE says, since its thread ends with it;
- its return value (JSON, as Django requires) stored as the job's result
  ``{"return_value": ...}``.

An exception fails the attempt, as in Django: it is retried with backoff until the job's
attempts are spent (the backend's OPTIONS ``max_attempts``, else ``DEFAULT_MAX_ATTEMPTS``),
then quarantined (Django's ``FAILED``).
jobrelay's ``PermanentError`` quarantines at once, ``TransientError`` is retried as any
exception is.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import socket
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime
from inspect import iscoroutinefunction
from types import ModuleType
from typing import Any

import django  # type: ignore[import-untyped,unused-ignore]
from asgiref.sync import sync_to_async
from django.apps import apps  # type: ignore[import-untyped,unused-ignore]
from django.conf import settings  # type: ignore[import-untyped,unused-ignore]
from django.db import (  # type: ignore[import-untyped,unused-ignore]
    close_old_connections,
    connections,
)
from pydantic import BaseModel, ConfigDict, Field

from jobrelay.core.errors import ConfigurationError, PermanentError
from jobrelay.core.registry import Handler, JobContext, JobType, Registry
from jobrelay.django.backend import TASKS_MODULE, JobrelayBackend
from jobrelay.django.compat import (
    Task,
    TaskContext,
    TaskResult,
    normalize_json,
    task_backends,
)
from jobrelay.django.results import RUNNING


class DjangoTaskPayload(BaseModel):
    """A Django task's job payload: the call's arguments, JSON as Django requires."""

    model_config = ConfigDict(extra="forbid")

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)


def add_django_tasks(registry: Registry, type_queues: Mapping[str, str]) -> list[str]:
    """Set Django up (``DJANGO_SETTINGS_MODULE``) and register in ``registry`` every task of a
    ``JobrelayBackend``; returns their types. ``ConfigurationError`` for a Django that will
    not start, a task module that will not import, a type registered twice, or a task whose
    ``queue_name`` is not the queue ``type_queues`` (JOBRELAY_TYPE_QUEUES) routes it to."""
    try:
        backends = _set_up()
        tasks = {task.module_path: task for task in discover(backends)}
    except ConfigurationError:
        raise
    except Exception as error:  # Django's ImproperlyConfigured, an ImportError, an InvalidTask
        raise ConfigurationError(f"Django tasks: {type(error).__name__}: {error}") from None
    for job_type, task in sorted(tasks.items()):
        routed = type_queues.get(job_type, "default")
        if task.queue_name != routed:
            raise ConfigurationError(
                f"Django task {job_type!r} names queue {task.queue_name!r}, but "
                f"JOBRELAY_TYPE_QUEUES routes it to {routed!r}"
            )
        if job_type in registry:
            raise ConfigurationError(f"job type {job_type!r} is a Django task and a handler's")
        registry.register(job_type_of(task, backends[task.backend].timeout_seconds))
    return sorted(tasks)


def _set_up() -> dict[str, JobrelayBackend]:
    """Django, set up once per process; its ``JobrelayBackend`` backends by alias."""
    if not apps.ready:
        django.setup()
    return {
        alias: task_backends[alias]
        for alias in getattr(settings, "TASKS", {})
        if isinstance(task_backends[alias], JobrelayBackend)
    }


def discover(backends: Mapping[str, JobrelayBackend]) -> Iterator[Task[Any, Any]]:
    """The tasks of ``backends`` (by alias) in the ``tasks`` modules of the installed apps and
    in each backend's ``task_modules``. A ``tasks`` module that fails to import is an error,
    not a silent absence."""
    names = [
        f"{app.name}.{TASKS_MODULE}"
        for app in apps.get_app_configs()
        if _has_submodule(app.module, TASKS_MODULE)
    ]
    names += [name for backend in backends.values() for name in backend.task_modules]
    for name in dict.fromkeys(names):
        module = _import_tasks_module(name)
        yield from (task for task in _tasks_in(module) if task.backend in backends)


def _import_tasks_module(name: str) -> ModuleType:
    """The tasks module ``name``; ``ConfigurationError`` naming it when it does not import
    (whatever it raised: the error alone need not say which module it came from)."""
    try:
        return importlib.import_module(name)
    except Exception as error:
        raise ConfigurationError(
            f"Django tasks module {name!r} does not import: {type(error).__name__}: {error}"
        ) from None


def _has_submodule(package: ModuleType | None, name: str) -> bool:
    path = getattr(package, "__path__", None)
    return path is not None and any(info.name == name for info in pkgutil.iter_modules(path))


def _tasks_in(module: ModuleType) -> Iterable[Task[Any, Any]]:
    return (value for value in vars(module).values() if isinstance(value, Task))


def job_type_of(task: Task[Any, Any], timeout_seconds: float = 300.0) -> JobType:
    """The job type that runs ``task``: named by its dotted path, its payload its arguments;
    closed to HTTP by default (``api=False``): a client submits it only when its type patterns
    name it, since its arguments reach the task's function as they are."""
    return JobType(
        name=task.module_path,
        payload_model=DjangoTaskPayload,
        handler=handler_of(task),
        timeout_seconds=timeout_seconds,
        description=(task.func.__doc__ or "").strip().split("\n")[0],
        priority=task.priority,
        api=False,
    )


def handler_of(task: Task[Any, Any]) -> Handler:
    """The consumer's handler of ``task``: a plain one for a plain function (run in a daemon
    thread of its own, as every plain handler), an async one for an ``async def``."""
    if iscoroutinefunction(task.func):

        async def run_async(context: JobContext, payload: DjangoTaskPayload) -> dict[str, Any]:
            # The thread Django's async ORM calls use (sync_to_async's, thread-sensitive).
            await sync_to_async(close_old_connections)()
            try:
                value = await task.func(*_arguments(task, context, payload), **payload.kwargs)
            finally:
                await sync_to_async(close_old_connections)()
            return stored(value)

        return run_async

    def run(context: JobContext, payload: DjangoTaskPayload) -> dict[str, Any]:
        close_old_connections()
        try:
            value = task.func(*_arguments(task, context, payload), **payload.kwargs)
        finally:
            # Closed whatever CONN_MAX_AGE says: the consumer runs each attempt of a plain
            # handler in a thread of its own, which ends with it, so a connection kept open
            # would never be used again and its session would stay until a garbage collection.
            connections.close_all()
        return stored(value)

    return run


def _arguments(task: Task[Any, Any], context: JobContext, payload: DjangoTaskPayload) -> list[Any]:
    if task.takes_context:
        return [task_context(task, context, payload), *payload.args]
    return list(payload.args)


def task_context(task: Task[Any, Any], context: JobContext, payload: DjangoTaskPayload) -> Any:
    """Django's ``TaskContext`` of this attempt: ``attempt`` is jobrelay's attempt number
    (Django counts it as the length of ``worker_ids``, so earlier attempts' workers stand as
    ``""`` there: ``get_result`` has their names)."""
    now = datetime.now(UTC)
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=str(context.job_id),
        status=RUNNING,
        enqueued_at=None,
        started_at=now,
        finished_at=None,
        last_attempted_at=now,
        args=payload.args,
        kwargs=payload.kwargs,
        backend=task.backend,
        errors=[],
        worker_ids=[""] * max(context.attempt - 1, 0) + [_this_worker()],
    )
    return TaskContext(task_result=result)


def _this_worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def stored(value: Any) -> dict[str, Any]:
    """The job's result: the return value, normalized to JSON as Django's backends do. A
    value JSON cannot hold will not become one on a retry: the job is quarantined."""
    try:
        return {"return_value": normalize_json(value)}
    except (TypeError, ValueError) as error:
        raise PermanentError(
            f"the task's return value is not JSON: {error}", code="unstorable_return_value"
        ) from None
