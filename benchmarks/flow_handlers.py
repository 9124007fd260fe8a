"""The flow benchmark's own job type (``benchmarks/flow.py``): ``bench.limited``, a no-op of
which at most one runs at once per key. Every service of the limited variant loads it
(``HANDLERS`` in JOBRELAY_HANDLERS), as the chaos run loads ``chaos/handlers.py``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jobrelay.core.registry import JobContext, Registry

HANDLERS = "benchmarks.flow_handlers:registry"  # the JOBRELAY_HANDLERS of the limited variant
LIMITED = "bench.limited"

registry = Registry()


class LimitedPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=200)


@registry.job(LIMITED, LimitedPayload, concurrency=1, concurrency_key=lambda p: p.key)
async def bench_limited(context: JobContext, payload: LimitedPayload) -> dict[str, Any]:
    """Nothing, holding its key's one slot while it runs."""
    return {}
