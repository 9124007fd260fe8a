"""Django for the tests of ``jobrelay.django`` (tests/integration/test_django_backend.py):
configured once per test process (Django cannot be configured twice), its ``default``
database pointed at each test's fresh database in turn.

The backend ``default`` is a ``JobrelayBackend`` of the client ``CLIENT`` whose tasks are in
``tests/support/django_test_tasks.py``; ``immediate`` is Django's own ImmediateBackend, for a
task jobrelay must not take as its own."""

from __future__ import annotations

import urllib.parse
from typing import Any

from jobrelay.core.settings import libpq_url

CLIENT = "django-tests"
TASKS_MODULE = "tests.support.django_test_tasks"
# A task routed to the work queue "slow" (JOBRELAY_TYPE_QUEUES's form, in the backend's OPTIONS).
SLOW_ROUTES = f"{TASKS_MODULE}.slow_report=slow"


def database_settings(url: str) -> dict[str, Any]:
    """Django's DATABASES entry for a jobrelay database URL (any form libpq_url takes)."""
    parts = urllib.parse.urlsplit(libpq_url(url))
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": urllib.parse.unquote(parts.path.lstrip("/")),
        "USER": urllib.parse.unquote(parts.username or ""),
        "PASSWORD": urllib.parse.unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": dict(urllib.parse.parse_qsl(parts.query)),
        "CONN_MAX_AGE": 0,
    }


def _immediate_backend() -> str:
    try:
        import django.tasks  # noqa: F401

        return "django.tasks.backends.immediate.ImmediateBackend"
    except ImportError:
        return "django_tasks.backends.immediate.ImmediateBackend"


def configure(url: str) -> None:
    """Django set up (once) with its database at ``url``."""
    import django
    from django.conf import settings

    if not settings.configured:
        settings.configure(
            DATABASES={"default": database_settings(url)},
            INSTALLED_APPS=[],
            USE_TZ=True,
            TASKS={
                "default": {
                    "BACKEND": "jobrelay.django.JobrelayBackend",
                    "OPTIONS": {
                        "client": CLIENT,
                        "type_queues": SLOW_ROUTES,
                        "task_modules": [TASKS_MODULE],
                        "max_attempts": 2,
                    },
                },
                "immediate": {"BACKEND": _immediate_backend()},
            },
        )
        django.setup()
    point_at(url)


def point_at(url: str) -> None:
    """Every thread's ``default`` connection at ``url`` from its next use on: the settings
    dict is the one each thread's connection object holds."""
    from django.db import connections

    connections.close_all()
    connections.settings["default"].update(database_settings(url))
