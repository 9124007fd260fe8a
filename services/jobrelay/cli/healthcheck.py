"""``jobrelay healthcheck``: the container health check (the checks are jobrelay.healthcheck's)."""

from __future__ import annotations

import argparse

from jobrelay.cli.common import Subcommands, add_command, add_seconds_option, settings_from_env
from jobrelay.core.settings import mask_url
from jobrelay.healthcheck import EXAMPLE, run_checks

HELP = "check the database, the broker and this service's metrics endpoint (containers)"


def cmd_healthcheck(args: argparse.Namespace) -> int:
    healthy, line = run_checks(settings_from_env(), queue=args.queue, timeout=args.timeout)
    print(mask_url(line), flush=True)
    return 0 if healthy else 1


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    parser = add_command(commands, "healthcheck", cmd_healthcheck, HELP, EXAMPLE)
    parser.add_argument(
        "--queue",
        default=None,
        help="also require this work queue to exist with a consumer (a consumer's check)",
    )
    add_seconds_option(parser, "--timeout", default=5.0, help_text="per check (default 5)")
