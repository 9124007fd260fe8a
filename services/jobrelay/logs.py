"""Structured log lines (one JSON object per line) for every service.

Call sites pass identifiers through ``extra`` (``job_id``, ``attempt``, ``event``, ...); this
module never logs payloads, tokens or passwords: every text of a line (the message, the context
values, an exception's traceback) goes through a ``Masker`` that knows the service's database
and broker passwords and recognises tokens and URL passwords by their shape. A logged
exception keeps its traceback (``error`` is its class, ``traceback`` the text, at most 16 KiB).
A line logged while a traced job is handled carries its ``trace_id`` (``current_trace_id``).

The broker libraries (aio-pika, aiormq) log each failed connection attempt and each reconnect of
a robust connection at warning or error, some with a traceback; jobrelay says the same in one
line of its own, with the cause (``jobrelay.broker.connection``). Their lines are debug lines
(``quiet_broker_libraries``): shown only at ``JOBRELAY_LOG_LEVEL=DEBUG``.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from contextvars import ContextVar
from datetime import UTC, datetime

from jobrelay.core.failures import TRACEBACK_MAX_BYTES, class_name, cut_tail
from jobrelay.core.masking import Masker

# The loggers whose lines are demoted to debug (their children too: "aiormq.connection", ...).
BROKER_LIBRARIES = ("aiormq", "aio_pika")
# Above CRITICAL: a logger at this level writes nothing.
SILENT = logging.CRITICAL + 10

# Attributes of a LogRecord that are not call-site context.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's copy of msg with terminal colours
}

# The trace id (32 hex digits) of the job this context handles: set by ``jobrelay/telemetry.py``
# around an accept, and a delivery's processing (whether spans are exported or not), so that
# every line logged meanwhile, a handler's too, says which trace it belongs to.
current_trace_id: ContextVar[str | None] = ContextVar("jobrelay_trace_id", default=None)


class JsonFormatter(logging.Formatter):
    def __init__(self, service: str, masker: Masker | None = None) -> None:
        super().__init__()
        self.service = service
        self.mask = masker or Masker()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "at": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": self.mask(record.getMessage()),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = (
                    value if isinstance(value, int | float | bool) else self.mask(str(value))
                )
        if "trace_id" not in line and (trace_id := current_trace_id.get()) is not None:
            line["trace_id"] = trace_id
        if record.exc_info and record.exc_info[0] is not None:
            line["error"] = class_name(record.exc_info[0])
            text = "".join(traceback.format_exception(*record.exc_info))
            line["traceback"] = cut_tail(self.mask(text), TRACEBACK_MAX_BYTES)
        elif record.stack_info:
            line["stack"] = self.mask(record.stack_info)
        return json.dumps(line, ensure_ascii=False)


class DemotedToDebug(logging.Filter):
    """On a handler: the broker libraries' records become debug records (module docstring)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.partition(".")[0] in BROKER_LIBRARIES:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
        return True


def quiet_broker_libraries(debug: bool = False) -> None:
    """The broker libraries write nothing, or with ``debug`` everything (which a handler with
    ``DemotedToDebug`` writes at debug): for the services and the CLI's commands alike."""
    for name in BROKER_LIBRARIES:
        logging.getLogger(name).setLevel(logging.DEBUG if debug else SILENT)


def configure_logging(service: str, level: str = "INFO", masker: Masker | None = None) -> None:
    """JSON lines on stderr. ``masker``: ``Masker.from_settings(settings)``, so the service's
    own passwords never reach a line."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service, masker))
    handler.addFilter(DemotedToDebug())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    quiet_broker_libraries(debug=root.level <= logging.DEBUG)
    logging.getLogger("uvicorn.access").setLevel(max(logging.WARNING, root.level))
