"""Durable job types for the consumer's end-to-end tests (docs/durable-execution.md), loadable by
a consumer process (``--handlers tests.support.durable_kit:registry``), each in an ``async def``
and a plain ``def`` form where the test runs both.

Every run of a step's function is written as a line (its name) to ``<results_dir>/steps/<job
id>``, so a test counts them across attempts and processes (``step_runs``).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from jobrelay.core.durable import ChildFailed, SignalTimeout
from jobrelay.core.errors import PermanentError, TransientError
from jobrelay.core.registry import JobContext, Registry


class Plan(BaseModel):
    """What a durable test job does; each type reads the fields it needs."""

    model_config = ConfigDict(extra="forbid")
    fail_attempts: int = 0  # a TransientError after its steps, on attempts up to this one
    sleep_seconds: float = 0.0
    signal: str = "approved"
    timeout: float | None = None
    catch_timeout: bool = False
    child_fails: bool = False
    block_first_attempt: bool = False  # the second step's fn hangs on attempt 1
    wait_for_signal: bool = False


def steps_file(results_dir: Path, job_id: uuid.UUID | str) -> Path:
    return results_dir / "steps" / str(job_id)


def step_runs(results_dir: Path, job_id: uuid.UUID | str) -> list[str]:
    """The names of the step functions that ran for the job, in order, across processes."""
    path = steps_file(results_dir, job_id)
    return path.read_text().splitlines() if path.exists() else []


def _ran(context: JobContext, name: str) -> str:
    path = steps_file(context.results_dir, context.job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(f"{name}\n")
    return f"{name} by attempt {context.attempt}"


def _build_registry() -> Registry:
    registry = Registry()

    # --- steps across a retry -------------------------------------------------------------

    @registry.job("durable.steps", Plan)
    async def steps(context: JobContext, plan: Plan) -> dict[str, Any]:
        first = await context.step("first", _ran, context, "first")
        second = await context.step("second", _async_ran, context, "second")
        if context.attempt <= plan.fail_attempts:
            raise TransientError("not yet", code="not_yet")
        return {"first": first, "second": second}

    @registry.job("durable.plain_steps", Plan)
    def plain_steps(context: JobContext, plan: Plan) -> dict[str, Any]:
        first = context.step("first", _ran, context, "first")
        second = context.step("second", _ran, context, "second")
        if context.attempt <= plan.fail_attempts:
            raise TransientError("not yet", code="not_yet")
        return {"first": first, "second": second}

    @registry.job("durable.duplicate", Plan)
    async def duplicate(context: JobContext, plan: Plan) -> dict[str, Any]:
        await context.step("same", _ran, context, "same")
        await context.step("same", _ran, context, "same")
        return {}

    # --- a step interrupted by a crash ----------------------------------------------------

    @registry.job("durable.blocks", Plan)
    async def blocks(context: JobContext, plan: Plan) -> dict[str, Any]:
        one = await context.step("one", _ran, context, "one")

        async def two() -> str:
            done = _ran(context, "two")
            if plan.block_first_attempt and context.attempt == 1:
                await asyncio.sleep(600)  # the test kills the consumer here
            return done

        return {"one": one, "two": await context.step("two", two)}

    # --- sleeps ---------------------------------------------------------------------------

    @registry.job("durable.sleeps", Plan)
    async def sleeps(context: JobContext, plan: Plan) -> dict[str, Any]:
        before = await context.step("before", _ran, context, "before")
        await context.sleep(plan.sleep_seconds)
        after = await context.step("after", _ran, context, "after")
        return {"before": before, "after": after, "parents": sorted(context.parent_results)}

    @registry.job("durable.plain_sleeps", Plan)
    def plain_sleeps(context: JobContext, plan: Plan) -> dict[str, Any]:
        before = context.step("before", _ran, context, "before")
        context.sleep(plan.sleep_seconds)
        after = context.step("after", _ran, context, "after")
        return {"before": before, "after": after, "parents": sorted(context.parent_results)}

    @registry.job("durable.limited", Plan, concurrency=1)
    async def limited(context: JobContext, plan: Plan) -> dict[str, Any]:
        if plan.wait_for_signal:
            await context.wait_for_signal(plan.signal)
        return {"attempt": context.attempt}

    # --- signals --------------------------------------------------------------------------

    @registry.job("durable.waits", Plan)
    async def waits(context: JobContext, plan: Plan) -> dict[str, Any]:
        try:
            value = await context.wait_for_signal(plan.signal, timeout=plan.timeout)
        except SignalTimeout:
            if not plan.catch_timeout:
                raise
            return {"timed_out": True}
        return {"value": value}

    @registry.job("durable.plain_waits", Plan)
    def plain_waits(context: JobContext, plan: Plan) -> dict[str, Any]:
        try:
            value = context.wait_for_signal(plan.signal, timeout=plan.timeout)
        except SignalTimeout:
            if not plan.catch_timeout:
                raise
            return {"timed_out": True}
        return {"value": value}

    # --- children -------------------------------------------------------------------------

    @registry.job("durable.child", Plan)
    async def child(context: JobContext, plan: Plan) -> dict[str, Any]:
        if plan.child_fails:
            raise PermanentError("the child cannot", code="child_cannot")
        return {"answer": 42}

    @registry.job("durable.parent", Plan)
    async def parent(context: JobContext, plan: Plan) -> dict[str, Any]:
        try:
            result = await context.run_child("durable.child", {"child_fails": plan.child_fails})
        except ChildFailed as failed:
            return {
                "failed": {
                    "child_id": str(failed.child_id),
                    "state": failed.state,
                    "error_code": failed.error_code,
                }
            }
        return {"child": result}

    @registry.job("durable.plain_parent", Plan)
    def plain_parent(context: JobContext, plan: Plan) -> dict[str, Any]:
        return {"child": context.run_child("durable.child", {"child_fails": plan.child_fails})}

    @registry.job("durable.starter", Plan)
    async def starter(context: JobContext, plan: Plan) -> dict[str, Any]:
        started = await context.start_child("durable.child", {})
        return {"child_id": str(started)}

    return registry


async def _async_ran(context: JobContext, name: str) -> str:
    """A step's ``fn`` may be a coroutine function too."""
    await asyncio.sleep(0)
    return _ran(context, name)


registry = _build_registry()
