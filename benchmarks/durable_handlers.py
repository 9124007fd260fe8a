"""The durable benchmark's job types (``benchmarks/durable.py``): the same no-op with no step,
one step and five steps, each step's function doing nothing but returning a value to record.
Every service of the run loads them (``HANDLERS`` in JOBRELAY_HANDLERS), as
``benchmarks/flow_handlers.py`` does for the flow benchmark.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from jobrelay.core.registry import JobContext, Registry

HANDLERS = "benchmarks.durable_handlers:registry"  # JOBRELAY_HANDLERS of every service
PLAIN = "bench.plain"
ONE_STEP = "bench.one_step"
FIVE_STEPS = "bench.five_steps"

registry = Registry()


class NoPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")


def one() -> int:
    """A step's function: nothing to do, a value to record."""
    return 1


@registry.job(PLAIN, NoPayload)
async def bench_plain(context: JobContext, payload: NoPayload) -> dict[str, Any]:
    """Nothing, no durable call: what every job costs."""
    return {}


@registry.job(ONE_STEP, NoPayload)
async def bench_one_step(context: JobContext, payload: NoPayload) -> dict[str, Any]:
    await context.step("one", one)
    return {}


@registry.job(FIVE_STEPS, NoPayload)
async def bench_five_steps(context: JobContext, payload: NoPayload) -> dict[str, Any]:
    for number in range(1, 6):
        await context.step(f"step{number}", one)
    return {}
