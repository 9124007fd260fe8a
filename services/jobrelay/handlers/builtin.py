"""The built-in job types: ``catalog.export``, ``demo.sleep``, ``demo.fail``."""

from __future__ import annotations

import asyncio
import csv
import hashlib
import io
import os
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from jobrelay.core.errors import PermanentError, TransientError
from jobrelay.core.registry import JobContext, Registry

registry = Registry()


class CatalogExportPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    course: str = Field(min_length=1, max_length=200)


# The longest sleep ``demo.sleep`` accepts; its handler's timeout leaves a minute beyond it, so
# every sleep it accepts can end (the default timeout, 300 s, cut the longer ones off).
SLEEP_MAX_SECONDS = 3600.0
SLEEP_TIMEOUT_SECONDS = SLEEP_MAX_SECONDS + 60.0


class SleepPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    seconds: float = Field(ge=0, le=SLEEP_MAX_SECONDS)


class FailPayload(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mode: Literal["transient", "permanent"]
    times: int = Field(1, ge=0, le=1000)


def render_catalog(course: str) -> bytes:
    """The report body: a deterministic listing, so a rerun would produce the same bytes."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(["course", "lesson", "title"])
    for number in range(1, 11):
        writer.writerow([course, number, f"{course}: lesson {number}"])
    return buffer.getvalue().encode()


def write_once(path: Path, body: bytes) -> bool:
    """Write ``body`` at ``path`` unless it already exists. True when this call wrote it.

    The temp file is fsynced and renamed into place, so the final name holds either nothing or
    the whole report; a crash between writing and storing the result leaves the file for the
    retry to find.
    """
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    # Unique per call: a stale attempt and its successor in one process must not share it.
    temp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    with open(temp, "wb") as handle:
        handle.write(body)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
    return True


def file_summary(key: str, path: Path) -> dict[str, Any]:
    body = path.read_bytes()
    return {"key": key, "size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@registry.job("catalog.export", CatalogExportPayload)
async def catalog_export(context: JobContext, payload: CatalogExportPayload) -> dict[str, Any]:
    """Export a course catalog as CSV under the stable key reports/<job id>.csv."""
    key = f"reports/{context.job_id}.csv"
    path = context.results_dir / key
    wrote = await asyncio.to_thread(write_once, path, render_catalog(payload.course))
    context.logger.info("report %s", "written" if wrote else "found from an earlier attempt")
    return await asyncio.to_thread(file_summary, key, path)


@registry.job("demo.sleep", SleepPayload, timeout_seconds=SLEEP_TIMEOUT_SECONDS)
async def demo_sleep(context: JobContext, payload: SleepPayload) -> dict[str, Any]:
    """Sleep for the given number of seconds."""
    await asyncio.sleep(payload.seconds)
    return {"slept": payload.seconds}


@registry.job("demo.fail", FailPayload)
async def demo_fail(context: JobContext, payload: FailPayload) -> dict[str, Any]:
    """Fail while the attempt number is at most ``times``, then succeed."""
    if context.attempt <= payload.times:
        message = f"demo failure on attempt {context.attempt} of {payload.times}"
        if payload.mode == "permanent":
            raise PermanentError(message)
        raise TransientError(message)
    return {"succeeded_on_attempt": context.attempt}
