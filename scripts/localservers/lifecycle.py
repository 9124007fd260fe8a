"""Both servers together: the ports they get, starting and stopping them as one, and the
`export` lines that point jobrelay at them."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from .common import (
    PORT_ENV,
    Layout,
    ServerError,
    State,
    ensure_package,
    free_ports,
    kill_and_wait,
    layout,
    load_state,
    locked,
    log,
    port_free,
    processes_of,
    save_state,
)
from .postgres import pg_bindir, pg_ensure, pg_halt, pg_ready, pg_running, pg_status
from .rabbitmq import (
    RABBITMQ_BIN,
    rabbit_halt,
    rabbit_launch,
    rabbit_pids,
    rabbit_ready,
    rabbit_status,
    rabbit_stop,
    rabbit_wait,
)

RABBIT_PORT_KEYS = ["amqp", "mgmt", "dist"]

# --- the environment ----------------------------------------------------------------------------


def env_vars(lay: Layout, state: State) -> dict[str, str]:
    return {
        "JOBRELAY_DATABASE_URL": f"postgresql+psycopg://jobrelay:jobrelay@127.0.0.1:{state.pg_port}/jobrelay",
        "JOBRELAY_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{state.amqp_port}/",
        "JOBRELAY_RABBITMQ_API_URL": f"http://guest:guest@127.0.0.1:{state.mgmt_port}/",
        "JOBRELAY_SERVERS_DIR": str(lay.base),
        "JOBRELAY_RABBITMQ_NODE": state.node,
    }


def format_exports(env: dict[str, str]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def read_env() -> dict[str, str]:
    """The variables exported by the last `up` in this base dir."""
    lay = layout()
    try:
        lines = lay.env.read_text().splitlines()
    except FileNotFoundError:
        raise ServerError(
            f"servers are not running in {lay.base} (run: scripts/servers.py up)"
        ) from None
    env: dict[str, str] = {}
    for line in lines:
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, value = words[1].split("=", 1)
            env[key] = value
    return env


# --- ports --------------------------------------------------------------------------------------


def desired_ports(previous: State | None) -> tuple[dict[str, int], set[str]]:
    """Ports from JOBRELAY_*_PORT, else those of the previous run, else fresh free ones.

    Returns the ports and the keys that were fixed through the environment.
    """
    ports: dict[str, int] = {}
    fixed: set[str] = set()
    for key, var in PORT_ENV.items():
        if value := os.environ.get(var):
            if not value.isdigit() or not 0 < int(value) < 65536:
                raise ServerError(f"{var} must be a port number, got {value!r}")
            ports[key] = int(value)
            fixed.add(key)
        elif previous is not None:
            ports[key] = getattr(previous, f"{key}_port")
    missing = [k for k in PORT_ENV if k not in ports]
    fresh = iter(p for p in free_ports(len(missing) + 4) if p not in ports.values())
    for key in missing:
        ports[key] = next(fresh)
    return ports, fixed


def settle_ports(state: State, keys: list[str], fixed: set[str]) -> None:
    """Make sure the ports of the servers about to start are free.

    A busy port fixed via JOBRELAY_*_PORT is an error; a busy port remembered from a
    previous run is silently replaced by a fresh one.
    """
    for key in keys:
        port = getattr(state, f"{key}_port")
        if port_free(port):
            continue
        if key in fixed:
            raise ServerError(f"port {port} ({PORT_ENV[key]}) is already in use on 127.0.0.1")
        taken = {state.pg_port, state.amqp_port, state.mgmt_port, state.dist_port}
        setattr(state, f"{key}_port", next(p for p in free_ports(5) if p not in taken))


# --- start and stop -----------------------------------------------------------------------------


def start_all(lay: Layout) -> tuple[dict[str, str], bool]:
    """Ensure both servers run; returns (env, whether anything had to be started)."""
    previous = load_state(lay)
    ports, fixed = desired_ports(previous)
    state = State(ports["pg"], ports["amqp"], ports["mgmt"], ports["dist"])
    same_rabbit = previous is not None and all(
        getattr(previous, f"{key}_port") == getattr(state, f"{key}_port")
        for key in RABBIT_PORT_KEYS
    )
    if previous is not None and same_rabbit:
        state.epmd_started_by_us = previous.epmd_started_by_us
    pg_ok = (
        previous is not None
        and previous.pg_port == state.pg_port
        and pg_running(lay) > 0
        and pg_ready(lay, state)
    )
    rabbit_ok = same_rabbit and bool(rabbit_pids(lay)) and rabbit_ready(state)
    if pg_ok and rabbit_ok:
        return env_vars(lay, state), False

    ensure_package(RABBITMQ_BIN / "rabbitmq-server", "rabbitmq-server")
    pg_bindir()  # installs PostgreSQL if missing
    lay.logs.mkdir(parents=True, exist_ok=True)
    # Stop stale/unhealthy servers of this dir first so that their ports become free.
    if not rabbit_ok:
        rabbit_halt(lay, previous)
        settle_ports(state, RABBIT_PORT_KEYS, fixed)
    if not pg_ok:
        pg_halt(lay, "immediate")
        settle_ports(state, ["pg"], fixed)
    kept_data = has_data(lay) or lay.rabbit_mnesia.exists()  # from an earlier `down`
    try:
        _start(lay, state, pg_ok=pg_ok, rabbit_ok=rabbit_ok)
    except BaseException:
        # Do not leave half-started servers behind; the logs/ directory is kept, and so is the
        # data an earlier `down` kept.
        save_state(lay, state)
        stop_all(lay, delete_data=not kept_data)
        raise
    env = env_vars(lay, state)
    lay.env.write_text(format_exports(env))
    return env, True


def _start(lay: Layout, state: State, *, pg_ok: bool, rabbit_ok: bool) -> None:
    """Start whichever server is not healthy: RabbitMQ first (slow boot), PostgreSQL while
    it boots."""
    kept_rabbit = (lay.rabbit_mnesia / state.node).exists()
    if not rabbit_ok:
        log(
            f"starting RabbitMQ node {state.node} (amqp {state.amqp_port}, "
            f"management {state.mgmt_port})" + (" with its kept data" if kept_rabbit else "")
        )
        rabbit_launch(lay, state)
    save_state(lay, state)  # before waiting: an interrupted start must still be cleaned up
    if not pg_ok:
        log(f"starting PostgreSQL on 127.0.0.1:{state.pg_port}")
        pg_ensure(lay, state)
    if not rabbit_ok:
        _wait_for_rabbit(lay, state, kept_rabbit=kept_rabbit)


def _wait_for_rabbit(lay: Layout, state: State, *, kept_rabbit: bool) -> None:
    """Wait for the node; if it does not come up from its kept data, start it afresh once."""
    try:
        rabbit_wait(lay, state)
    except ServerError as exc:
        if not kept_rabbit:
            raise
        log(
            "RabbitMQ did not start from its kept data, starting it afresh: "
            f"{str(exc).splitlines()[0]}"
        )
        rabbit_halt(lay, state)
        rabbit_launch(lay, state, fresh=True)
        rabbit_wait(lay, state)


def data_paths(lay: Layout) -> dict[str, Path]:
    """What `down --delete-data` deletes, by what it holds (only the paths that exist)."""
    paths = {
        "PostgreSQL data (databases, jobs, clients)": lay.pg,
        "RabbitMQ data (queues and their messages)": lay.rabbit,
    }
    return {what: path for what, path in paths.items() if path.exists()}


def has_data(lay: Layout) -> bool:
    return lay.pg_bootstrapped.exists()


def stop_all(lay: Layout, *, delete_data: bool = True) -> bool:
    """Stop both servers of this base dir; delete their data only if `delete_data`.
    Returns whether anything ran."""
    state = load_state(lay)
    was_running = bool(processes_of(lay))
    pg_halt(lay, "fast")
    if delete_data:
        rabbit_halt(lay, state)  # its data goes anyway: no need to wait for a clean stop
    else:
        rabbit_stop(lay, state)
    leftovers = processes_of(lay)
    if leftovers:
        kill_and_wait(list(leftovers), timeout=3)
    lay.env.unlink(missing_ok=True)  # nothing runs: the export lines are stale
    if delete_data:
        _delete_data(lay)
    # Kept: state.json (the ports, hence the RabbitMQ node name its data belongs to) and logs/.
    return was_running


def _delete_data(lay: Layout) -> None:
    for what, path in data_paths(lay).items():
        log(f"deleting {what}: {path}")
    for path in (lay.pg, lay.pg_socket, lay.rabbit):
        shutil.rmtree(path, ignore_errors=True)
    lay.state.unlink(missing_ok=True)


# --- the importable API -------------------------------------------------------------------------


def up() -> dict[str, str]:
    """Start both servers (idempotent) and return the JOBRELAY_* variables."""
    lay = layout()
    with locked(lay):
        return start_all(lay)[0]


def down(*, delete_data: bool = False) -> None:
    """Stop both servers, keeping their data for the next `up` unless `delete_data`."""
    lay = layout()
    with locked(lay):
        stop_all(lay, delete_data=delete_data)


def status() -> dict[str, str]:
    """{"postgres": ..., "rabbitmq": ...} human-readable states."""
    lay = layout()
    state = load_state(lay)
    if state is None:
        stray = processes_of(lay)
        note = f" ({len(stray)} stray processes, run down)" if stray else ""
        return {"postgres": "not running" + note, "rabbitmq": "not running" + note}
    return {"postgres": pg_status(lay, state), "rabbitmq": rabbit_status(lay, state)}
