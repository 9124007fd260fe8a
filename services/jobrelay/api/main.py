"""``uvicorn --factory jobrelay.api.main:build_app``: the app of each API worker process (used
when JOBRELAY_API_WORKERS > 1).

Each worker builds its app from the environment when it starts, JOBRELAY_HANDLERS included
(``jobrelay api --handlers`` sets it for them); importing this module reads nothing.
"""

from __future__ import annotations

import cProfile
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI

from jobrelay import telemetry
from jobrelay.api.app import create_app
from jobrelay.api.multiprocess import metrics_dir_from_env
from jobrelay.core.masking import Masker
from jobrelay.core.settings import Settings
from jobrelay.db.pooler import settle_pool_mode
from jobrelay.logs import configure_logging


def build_app() -> FastAPI:
    settings = Settings()
    configure_logging("api", settings.log_level, Masker.from_settings(settings))
    settings = settle_pool_mode(settings)  # `jobrelay api` settled it for its workers already
    telemetry.setup("api")  # each worker exports its own spans (OTEL_EXPORTER_OTLP_ENDPOINT)
    # The directory `jobrelay api` made for its workers' metrics (api/multiprocess.py).
    app = create_app(settings, metrics_dir=metrics_dir_from_env())
    if profile_dir := os.environ.get("JOBRELAY_BENCH_CPU_PROFILE"):
        _cpu_profiled(app, Path(profile_dir))
    return app


def _cpu_profiled(app: FastAPI, directory: Path) -> None:
    """Benchmarks only (``benchmarks/_cpu_profile.py``, which covers the parent process, not
    these workers): this worker under a CPU-clock cProfile, written to
    ``DIR/api-worker-<pid>.prof`` at the lifespan's end, since uvicorn ends a worker it stopped
    by re-raising SIGTERM, and neither ``finally`` nor atexit would run."""
    profile = cProfile.Profile(time.process_time)
    inner = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with inner(app):  # create_app's lifespan, which yields no state
            yield
        profile.disable()
        profile.dump_stats(directory / f"api-worker-{os.getpid()}.prof")

    directory.mkdir(parents=True, exist_ok=True)
    app.router.lifespan_context = lifespan
    profile.enable()
