"""The event loop the long-lived services run on, and what they share about tasks on it."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a service (dispatcher, consumer) on uvloop where it is installed (Linux and macOS;
    see pyproject.toml): per socket write and task switch it costs a fraction of the stock
    event loop, which is where most of a relay's CPU went (docs/testing.md, "Performance"). The API
    gets the same from uvicorn, which picks uvloop by itself."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - Windows, PyPy
        return asyncio.run(coroutine)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]]) -> None:
    """Cancel the tasks not done yet and wait until each has ended; their errors are theirs."""
    pending = [task for task in tasks if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending)


async def stopped_within(stop: asyncio.Event, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``stop`` (a service's pause that a stop cuts short); whether
    it is set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
    return stop.is_set()
