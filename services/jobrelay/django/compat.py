"""Django's Tasks API from wherever this Django has it: ``django.tasks`` (Django 6.0 and
later) or the ``django-tasks`` backport (Django 5.2). The rest of ``jobrelay.django`` imports
these names from here only, so the two differ in one place.

Types are checked against the backport (the typed one); at run time the framework's own
module wins when it exists, so a project that moves to Django 6 keeps its tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task, task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        DEFAULT_TASK_PRIORITY,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued
    from django_tasks.utils import normalize_json
else:
    try:
        from django.tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task, task_backends
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import (
            DEFAULT_TASK_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2: the backport
        from django_tasks import DEFAULT_TASK_QUEUE_NAME, default_task_backend, task, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import (
            DEFAULT_TASK_PRIORITY,
            Task,
            TaskContext,
            TaskError,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.exceptions import InvalidTaskError as InvalidTask, TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued
        from django_tasks.utils import normalize_json

__all__ = [
    "DEFAULT_TASK_PRIORITY",
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "default_task_backend",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
]
