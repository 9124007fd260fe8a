"""``context.progress`` (docs/workflows.md, "Progress"): a handler reports as often as it likes,
the consumer writes each running job's latest report at most every ``interval`` seconds.

A report is a plain call that never blocks (a lock held for a dict assignment), from the event
loop or a plain handler's thread. One flusher task per consumer, alive only while reports
come in, writes the pending reports of all its jobs in one statement
(``ExecutionStore.report_progress``), fenced by each job's lease token; the attempt's last
report is written before its outcome (``flush_job``). A report that cannot be written (the
database away) is dropped: progress is a view, never the job's state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from datetime import UTC, datetime

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.execution import Claimed, ExecutionStore, ProgressReport
from jobrelay.core.registry import ProgressSink

log = logging.getLogger("jobrelay.consumer")

# A job's progress is written at most this often (the job view shows it within a second).
PROGRESS_INTERVAL_SECONDS = 0.25
# The flusher stops after this many quiet intervals; the next report starts it again.
_QUIET_INTERVALS = 8


class ProgressReporter:
    def __init__(
        self, store: ExecutionStore, *, interval: float = PROGRESS_INTERVAL_SECONDS
    ) -> None:
        self.store = store
        self.interval = interval
        self._pending: dict[uuid.UUID, ProgressReport] = {}
        self._lock = threading.Lock()
        self._flusher: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.writes = 0  # statements written, for tests

    def sink_for(self, claim: Claimed) -> ProgressSink:
        """The ``progress_sink`` of the claimed attempt's context (made on the event loop)."""
        self._loop = asyncio.get_running_loop()
        job_id, token = claim.job.id, claim.lease_token

        def report(fraction: float, message: str | None) -> None:
            at = datetime.now(UTC)
            with self._lock:
                self._pending[job_id] = ProgressReport(job_id, token, fraction, message, at)
            loop = self._loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                    loop.call_soon_threadsafe(self._ensure_flusher)

        return report

    async def flush_job(self, job_id: uuid.UUID) -> None:
        """Write the attempt's last report now, if one is pending: before its outcome ends
        the lease that fences it."""
        with self._lock:
            report = self._pending.pop(job_id, None)
        if report is not None:
            await self._write([report])

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self._write(self._take())

    def _ensure_flusher(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_while_reported())

    async def _flush_while_reported(self) -> None:
        quiet = 0
        while quiet < _QUIET_INTERVALS:
            await asyncio.sleep(self.interval)
            reports = self._take()
            quiet = 0 if reports else quiet + 1
            await self._write(reports)

    def _take(self) -> list[ProgressReport]:
        with self._lock:
            reports, self._pending = list(self._pending.values()), {}
        return reports

    async def _write(self, reports: list[ProgressReport]) -> None:
        if not reports:
            return
        try:
            await self.store.report_progress(reports)
            self.writes += 1
        except StoreUnavailable:
            log.debug("progress of %d jobs not written: database unreachable", len(reports))
