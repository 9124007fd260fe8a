"""The private RabbitMQ node under <base>/rabbitmq: config, start, readiness, stop, and its
fault helpers. Its processes are found by their environment, never by a remembered pid."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from .common import (
    Layout,
    State,
    kill_and_wait,
    layout,
    port_open,
    processes_of,
    require_state,
    run,
    wait_until,
)

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
RABBIT_READY_TIMEOUT = 90.0
EPMD_PORT = int(os.environ.get("ERL_EPMD_PORT", "4369"))


def rabbit_env(lay: Layout, state: State) -> dict[str, str]:
    """Environment for rabbitmq-server and rabbitmqctl pointing at our private node."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
    env.update(
        {
            "HOME": str(lay.rabbit_home),
            "RABBITMQ_NODENAME": state.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(state.amqp_port),
            "RABBITMQ_DIST_PORT": str(state.dist_port),
            "RABBITMQ_MNESIA_BASE": str(lay.rabbit_mnesia),
            "RABBITMQ_LOG_BASE": str(lay.rabbit_log_base),
            "RABBITMQ_PID_FILE": str(lay.rabbit_pid),
            "RABBITMQ_CONFIG_FILE": str(lay.rabbit / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(lay.rabbit / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(lay.rabbit / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(lay.rabbit / "rabbitmq-env.conf"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(EPMD_PORT),
        }
    )
    return env


def rabbitmqctl_command(state: State, *args: str) -> list[str]:
    return [str(RABBITMQ_BIN / "rabbitmqctl"), "-n", state.node, *args]


def rabbit_write_config(lay: Layout, state: State) -> None:
    lay.rabbit_home.mkdir(parents=True, exist_ok=True)
    lay.rabbit_mnesia.mkdir(parents=True, exist_ok=True)
    lay.rabbit_log_base.mkdir(parents=True, exist_ok=True)
    cookie = lay.rabbit_home / ".erlang.cookie"
    if not cookie.exists():  # kept: rabbitmqctl must keep reaching a node started earlier
        cookie.write_text(secrets.token_hex(16).upper())
        cookie.chmod(0o400)
    (lay.rabbit / "rabbitmq-env.conf").write_text("")
    (lay.rabbit / "enabled_plugins").write_text("[rabbitmq_management].\n")
    (lay.rabbit / "rabbitmq.conf").write_text(
        f"listeners.tcp.default = 127.0.0.1:{state.amqp_port}\n"
        f"management.tcp.ip = 127.0.0.1\n"
        f"management.tcp.port = {state.mgmt_port}\n"
        "loopback_users.guest = true\n"
        "log.console = false\n"
        "log.file.level = info\n"
    )


def rabbit_pids(lay: Layout) -> list[int]:
    """Live processes of this dir's node (shell wrapper, beam.smp, helpers, rabbitmqctl)."""
    return [pid for pid, desc in processes_of(lay).items() if desc.startswith("rabbitmq")]


def rabbit_beam_pid(lay: Layout) -> int:
    try:
        pid = int(lay.rabbit_pid.read_text().strip())
    except (OSError, ValueError):
        return 0
    return pid if pid in rabbit_pids(lay) else 0


def mgmt_get(state: State, path: str, timeout: float = 2.0) -> Any:
    """GET the management API as guest; None if it does not answer with 200."""
    req = urllib.request.Request(f"http://127.0.0.1:{state.mgmt_port}{path}")
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.load(resp) if resp.status == 200 else None
    except (OSError, ValueError, urllib.error.URLError):
        return None


def rabbit_ready(state: State) -> bool:
    if not port_open(state.amqp_port):
        return False
    overview = mgmt_get(state, "/api/overview")
    if not isinstance(overview, dict) or overview.get("node") != state.node:
        return False
    # Our node must really own the AMQP port (it could be someone else's listener).
    return any(
        listener.get("protocol") == "amqp" and listener.get("port") == state.amqp_port
        for listener in overview.get("listeners", [])
    )


def rabbit_launch(lay: Layout, state: State, *, fresh: bool = False) -> None:
    """Start rabbitmq-server detached in its own session (does not wait). Its queues and
    messages kept by an earlier `down` are used again, unless `fresh`."""
    if fresh:
        shutil.rmtree(lay.rabbit_mnesia, ignore_errors=True)
    rabbit_write_config(lay, state)
    lay.rabbit_pid.unlink(missing_ok=True)
    state.epmd_started_by_us = state.epmd_started_by_us or not port_open(EPMD_PORT)
    with open(lay.rabbit_stdout, "w") as out:
        # Own session: a Ctrl-C in the terminal must not reach the node.
        subprocess.Popen(
            [str(RABBITMQ_BIN / "rabbitmq-server")],
            env=rabbit_env(lay, state),
            cwd=lay.rabbit,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def rabbit_wait(lay: Layout, state: State) -> None:
    wait_until(
        lambda: rabbit_ready(state),
        RABBIT_READY_TIMEOUT,
        "RabbitMQ",
        [lay.rabbit_stdout, lay.rabbit_log_base / f"{state.node}.log"],
        alive=lambda: bool(rabbit_pids(lay)),
    )


def rabbit_halt(lay: Layout, state: State | None) -> None:
    """SIGKILL the node and its helpers: its data is throwaway, so no graceful stop needed.

    Processes are found by their environment (see processes_of), never by a remembered
    pid or process group that may have been reused since a crash.
    """
    kill_and_wait(rabbit_pids(lay), timeout=0, first=signal.SIGKILL)
    if state and state.epmd_started_by_us:
        epmd_stop_if_unused()


def rabbit_stop(lay: Layout, state: State | None) -> None:
    """Stop the node cleanly (its queues are kept for the next start), then make sure."""
    if state is not None and rabbit_pids(lay):
        cmd = rabbitmqctl_command(state, "stop")
        run(cmd, env=rabbit_env(lay, state), timeout=60, check=False, cwd=lay.base)
    rabbit_halt(lay, state)


def epmd_stop_if_unused() -> None:
    """Stop the epmd our node started, but only when no Erlang node is registered in it."""
    epmd = shutil.which("epmd")
    if not epmd:
        return
    names = subprocess.run(
        [epmd, "-port", str(EPMD_PORT), "-names"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    if names.returncode == 0 and "name " not in names.stdout:
        # epmd itself refuses -kill while nodes are alive, so this is race-safe.
        subprocess.run(
            [epmd, "-port", str(EPMD_PORT), "-kill"], capture_output=True, stdin=subprocess.DEVNULL
        )


def rabbit_status(lay: Layout, state: State) -> str:
    if rabbit_ready(state):
        return (
            f"running (node {state.node}, pid {rabbit_beam_pid(lay)}) amqp 127.0.0.1:"
            f"{state.amqp_port}, management 127.0.0.1:{state.mgmt_port}"
        )
    if rabbit_pids(lay):
        return f"node {state.node} alive but not serving (app stopped or booting)"
    return f"stopped (node {state.node})"


# --- fault helpers (tests, chaos) ---------------------------------------------------------------


def rabbitmqctl(*args: str, timeout: float = 120) -> str:
    """Run rabbitmqctl against our node; returns stdout, raises ServerError on failure."""
    lay = layout()
    state = require_state(lay)
    cmd = rabbitmqctl_command(state, *args)
    return run(cmd, env=rabbit_env(lay, state), timeout=timeout, cwd=lay.base).stdout


def rabbitmqctl_passthrough(args: list[str]) -> int:
    """rabbitmqctl with the terminal's stdin/stdout/stderr (the CLI's `rabbitmqctl`)."""
    lay = layout()
    state = require_state(lay)
    cmd = rabbitmqctl_command(state, *args)
    return subprocess.run(cmd, env=rabbit_env(lay, state), cwd=lay.base).returncode


def rabbit_restart_app() -> None:
    """rabbitmqctl stop_app + start_app, then wait until AMQP and the management API answer."""
    lay = layout()
    state = require_state(lay)
    rabbitmqctl("stop_app")
    rabbitmqctl("start_app")
    rabbit_wait(lay, state)
