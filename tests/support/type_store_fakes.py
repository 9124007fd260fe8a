"""The in-memory ``TypeStore`` (``core/type_catalog.py``) of the unit tests: test code, beside
the other fakes (``tests/support/consumer_fakes.py``); ``db/type_store.py::PgTypeStore`` is the
real one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from jobrelay.core.flow import Throttle
from jobrelay.core.type_catalog import RegisteredType


@dataclass
class InMemoryTypeStore:
    """The ``TypeStore`` of unit tests; ``reads`` counts ``registered_types`` calls."""

    types: dict[str, RegisteredType] = field(default_factory=dict)
    throttles: dict[str, Throttle] = field(default_factory=dict)  # the runtime ones
    reads: int = 0
    clock: Callable[[], datetime] | None = None

    async def register_types(self, types: Sequence[RegisteredType]) -> None:
        for registered in types:
            at = self.clock() if self.clock is not None else None
            self.types[registered.name] = replace(registered, registered_at=at)

    async def registered_types(self) -> list[RegisteredType]:
        self.reads += 1
        await asyncio.sleep(0)  # a read suspends, as a database's does
        return [self.types[name] for name in sorted(self.types)]

    async def runtime_throttles(self) -> dict[str, Throttle]:
        return dict(self.throttles)
