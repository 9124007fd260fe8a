"""Load the job types a process knows: JOBRELAY_HANDLERS (or ``--handlers``), a comma-separated
list of ``module:attribute`` registries, and the built-in demo types where JOBRELAY_BUILTINS is
true (off by default: any client could submit them). None at all is a valid answer for the API
and the dispatchers (the API then accepts the types the consumers registered); a consumer with
nothing to run refuses to start (``require_job_types``).

The API, the consumers and the CLI all load them here, so they agree on what a type is. The
current directory is importable, as with ``uvicorn`` and ``celery -A``: run a service from your
application's folder and ``--handlers shop.jobs:registry`` finds ``shop/jobs.py``.

With DJANGO_SETTINGS_MODULE set, the tasks of Django's Tasks framework whose backend is
``jobrelay.django.JobrelayBackend`` are job types too (services/jobrelay/django/worker.py,
docs/django.md); without it, nothing here imports Django.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from typing import Any

from jobrelay.core.errors import ConfigurationError
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings, parse_type_queues

BUILTINS = "jobrelay.handlers.builtin:registry"


def registry_for(
    settings: Settings, handlers: str | None = None, *, environ: Mapping[str, Any] | None = None
) -> Registry:
    """The job types of a service: ``handlers`` (a command-line option) overrides the setting;
    with DJANGO_SETTINGS_MODULE in ``environ`` (the process's environment: Django reads it
    there), the Django tasks of a ``JobrelayBackend`` beside them."""
    registry = load_registry(
        handlers if handlers is not None else settings.handlers, builtins=settings.builtins
    )
    if (os.environ if environ is None else environ).get("DJANGO_SETTINGS_MODULE"):
        add_django_tasks(registry, settings)
    return registry


def add_django_tasks(registry: Registry, settings: Settings) -> None:
    """Django's tasks in ``registry``, each checked against the queue JOBRELAY_TYPE_QUEUES
    routes its type to. Imported here only: Django is loaded by a Django deployment alone."""
    _current_directory_importable()  # the Django project's folder, as for handlers
    try:
        from jobrelay.django.worker import add_django_tasks as add_tasks
    except ImportError as error:
        raise ConfigurationError(
            f"DJANGO_SETTINGS_MODULE is set but Django's tasks cannot load: {error} "
            "(pip install 'jobrelay[django]')"
        ) from None
    add_tasks(registry, parse_type_queues(settings.type_queues))


def require_job_types(registry: Registry) -> Registry:
    """``registry``, unless it is empty: a consumer with no type to run would only hold its
    queue's messages back."""
    if not registry.types:
        raise ConfigurationError(
            "no job types to run: set JOBRELAY_HANDLERS=module:registry (or --handlers); "
            "JOBRELAY_BUILTINS=true adds the demo types"
        )
    return registry


def load_registry(spec: str = "", *, builtins: bool = False) -> Registry:
    """One registry of every type named by ``spec`` (``module:attr,module:attr``), plus the
    built-in demo types if ``builtins`` is true; empty when neither names any. A type defined
    by two registries is an error naming both; the same definition reached twice (a registry
    that includes the built-ins) is not."""
    sources = [part.strip() for part in spec.split(",") if part.strip()]
    if builtins:
        sources.insert(0, BUILTINS)
    combined = Registry()
    type_sources: dict[str, str] = {}
    schedule_sources: dict[str, str] = {}
    for source in sources:
        imported = import_registry(source)
        for job_type in imported:
            named = ("job type", job_type.name, "defined")
            if _new_in(combined.types, named, job_type, type_sources, source):
                combined.register(job_type)
        for schedule in imported.schedules.values():
            named = ("schedule", schedule.name, "declared")
            if _new_in(combined.schedules, named, schedule, schedule_sources, source):
                combined.add_schedule(schedule)
    return combined


def _new_in(
    known: Mapping[str, object],
    named: tuple[str, str, str],
    item: object,
    sources: dict[str, str],
    source: str,
) -> bool:
    """Whether ``item`` (``named``: its kind, name, and how one makes it) is new to the
    combined registry, noting where it came from; the same object again is not; another one
    under its name is a ``ConfigurationError``."""
    kind, name, made = named
    before = known.get(name)
    if before is item:
        return False
    if before is not None:
        raise ConfigurationError(
            f"{kind} {name!r} is {made} twice: by {sources[name]} and by {source}"
        )
    sources[name] = source
    return True


def import_registry(spec: str) -> Registry:
    """The ``Registry`` named by one ``module:attribute``."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"handlers must look like module:registry, got {spec!r}")
    _current_directory_importable()
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"cannot import handlers module {module_name!r} (from {os.getcwd()}): {error}"
        ) from None
    except ValueError as error:  # a job type or a schedule declared wrongly in it
        raise ConfigurationError(f"handlers module {module_name!r}: {error}") from None
    registry = getattr(module, attribute, None)
    if not isinstance(registry, Registry):
        raise ConfigurationError(f"{spec!r} is not a jobrelay Registry")
    return registry


def _current_directory_importable() -> None:
    # The installed `jobrelay` script starts with its own folder first on sys.path, not the
    # current directory (unlike `python -m jobrelay`).
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.insert(0, here)
