"""``uvicorn --factory jobrelay.api.main:build_app``: the app of each API worker process (used
when JOBRELAY_API_WORKERS > 1).

Each worker builds its app from the environment when it starts, JOBRELAY_HANDLERS included
(``jobrelay api --handlers`` sets it for them); importing this module reads nothing.
"""

from __future__ import annotations

from fastapi import FastAPI

from jobrelay import tracing
from jobrelay.api.app import create_app
from jobrelay.api.multiprocess import metrics_dir_from_env
from jobrelay.core.masking import Masker
from jobrelay.core.settings import Settings
from jobrelay.logs import configure_logging


def build_app() -> FastAPI:
    settings = Settings()
    configure_logging("api", settings.log_level, Masker.from_settings(settings))
    tracing.setup("api")  # each worker exports its own spans (OTEL_EXPORTER_OTLP_ENDPOINT)
    # The directory `jobrelay api` made for its workers' metrics (api/multiprocess.py).
    return create_app(settings, metrics_dir=metrics_dir_from_env())
