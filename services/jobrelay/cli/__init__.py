"""The ``jobrelay`` command: services, migrations, clients, submissions and inspection.

Every error prints one line to stderr and exits non-zero; nothing prints a traceback for a
mistake a user can make.

This module only assembles the parser; each command group lives in a module of its own
(``services``, ``clients``, ``submit``, ``jobs``, ``quarantine``, ``healthcheck``, ``stats``,
``schedules``, ``queues``, ``limits``, ``sequences``, ``workflows``)
that imports ``common`` and jobrelay's packages, never another command module.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from collections.abc import Sequence

from jobrelay.cli import (
    clients,
    healthcheck,
    jobs,
    limits,
    quarantine,
    queues,
    schedules,
    sequences,
    services,
    stats,
    submit,
    workflows,
)
from jobrelay.cli.common import ArgumentParser, exit_status
from jobrelay.logs import quiet_broker_libraries

__all__ = ["OUTPUT_CUT_STATUS", "build_parser", "main"]

# The status of a command whose reader went away (``jobrelay jobs list | head -1``): what a shell
# reports for ``git log``, ``cat`` or ``yes`` killed by SIGPIPE there (128 + 13), so a script
# under ``set -o pipefail`` treats jobrelay as it treats them.
OUTPUT_CUT_STATUS = 141


def build_parser() -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = ArgumentParser(
        prog="jobrelay",
        description="Durable background jobs: transactional outbox, PostgreSQL, RabbitMQ.",
        epilog='example: jobrelay submit catalog.export --payload \'{"course": "JavaScript"}\''
        "\nconfiguration comes from JOBRELAY_* environment variables (see docs/configuration.md)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"jobrelay {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    # The order here is the order of ``jobrelay --help``.
    services.register(commands)  # migrate, api, dispatcher, consumer
    clients.register(commands)
    submit.register(commands)
    jobs.register(commands)  # list, show, trace, redispatch
    workflows.register(commands)  # show
    quarantine.register(commands)
    healthcheck.register(commands)
    stats.register(commands)
    schedules.register(commands)
    queues.register(commands)  # list, pause, resume
    limits.register(commands)  # list, set, clear
    sequences.register(commands)  # list
    return parser


def installed_version() -> str:
    """The version of the installed distribution (the wheel's, or the editable checkout's)."""
    try:
        return importlib.metadata.version("jobrelay")
    except importlib.metadata.PackageNotFoundError:  # sources on PYTHONPATH, not installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)  # --help writes too
        quiet_broker_libraries()  # their lines say what jobrelay's own line says (jobrelay/logs.py)
        status = exit_status(args.handler, args)
        # Output to a pipe is buffered: a reader gone shows here, at the last flush, or else
        # at the interpreter's own flush on exit, which prints "Exception ignored".
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        return output_cut()


def output_cut() -> int:
    """The reader of stdout is gone: exit quietly. Python ignores SIGPIPE, so the write raised
    instead of killing the process; stdout is pointed at /dev/null so that the flush at exit
    finds nothing to fail on."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return OUTPUT_CUT_STATUS
