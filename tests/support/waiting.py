"""Wait until an async check holds: the one polling helper of the test suite."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from jobrelay.core.errors import StoreUnavailable


async def eventually(
    check: Callable[[], Awaitable[Any]],
    *,
    within: float = 30.0,
    interval: float = 0.05,
    what: str = "condition",
) -> Any:
    """The check's first truthy value; a database restart under test only means "ask again"."""
    deadline = time.monotonic() + within
    while True:
        try:
            value = await check()
        except StoreUnavailable as error:
            value = error
        if value and not isinstance(value, StoreUnavailable):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within}s waiting for {what} (last: {value!r})")
        await asyncio.sleep(interval)
