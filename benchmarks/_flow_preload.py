"""Preload of ``benchmarks/flow.py``: jobs written through ``Store.accept_jobs`` of whichever
jobrelay is first on PYTHONPATH (the last landing's worktree or today's code), so that each
schema gets its rows as its own accept path writes them.

    python benchmarks/_flow_preload.py URL CLIENT_ID JOBS {noop|limited} SEED

``noop``: ``demo.sleep {"seconds": 0}``, no flow field (every jobrelay takes it). ``limited``:
``bench.limited`` (``benchmarks/flow_handlers.py``) over ``KEYS`` keys, each key's concurrency
key from the type's ``concurrency_key=`` function as the API gives it
(``Registry.flow_defaults``), priorities uniformly from -10 to 10; today's code only.
"""

from __future__ import annotations

import asyncio
import random
import sys
import uuid
from typing import Any

from jobrelay.core.jobs import JobRequest
from jobrelay.db.store import Store

BATCH = 1_000  # submissions per accept_jobs call (the API's batch endpoint takes up to 1,000)
KEYS = 1_000
PRIORITIES = range(-10, 11)


def noop_requests(n: int, prefix: str) -> list[Any]:
    return [
        JobRequest(f"{prefix}{i}", "demo.sleep", {"seconds": 0}, max_attempts=3) for i in range(n)
    ]


def limited_requests(n: int, prefix: str, seed: int) -> list[Any]:
    from benchmarks.flow_handlers import LIMITED, registry
    from jobrelay.core.jobs import Flow

    rng = random.Random(seed)
    requests = []
    for i in range(n):
        payload = {"key": f"k{rng.randrange(KEYS)}"}
        asked = Flow(priority=rng.choice(PRIORITIES))
        model = registry.validate_payload(LIMITED, payload)
        defaults = registry.flow_defaults(LIMITED, model, asked)
        requests.append(
            JobRequest(f"{prefix}{i}", LIMITED, payload, 3, flow=asked, defaults=defaults)
        )
    return requests


async def preload(url: str, client_id: uuid.UUID, n: int, kind: str, seed: int) -> None:
    prefix = f"flow-{uuid.uuid4().hex[:8]}-"
    requests = noop_requests(n, prefix) if kind == "noop" else limited_requests(n, prefix, seed)
    store = Store.connect(url)
    try:
        for start in range(0, n, BATCH):
            results = await store.accept_jobs(client_id, requests[start : start + BATCH])
            if not all(result.created for result in results):
                raise SystemExit("preload: a job was not created")
    finally:
        await store.close()


if __name__ == "__main__":
    url, client, jobs, kind, seed = sys.argv[1:]
    asyncio.run(preload(url, uuid.UUID(client), int(jobs), kind, int(seed)))
