"""``jobrelay jobs list | show | trace | redispatch``: the jobs of every client, one job, what
happened to it, and the lost ones."""

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
from jobrelay.cli.output import json_value, render_trace
from jobrelay.core.durations import parse_duration
from jobrelay.core.errors import InvalidCursor
from jobrelay.core.jobs import Job
from jobrelay.core.pages import Page, decode_cursor
from jobrelay.core.states import JobState
from jobrelay.core.trace import trace_document

if TYPE_CHECKING:
    from jobrelay.db.store import Store
    from jobrelay.operations import Operations

EXAMPLES = {
    "jobs list": "jobrelay jobs list --state quarantined --client shop --limit 20",
    "jobs show": "jobrelay jobs show 3f2b...-uuid",
    "trace": "jobrelay jobs trace 5b0c9f6e-...  (or --json for tools)",
    "redispatch": "jobrelay jobs redispatch --older-than 15m",
}

SHOWN_FIELDS = (
    "id",
    "type",
    "state",
    "no_consumer",
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
    """The job's fields that have a value, one a line (``no_consumer`` only when true)."""
    return "\n".join(
        f"{field:16} {json_value(value) if isinstance(value, dict) else value}"
        for field in SHOWN_FIELDS
        if (value := view.get(field)) is not None and value is not False
    )


MAX_LIST_LIMIT = 1000


def listed_job(job: Job, client: str) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "state": job.state.value,
        "type": job.type,
        "client": client,
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "created_at": job.created_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
    }


def render_listing(listing: dict[str, Any]) -> str:
    """One line a job (id, state, type, client, attempts, updated at), then the next page."""
    lines = [
        f"{job['id']}  {job['state']:<11} {job['type']:<20} {job['client']:<16} "
        f"attempts {job['attempts']}/{job['max_attempts']}  updated {job['updated_at']}"
        for job in listing["jobs"]
    ]
    if not lines:
        lines.append("no job")
    if listing["next_cursor"]:
        lines.append(f"more: add --cursor {listing['next_cursor']}")
    return "\n".join(lines)


def _list_page(args: argparse.Namespace) -> Page:
    if not 1 <= args.limit <= MAX_LIST_LIMIT:
        raise CliError(f"--limit must be 1 to {MAX_LIST_LIMIT}")
    try:
        return Page(args.limit, decode_cursor(args.cursor) if args.cursor else None)
    except InvalidCursor:
        raise CliError(f"--cursor {args.cursor!r} is not one this command printed") from None


def cmd_jobs_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    page = _list_page(args)

    async def work(store: Store) -> int:
        from jobrelay.db.client_store import ClientStore

        owners = await ClientStore(store).list_clients()
        if args.client is not None:
            owners = [owner for owner in owners if owner.name == args.client]
            if not owners:
                raise CliError(f"no client named {args.client!r} (see: jobrelay clients list)")
        jobs = await store.list_jobs_of_clients(
            [owner.id for owner in owners],
            state=args.state,
            job_type=args.type,
            limit=page.limit,
            after=page.after,
        )
        names = {owner.id: owner.name for owner in owners}
        listing = {
            "jobs": [listed_job(job, names[job.client_id]) for job in jobs],
            "next_cursor": page.next_cursor(jobs),
        }
        print_document(listing, render_listing, as_json=args.json)
        return 0

    return run_with_store(settings, work)


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
    listing = add_command(
        actions,
        "list",
        cmd_jobs_list,
        "the jobs of every client, newest first, one a line",
        EXAMPLES["jobs list"],
        json_flag=True,
    )
    listing.add_argument("--state", choices=[state.value for state in JobState])
    listing.add_argument("--type", help="only jobs of this type")
    listing.add_argument("--client", metavar="NAME", help="only this client's jobs")
    listing.add_argument(
        "--limit", type=int, default=50, help=f"jobs on a page, 1 to {MAX_LIST_LIMIT} (default 50)"
    )
    listing.add_argument("--cursor", help="the next page, as the previous one printed it")
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
