"""The chaos run's own job type, beside the built-in ones: ``chaos.limited``, a short sleep of
which at most ``LIMIT`` run at once per key (docs/flow-control.md). Every service of the run
loads it (``HANDLERS`` in JOBRELAY_HANDLERS), and ``chaos/checks.py`` reads the journal to
prove the limit was never exceeded.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jobrelay.core.registry import JobContext, Registry

HANDLERS = "chaos.handlers:registry"  # the JOBRELAY_HANDLERS of every service of the run
LIMITED = "chaos.limited"
LIMIT = 2  # at most this many attempts of one key run at once

registry = Registry()


class LimitedPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str = Field(min_length=1, max_length=200)
    seconds: float = Field(ge=0, le=5)


@registry.job(LIMITED, LimitedPayload, concurrency=LIMIT, concurrency_key=lambda p: p.key)
async def chaos_limited(context: JobContext, payload: LimitedPayload) -> dict[str, Any]:
    """Sleep for the given number of seconds, holding one of its key's slots."""
    await asyncio.sleep(payload.seconds)
    return {"key": payload.key, "slept": payload.seconds}
