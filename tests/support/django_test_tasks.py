"""Django tasks of the tests of ``jobrelay.django`` (tests/support/django_kit.py imports this
once Django is configured: a task is checked by its backend when it is defined)."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connection

from jobrelay.core.errors import PermanentError
from jobrelay.django.compat import TaskContext, default_task_backend, task


@task(priority=7)
def add(a: int, b: int) -> int:
    """Adds two numbers."""
    return a + b


@task()
def greet(name: str, *, punctuation: str = "!") -> str:
    return f"Hello, {name}{punctuation}"


@task()
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task()
def fails(message: str) -> None:
    raise ValueError(message)


@task()
def refuses(message: str) -> None:
    raise PermanentError(message)


@task(takes_context=True)
def attempt_seen(context: TaskContext, label: str) -> dict[str, Any]:
    """What a task with ``takes_context`` is told, and its own result as get_result shows it
    while it runs."""
    own = default_task_backend.get_result(context.task_result.id)
    return {
        "label": label,
        "attempt": context.attempt,
        "id": context.task_result.id,
        "status_while_running": str(own.status),
        "workers_while_running": len(own.worker_ids),
    }


def _session() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pid: int = cursor.fetchone()[0]
    return pid


@task()
def database_session() -> int:
    """The PostgreSQL session the task's Django connection had."""
    return _session()


@task()
async def async_database_session() -> int:
    return await sync_to_async(_session)()


@task(queue_name="slow")
def slow_report() -> str:
    return "slow"


@task(backend="immediate")
def elsewhere() -> str:
    return "not jobrelay's"


@task()
def returns_a_set() -> Any:
    return {1, 2}  # JSON has no sets
