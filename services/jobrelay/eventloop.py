"""The event loop the long-lived services run on."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a service (dispatcher, consumer) on uvloop where it is installed (Linux and macOS;
    see pyproject.toml): per socket write and task switch it costs a fraction of the stock
    event loop, which is where most of a relay's CPU went (README, "Performance"). The API
    gets the same from uvicorn, which picks uvloop by itself."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows, PyPy
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)
