"""Fault injection against the throwaway servers of ``scripts/servers.py``.

Loaded from its path (``scripts/`` is not a package). Needs ``JOBRELAY_SERVERS_DIR``, which
``make test`` sets; with servers from elsewhere these tests fail with a clear message.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "servers.py"


@cache
def servers_script() -> ModuleType:
    if not os.environ.get("JOBRELAY_SERVERS_DIR"):
        pytest.fail(
            "fault tests need servers started by scripts/servers.py (run `make test`)",
            pytrace=False,
        )
    spec = importlib.util.spec_from_file_location("jobrelay_servers", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pg_restart() -> None:
    """Immediate stop (like a crash) and start, waiting until it accepts connections."""
    servers_script().pg_restart()


def pg_stop() -> None:
    servers_script().pg_stop()


def pg_start() -> None:
    servers_script().pg_start()


def rabbitmqctl(*args: str) -> str:
    return str(servers_script().rabbitmqctl(*args))


def close_all_broker_connections() -> None:
    rabbitmqctl("close_all_connections", "jobrelay test fault")


def rabbit_restart_app() -> None:
    servers_script().rabbit_restart_app()


def rabbit_stop_app() -> None:
    """The broker stops serving (its node stays up): clients' connections are closed."""
    servers_script().rabbit_stop_app(1)


def rabbit_start_app() -> None:
    servers_script().rabbit_start_app(1)
