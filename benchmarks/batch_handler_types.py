"""The batch handlers benchmark's job types (``benchmarks/batch_handlers.py``): the same work,
a call to an external API, done one job per call and a hundred jobs per call. Every service of
the run loads them (``HANDLERS`` in JOBRELAY_HANDLERS), as ``benchmarks/durable_handlers.py``
does for the durable benchmark.

The API (``ExternalApi``) is a stand-in that costs what such an API costs the caller: a fixed
cost per call (``CALL_MS_VARIABLE``, 5 ms unless the benchmark says) plus ``ITEM_SECONDS`` per
item sent (``asyncio.sleep``), and it takes ``CONNECTIONS_VARIABLE`` calls at a time from one
process (a client's connection pool, or the API's own limit on concurrent calls): past that a
call waits for a connection."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel, ConfigDict

from jobrelay.core.batches import BatchContext
from jobrelay.core.registry import JobContext, Registry

HANDLERS = "benchmarks.batch_handler_types:registry"  # JOBRELAY_HANDLERS of every service
ONE = "bench.mail_one"
BATCH = "bench.mail_batch"
BATCH_SIZE = 100
ITEM_SECONDS = 0.00005
# The calls one process makes at a time: BENCH_API_CONNECTIONS (set by the benchmark), else 4.
CONNECTIONS_VARIABLE = "BENCH_API_CONNECTIONS"
# What one call costs, in milliseconds: BENCH_API_CALL_MS (set by the benchmark), else 5.
CALL_MS_VARIABLE = "BENCH_API_CALL_MS"

registry = Registry()


class NoPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ExternalApi:
    """The API of one consumer process, made on its event loop at the first call."""

    connections: asyncio.Semaphore | None = None

    @classmethod
    async def send(cls, items: int) -> None:
        if cls.connections is None:
            cls.connections = asyncio.Semaphore(int(os.environ.get(CONNECTIONS_VARIABLE, "4")))
        async with cls.connections:
            await asyncio.sleep(cls.call_seconds() + ITEM_SECONDS * items)

    @staticmethod
    def call_seconds() -> float:
        return float(os.environ.get(CALL_MS_VARIABLE, "5")) / 1000


@registry.job(ONE, NoPayload)
async def mail_one(context: JobContext, payload: NoPayload) -> dict[str, Any]:
    """One job, one call of the API."""
    await ExternalApi.send(1)
    return {"sent": 1}


@registry.job(BATCH, NoPayload, batch_size=BATCH_SIZE, batch_wait=0.05)
async def mail_batch(context: BatchContext, payloads: list[NoPayload]) -> list[dict[str, Any]]:
    """Up to a hundred jobs, one call of the API."""
    await ExternalApi.send(len(payloads))
    return [{"sent": 1} for _ in payloads]
