"""The chaos run's own job types, beside the built-in ones. Every service of the run loads them
(``HANDLERS`` in JOBRELAY_HANDLERS), and ``chaos/checks.py`` reads what they leave behind.

- ``chaos.limited``: a short sleep of which at most ``LIMIT`` run at once per key
  (docs/flow-control.md); the checker proves from the journal the limit was never exceeded.
- ``chaos.durable``: durable execution (docs/durable-execution.md) under the faults: steps, a
  durable sleep, two waits for the signal ``go`` (which the run sends, before or after the wait
  starts; the first with no deadline, the second with one) and a child job. Each step's
  function appends a line (job, step, attempt, a fresh nonce) to ``RUNS_FILE`` in the results
  directory, so the checker can tell a step run again after its value was recorded from one
  whose attempt died before it was.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from jobrelay.core.durable import ChildFailed
from jobrelay.core.registry import JobContext, Registry

HANDLERS = "chaos.handlers:registry"  # the JOBRELAY_HANDLERS of every service of the run
LIMITED = "chaos.limited"
LIMIT = 2  # at most this many attempts of one key run at once
DURABLE = "chaos.durable"
SIGNAL = "go"  # what chaos.durable waits for, twice
# The second wait's deadline: well beyond the run's own delays (signals are sent at most 6 s
# after the job was accepted, retried through a PostgreSQL restart), so a timeout means a signal
# was lost. Short, because a deadline's outbox row stays due until then even after the signal
# woke the job, and the run's quiescence waits for every outbox row. The first wait has none:
# a sleeper on no deadline (no outbox row), which only its signal wakes.
SIGNAL_TIMEOUT = 20.0
RUNS_FILE = "durable-step-runs.jsonl"  # in JOBRELAY_RESULTS_DIR: one line per step run

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


class DurablePayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sleep: float = Field(ge=0, le=5)  # a durable sleep of that long (0: none)
    signals: bool = False  # wait twice for the signal SIGNAL
    child: str | None = None  # run a child of "ok" (succeeds) or "fails" (quarantined)


def record_run(context: JobContext, step: str) -> dict[str, Any]:
    """A step's function: its run appended to RUNS_FILE (one short line, a single O_APPEND
    write, so lines of concurrent runs do not mix), its value naming the run."""
    value = {"attempt": context.attempt, "nonce": uuid.uuid4().hex}
    line = json.dumps({"job_id": str(context.job_id), "step": step, **value}) + "\n"
    descriptor = os.open(context.results_dir / RUNS_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
        os.fsync(descriptor)  # a run the machine saw is a run the checker sees
    finally:
        os.close(descriptor)
    return value


@registry.job(DURABLE, DurablePayload, max_attempts=5)
async def chaos_durable(context: JobContext, payload: DurablePayload) -> dict[str, Any]:
    """Two steps, a sleep, two waits for SIGNAL, a child, a last step: the result carries every
    value the calls returned, which the checker compares with what was recorded."""
    result: dict[str, Any] = {
        "first": await context.step("first", record_run, context, "first"),
        "second": await context.step("second", record_run, context, "second"),
    }
    if payload.sleep:
        await context.sleep(payload.sleep)
    if payload.signals:
        result["signals"] = [
            await context.wait_for_signal(SIGNAL),
            await context.wait_for_signal(SIGNAL, timeout=SIGNAL_TIMEOUT),
        ]
    if payload.child is not None:
        result["child"] = await _child(context, payload.child)
    result["last"] = await context.step("last", record_run, context, "last")
    return result


async def _child(context: JobContext, outcome: str) -> dict[str, Any]:
    """A child of ``demo.sleep`` (succeeds) or ``demo.fail`` (quarantined at once): its result, or
    how it failed."""
    try:
        if outcome == "ok":
            return {"result": await context.run_child("demo.sleep", {"seconds": 0.01})}
        payload = {"mode": "permanent", "times": 1000}
        await context.run_child("demo.fail", payload, max_attempts=1)
    except ChildFailed as failed:
        return {"failed": failed.state, "child_id": str(failed.child_id)}
    raise AssertionError("a permanent failure's child succeeded")
