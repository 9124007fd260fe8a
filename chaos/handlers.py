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
- ``chaos.batch``: a batch handler (docs/flow-control.md, "Batch handlers"; ``BATCH_SIZE`` jobs
  in one call at most) whose effect per job is a file ``batch/<tag>.json`` in the results
  directory, created once (a later call finds it and answers with it, as ``catalog.export``
  finds its report); each call appends one line per job to ``BATCH_RUNS_FILE``, and a job whose
  payload asks fails its first calls transiently (an ``Exception`` element of the answer).
  Jobs are told apart by the payload's ``tag`` (the plan's key), not by the context: the
  checker maps tags to jobs.
"""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path
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
BATCH = "chaos.batch"
BATCH_SIZE = 20
BATCH_WAIT = 0.2
BATCH_RUNS_FILE = "batch-runs.jsonl"  # in JOBRELAY_RESULTS_DIR: one line per job per call
BATCH_EFFECTS = "batch"  # in JOBRELAY_RESULTS_DIR: <tag>.json per job, written once

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
    append(context.results_dir / RUNS_FILE, line.encode())
    return value


def append(path: Path, data: bytes) -> None:
    """``data`` appended in one O_APPEND write (so lines of concurrent writers do not mix) and
    synced: a run the machine saw is a run the checker sees."""
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, data)
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


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


class BatchPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: str = Field(min_length=1, max_length=200)  # the plan's key: names the job's effect
    fail_times: int = Field(default=0, ge=0, le=5)  # its first calls answer a transient error


# ``context`` is a ``jobrelay.BatchContext``: typed loosely, as it is not read here (the tag
# names each job) beyond its results directory.
@registry.job(BATCH, BatchPayload, max_attempts=3, batch_size=BATCH_SIZE, batch_wait=BATCH_WAIT)
async def chaos_batch(
    context: Any, payloads: list[BatchPayload]
) -> list[dict[str, Any] | Exception]:
    """One call for up to BATCH_SIZE jobs: each job's effect written once, or a transient
    failure for a job whose payload asks for one on this call."""
    results_dir = _results_dir(context)
    call = uuid.uuid4().hex
    answers: list[dict[str, Any] | Exception] = []
    lines = []
    for payload in payloads:
        calls = _count_call(results_dir, payload.tag)
        if calls <= payload.fail_times:
            answers.append(RuntimeError(f"transient failure {calls} of {payload.fail_times}"))
            outcome = "failed"
        else:
            effect, outcome = _effect(results_dir, payload.tag)
            answers.append({**effect, "call": call})
        lines.append({"tag": payload.tag, "call": call, "size": len(payloads), "outcome": outcome})
    append(
        results_dir / BATCH_RUNS_FILE, "".join(json.dumps(line) + "\n" for line in lines).encode()
    )
    return answers


def _results_dir(context: Any) -> Path:
    """The context's results directory; the services' JOBRELAY_RESULTS_DIR (the run sets it for
    every service) when the batch context has none."""
    given = getattr(context, "results_dir", None)
    return Path(given) if given is not None else Path(os.environ["JOBRELAY_RESULTS_DIR"])


def _count_call(results_dir: Path, tag: str) -> int:
    """This call's number among the calls that saw ``tag``: one byte appended per call."""
    path = results_dir / BATCH_EFFECTS / f"{tag}.calls"
    path.parent.mkdir(parents=True, exist_ok=True)
    append(path, b".")
    return path.stat().st_size


def _effect(results_dir: Path, tag: str) -> tuple[dict[str, Any], str]:
    """The job's effect: created by this call ("written"), or the one an earlier call created
    ("found"), whose result may have been lost to a fault. Written aside, then linked into
    place: a file that is there is whole, and only one call's link succeeds."""
    path = results_dir / BATCH_EFFECTS / f"{tag}.json"
    effect = {"tag": tag, "nonce": uuid.uuid4().hex}
    aside = path.with_name(f"{tag}.{effect['nonce']}.tmp")
    append(aside, json.dumps(effect).encode())
    try:
        os.link(aside, path)
    except FileExistsError:
        return dict(json.loads(path.read_text())), "found"
    finally:
        aside.unlink()
    return effect, "written"
