"""`scripts/servers.py COMMAND`: argument parsing and one function per command."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from .common import (
    STOP_SIGNALS,
    Interrupted,
    Layout,
    ServerError,
    base_dir,
    layout,
    locked,
    log,
    raise_interrupted,
)
from .lifecycle import data_paths, format_exports, has_data, read_env, start_all, status, stop_all
from .postgres import pg_restart, pg_start, pg_stop
from .rabbitmq import rabbit_restart_app, rabbitmqctl_passthrough

DESCRIPTION = "Throwaway PostgreSQL + RabbitMQ servers for jobrelay development, tests and CI."
SIMPLE_COMMANDS = {
    "up": "start both servers (idempotent) and print export lines",
    "status": "show what is running (exit 1 unless both are up)",
    "env": "print the export lines of the running servers",
    "pg-stop": "immediate (crash-like) PostgreSQL stop",
    "pg-start": "start PostgreSQL again and wait until ready",
    "pg-restart": "pg-stop, then pg-start",
    "rabbit-restart-app": "rabbitmqctl stop_app + start_app, wait until ready",
}


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="scripts/servers.py",
        description=DESCRIPTION,
        epilog="See the module docstring for details.",
    )
    sub = top.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    for name, text in SIMPLE_COMMANDS.items():
        sub.add_parser(name, help=text, description=text)
    p_down = sub.add_parser(
        "down",
        help="stop both servers, keeping their data for the next up",
        description="Stop both servers. Their data (PostgreSQL databases, RabbitMQ queues and "
        "messages) is kept for the next `up`, unless --delete-data.",
    )
    p_down.add_argument(
        "--delete-data", action="store_true", help="delete their data too, saying what it deletes"
    )
    p_run = sub.add_parser("run", help="up, run CMD with the env merged in, down")
    p_run.add_argument("--keep", action="store_true", help="leave the servers running")
    p_run.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p_ctl = sub.add_parser("rabbitmqctl", help="rabbitmqctl against our node")
    p_ctl.add_argument("args", nargs=argparse.REMAINDER, help="rabbitmqctl arguments")
    return top


def after_dashes(words: list[str]) -> list[str]:
    """REMAINDER keeps a leading `--`: drop it."""
    return words[1:] if words[:1] == ["--"] else words


# --- commands -----------------------------------------------------------------------------------


def cmd_up(_args: argparse.Namespace) -> int:
    t0 = time.monotonic()
    lay = layout()
    with locked(lay):
        env, started = start_all(lay)
    log(
        f"ready in {time.monotonic() - t0:.1f}s ({lay.env})"
        if started
        else f"already running ({lay.env})"
    )
    sys.stdout.write(format_exports(env))
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    lay = layout()
    with locked(lay):
        ran = stop_all(lay, delete_data=args.delete_data)
        kept = data_paths(lay)
    log("stopped" if ran else "nothing was running")
    if args.delete_data:
        log(f"data deleted; the next `up` starts empty servers in {lay.base}")
    elif kept:
        log(
            f"data kept in {lay.base} for the next `up` (delete it with "
            "`scripts/servers.py down --delete-data` or `make down DELETE=1`)"
        )
    return 0


def cmd_status(_args: argparse.Namespace) -> int:
    states = status()
    print(f"base: {base_dir()}")
    for name, text in states.items():
        print(f"{name}: {text}")
    return 0 if all(t.startswith("running") for t in states.values()) else 1


def cmd_env(_args: argparse.Namespace) -> int:
    sys.stdout.write(format_exports(read_env()))
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    return run_with_servers(after_dashes(args.command), args.keep)


def cmd_rabbitmqctl(args: argparse.Namespace) -> int:
    return rabbitmqctl_passthrough(after_dashes(args.args))


def quietly(action: Callable[[], None]) -> Callable[[argparse.Namespace], int]:
    """A fault helper as a command: it prints nothing and raises ServerError on failure."""

    def command(_args: argparse.Namespace) -> int:
        action()
        return 0

    return command


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "env": cmd_env,
    "run": cmd_run,
    "rabbitmqctl": cmd_rabbitmqctl,
    "pg-stop": quietly(pg_stop),
    "pg-start": quietly(pg_start),
    "pg-restart": quietly(pg_restart),
    "rabbit-restart-app": quietly(rabbit_restart_app),
}


# --- run -- CMD ---------------------------------------------------------------------------------


def run_with_servers(command: list[str], keep: bool) -> int:
    """up, run `command` with the env merged in, down (unless --keep or pre-existing)."""
    if not command:
        raise ServerError("run needs a command: scripts/servers.py run -- CMD ARGS...")
    lay = layout()
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, frame: object) -> None:
        if child is not None and child.poll() is None:
            if signum != signal.SIGINT:  # the terminal already delivered SIGINT to the child
                child.send_signal(signum)
        else:
            raise_interrupted(signum, frame)

    for sig in STOP_SIGNALS:
        signal.signal(sig, on_signal)
    started = False
    rc = 1
    kept_data = has_data(lay)  # an earlier `down` kept it: stop afterwards, but keep it
    try:
        with locked(lay):
            started = True  # if up fails half-way, still clean up
            env, started = start_all(lay)
        if not started:
            log("servers were already running; leaving them running afterwards")
        child = spawn(command, env)
        rc = child.wait()
        rc = 128 - rc if rc < 0 else rc  # killed by signal N: exit 128+N like a shell
    except Interrupted as exc:
        rc = exc.exit_code
    finally:
        if started and not keep:
            stop_after_run(lay, kept_data)
    return rc


def spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    try:
        return subprocess.Popen(command, env={**os.environ, **env})
    except OSError as exc:
        raise ServerError(f"cannot run {command[0]}: {exc.strerror}") from exc


def stop_after_run(lay: Layout, kept_data: bool) -> None:
    # A second Ctrl-C must not interrupt the clean-up and leave servers behind.
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    with locked(lay):
        stop_all(lay, delete_data=not kept_data)
    log("stopped" + (f" (data kept in {lay.base})" if kept_data else ""))


# --- main ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for sig in STOP_SIGNALS:
        signal.signal(sig, raise_interrupted)
    try:
        return COMMANDS[args.cmd](args)
    except ServerError as exc:
        print(f"servers: error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"servers: interrupted ({exc})", file=sys.stderr)
        return exc.exit_code
