"""Load a registry of job types from ``module:attribute`` (``--handlers``, JOBRELAY_HANDLERS)."""

from __future__ import annotations

import importlib

from jobrelay.core.errors import ConfigurationError
from jobrelay.core.registry import Registry

DEFAULT_HANDLERS = "jobrelay.handlers.builtin:registry"


def load_registry(spec: str = DEFAULT_HANDLERS) -> Registry:
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ConfigurationError(f"handlers must look like module:registry, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ConfigurationError(
            f"cannot import handlers module {module_name!r}: {error}"
        ) from None
    registry = getattr(module, attribute, None)
    if not isinstance(registry, Registry):
        raise ConfigurationError(f"{spec!r} is not a jobrelay Registry")
    return registry
