"""``jobrelay jobs show | trace | redispatch``: one job, what happened to it, and the lost ones."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    job_id,
    print_json,
    progress,
    run,
    run_with_operations,
    settings_from_env,
    with_store,
)
from jobrelay.cli.output import parse_duration, render_trace

EXAMPLES = {
    "jobs show": "jobrelay jobs show 3f2b...-uuid",
    "trace": "jobrelay jobs trace 5b0c9f6e-...  (or --json for tools)",
    "redispatch": "jobrelay jobs redispatch --older-than 15m",
}


def cmd_jobs_show(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    wanted = job_id(args.id)

    async def work(store: Any) -> int:
        from jobrelay.api.schemas import JobView

        job = await store.get_job(wanted)
        if job is None:
            raise CliError(f"no job {wanted}")
        view = JobView.of(job).model_dump(mode="json")
        if args.json:
            print_json(view)
            return 0
        for field in (
            "id",
            "type",
            "state",
            "attempts",
            "max_attempts",
            "created_at",
            "updated_at",
            "finished_at",
            "last_error_code",
            "last_error",
            "result",
        ):
            value = view.get(field)
            if value is not None:
                print(f"{field:16} {json.dumps(value) if isinstance(value, dict) else value}")
        return 0

    return run(with_store(settings, work))


def cmd_trace(args: argparse.Namespace) -> int:
    wanted = job_id(args.id)

    async def work(ops: Any) -> int:
        trace = await ops.store.trace(wanted)
        if trace is None:
            raise CliError(f"no job {wanted}")
        print(json.dumps(trace, indent=2, default=str) if args.json else render_trace(trace))
        return 0

    return run_with_operations(work)


def cmd_redispatch(args: argparse.Namespace) -> int:
    try:
        older_than = parse_duration(args.older_than)
    except ValueError as error:
        raise CliError(str(error)) from None

    async def work(ops: Any) -> int:
        count = await ops.redispatch(
            older_than_seconds=older_than, progress=progress("redispatched")
        )
        if sys.stderr.isatty():
            print(file=sys.stderr)
        summary = {"redispatched": count, "older_than_seconds": older_than}
        if args.json:
            print(json.dumps(summary))
        else:
            print(
                f"redispatched {count} job(s) published over {args.older_than} ago and never "
                "claimed; the dispatcher publishes them again"
            )
        return 0

    return run_with_operations(work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    jobs = commands.add_parser(
        "jobs", help="inspect jobs", epilog="example: jobrelay jobs trace 5b0c9f6e-..."
    )
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    show = add_command(
        job_commands, "show", cmd_jobs_show, "show one job (any client's)", EXAMPLES["jobs show"]
    )
    show.add_argument("id")
    show.add_argument("--json", action="store_true")

    trace = add_command(
        job_commands,
        "trace",
        cmd_trace,
        "what happened to one job: intent, publishing, deliveries, attempts, result, why",
        EXAMPLES["trace"],
    )
    trace.add_argument("id")
    trace.add_argument("--json", action="store_true")

    redispatch = add_command(
        job_commands,
        "redispatch",
        cmd_redispatch,
        "publish again jobs published long ago but never claimed",
        EXAMPLES["redispatch"],
    )
    redispatch.add_argument("--older-than", default="10m", help="e.g. 90s, 15m, 2h (default 10m)")
    redispatch.add_argument("--json", action="store_true")
