"""``jobrelay jobs show | trace | redispatch``: one job, what happened to it, and the lost ones."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_group,
    job_id,
    print_document,
    progress,
    run_with_operations,
    run_with_store,
    settings_from_env,
)
from jobrelay.cli.output import render_trace
from jobrelay.core.durations import parse_duration
from jobrelay.core.trace import trace_document

if TYPE_CHECKING:
    from jobrelay.db.store import Store
    from jobrelay.operations import Operations

EXAMPLES = {
    "jobs show": "jobrelay jobs show 3f2b...-uuid",
    "trace": "jobrelay jobs trace 5b0c9f6e-...  (or --json for tools)",
    "redispatch": "jobrelay jobs redispatch --older-than 15m",
}

SHOWN_FIELDS = (
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
)


def render_job(view: dict[str, Any]) -> str:
    """The job's fields that have a value, one a line."""
    return "\n".join(
        f"{field:16} {json.dumps(value) if isinstance(value, dict) else value}"
        for field in SHOWN_FIELDS
        if (value := view.get(field)) is not None
    )


def cmd_jobs_show(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    wanted = job_id(args.id)

    async def work(store: Store) -> int:
        from jobrelay.api.schemas import JobView

        job = await store.get_job(wanted)
        if job is None:
            raise CliError(f"no job {wanted}")
        print_document(JobView.of(job).model_dump(mode="json"), render_job, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def cmd_trace(args: argparse.Namespace) -> int:
    wanted = job_id(args.id)

    async def work(ops: Operations) -> int:
        trace = await ops.store.trace(wanted)
        if trace is None:
            raise CliError(f"no job {wanted}")
        print_document(trace_document(trace), render_trace, as_json=args.json, ensure_ascii=True)
        return 0

    return run_with_operations(work)


def cmd_redispatch(args: argparse.Namespace) -> int:
    try:
        older_than = parse_duration(args.older_than)
    except ValueError as error:
        raise CliError(str(error)) from None

    async def work(ops: Operations) -> int:
        with progress("redispatched") as show_progress:
            count = await ops.redispatch(older_than_seconds=older_than, progress=show_progress)
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
    actions = add_group(commands, "jobs", "inspect jobs", "jobrelay jobs trace 5b0c9f6e-...")
    add_command(
        actions,
        "show",
        cmd_jobs_show,
        "show one job (any client's)",
        EXAMPLES["jobs show"],
        argument="id",
        json_flag=True,
    )
    add_command(
        actions,
        "trace",
        cmd_trace,
        "what happened to one job: intent, publishing, deliveries, attempts, result, why",
        EXAMPLES["trace"],
        argument="id",
        json_flag=True,
    )
    redispatch = add_command(
        actions,
        "redispatch",
        cmd_redispatch,
        "publish again jobs published long ago but never claimed",
        EXAMPLES["redispatch"],
    )
    redispatch.add_argument("--older-than", default="10m", help="e.g. 90s, 15m, 2h (default 10m)")
    redispatch.add_argument("--json", action="store_true")
