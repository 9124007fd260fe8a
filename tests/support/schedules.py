"""Registries with periodic schedules, importable by the processes a test starts
(``JOBRELAY_HANDLERS=tests.support.schedules:registry``).

- ``registry``: the built-in types and ``heartbeat``, a ``demo.sleep`` of no time every second.
- ``clashing``: another schedule named ``heartbeat``, for the error of loading both.
"""

from __future__ import annotations

from jobrelay.core.registry import Registry
from jobrelay.handlers import builtin

HANDLERS = "tests.support.schedules:registry"
HEARTBEAT = "heartbeat"


def with_builtins() -> Registry:
    """A registry holding the built-in types (the same definitions: loading it beside the
    built-ins is no clash), so that its schedules may name them."""
    registry = Registry()
    for job_type in builtin.registry:
        registry.register(job_type)
    return registry


registry = with_builtins()
registry.schedule(HEARTBEAT, type="demo.sleep", payload={"seconds": 0}, every=1, max_attempts=2)

clashing = with_builtins()
clashing.schedule(HEARTBEAT, type="demo.sleep", payload={"seconds": 1}, every=60)
