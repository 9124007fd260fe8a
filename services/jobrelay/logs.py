"""Structured log lines (one JSON object per line) for every service.

Call sites pass identifiers through ``extra`` (``job_id``, ``attempt``, ``event``, ...); this
module never logs payloads, tokens or passwords, and masks any URL password that slips into a
message.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

from jobrelay.core.settings import mask_url

# Attributes of a LogRecord that are not call-site context.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's copy of msg with terminal colours
}


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": mask_url(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value if isinstance(value, int | float | bool) else str(value)
        if record.exc_info and record.exc_info[0] is not None:
            # The exception class only: a traceback's text can carry payload fragments.
            line["error"] = record.exc_info[0].__name__
        return json.dumps(line, ensure_ascii=False)


def configure_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiormq", "aio_pika", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
