"""Load the job types a process knows: JOBRELAY_HANDLERS (or ``--handlers``), a comma-separated
list of ``module:attribute`` registries, combined with the built-in types unless
JOBRELAY_BUILTINS is false.

The API, the consumers and the CLI all load them here, so they agree on what a type is. The
current directory is importable, as with ``uvicorn`` and ``celery -A``: run a service from your
application's folder and ``--handlers shop.jobs:registry`` finds ``shop/jobs.py``.
"""

from __future__ import annotations

import importlib
import os
import sys

from jobrelay.core.errors import ConfigurationError
from jobrelay.core.registry import Registry
from jobrelay.core.settings import Settings

BUILTINS = "jobrelay.handlers.builtin:registry"


def registry_for(settings: Settings, handlers: str | None = None) -> Registry:
    """The job types of a service: ``handlers`` (a command-line option) overrides the setting."""
    return load_registry(
        handlers if handlers is not None else settings.handlers, builtins=settings.builtins
    )


def load_registry(spec: str = "", *, builtins: bool = True) -> Registry:
    """One registry of every type named by ``spec`` (``module:attr,module:attr``), plus the
    built-in types unless ``builtins`` is false. A type defined by two registries is an error
    naming both; the same definition reached twice (a registry that includes the built-ins)
    is not."""
    sources = [part.strip() for part in spec.split(",") if part.strip()]
    if builtins:
        sources.insert(0, BUILTINS)
    if not sources:
        raise ConfigurationError(
            "no job types: JOBRELAY_BUILTINS is false and JOBRELAY_HANDLERS names no registry"
        )
    combined = Registry()
    defined_by: dict[str, str] = {}
    scheduled_by: dict[str, str] = {}
    for source in sources:
        imported = import_registry(source)
        for job_type in imported:
            known = combined.types.get(job_type.name)
            if known is job_type:
                continue
            if known is not None:
                raise ConfigurationError(
                    f"job type {job_type.name!r} is defined twice: by {defined_by[job_type.name]}"
                    f" and by {source}"
                )
            combined.register(job_type)
            defined_by[job_type.name] = source
        for schedule in imported.schedules.values():
            declared = combined.schedules.get(schedule.name)
            if declared is schedule:
                continue
            if declared is not None:
                raise ConfigurationError(
                    f"schedule {schedule.name!r} is declared twice: by "
                    f"{scheduled_by[schedule.name]} and by {source}"
                )
            combined.add_schedule(schedule)
            scheduled_by[schedule.name] = source
    return combined


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
