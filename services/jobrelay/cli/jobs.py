"""``jobrelay jobs list | show | trace | signal | cancel | redispatch``: the jobs of every
client, one job, what happened to it, a signal for it, an operator's cancel, and the lost
ones."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    MAX_LIST_LIMIT,
    CliError,
    Subcommands,
    add_command,
    add_group,
    job_id,
    list_page,
    print_document,
    progress,
    run_with_operations,
    run_with_store,
    settings_from_env,
)
from jobrelay.cli.output import render_job, render_trace
from jobrelay.core.bounds import SIGNAL_NAME_MAX, SIGNAL_VALUE_MAX_BYTES
from jobrelay.core.durations import parse_duration
from jobrelay.core.errors import JobNotFound, NotCancellable
from jobrelay.core.jobs import CancelAnswer, Job, SignalAnswer, is_valid_idempotency_key
from jobrelay.core.jsonvalues import unstorable_json
from jobrelay.core.states import JobState
from jobrelay.core.trace import trace_document

if TYPE_CHECKING:
    from jobrelay.db.store import Store
    from jobrelay.operations import Operations

EXAMPLES = {
    "jobs list": "jobrelay jobs list --state quarantined --client shop --limit 20",
    "jobs show": "jobrelay jobs show 3f2b...-uuid",
    "trace": "jobrelay jobs trace 5b0c9f6e-...  (or --json for tools)",
    "cancel": "jobrelay jobs cancel 5b0c9f6e-...",
    "signal": 'jobrelay jobs signal 5b0c9f6e-... approved --value \'{"by": "ana"}\'',
    "redispatch": "jobrelay jobs redispatch --older-than 15m",
}


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


def cmd_jobs_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    page = list_page(args)

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
        steps = await store.steps_of(wanted, with_values=args.values)
        view = JobView.of(replace(job, steps=steps), step_values=args.values)
        print_document(view.model_dump(mode="json"), render_job, as_json=args.json)
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


SIGNAL_SAID = {
    SignalAnswer.SENT: "signal {name!r} sent to job {id}: kept for its wait (woken if it slept "
    "waiting for it)",
    SignalAnswer.REPEATED: "signal {name!r} not sent again to job {id}: its key was used before",
}


def signal_value(raw: str) -> Any:
    """``--value``: any JSON value, at most 64 KiB, that PostgreSQL's jsonb can hold."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as error:
        raise CliError(f"--value is not valid JSON: {error.msg} at position {error.pos}") from None
    if len(raw.encode()) > SIGNAL_VALUE_MAX_BYTES:
        raise CliError(f"--value is over {SIGNAL_VALUE_MAX_BYTES} bytes")
    problem = unstorable_json(value)
    if problem is not None:
        raise CliError(f"--value cannot be stored: {problem}")
    return value


def cmd_jobs_signal(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    wanted = job_id(args.id)
    if not 1 <= len(args.name) <= SIGNAL_NAME_MAX or "\x00" in args.name:
        raise CliError(f"a signal's name is 1 to {SIGNAL_NAME_MAX} characters")
    if args.key is not None and not is_valid_idempotency_key(args.key):
        raise CliError("--key must be 1 to 200 visible ASCII characters")
    value = signal_value(args.value)

    async def work(store: Store) -> int:
        answer = await store.signal_job(
            wanted, args.name, value, client_id=None, idempotency_key=args.key
        )
        if answer is SignalAnswer.UNKNOWN:
            raise CliError(f"no job {wanted}")
        if answer is SignalAnswer.FINISHED:
            raise CliError(f"job {wanted} has finished: the signal was not kept")
        if args.json:
            print(json.dumps({"job_id": str(wanted), "name": args.name, "status": answer.value}))
        else:
            print(SIGNAL_SAID[answer].format(name=args.name, id=wanted))
        return 0

    return run_with_store(settings, work)


CANCEL_SAID = {
    CancelAnswer.CANCELLED: "cancelled",
    CancelAnswer.REQUESTED: "cancel requested: it is running; its consumer stops the handler "
    "and the job ends cancelled unless the attempt finishes first",
}


def cmd_jobs_cancel(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    wanted = job_id(args.id)

    async def work(store: Store) -> int:
        from jobrelay.operations import cancel_any_job

        try:
            answer, job = await cancel_any_job(store, wanted, how="with jobrelay jobs cancel")
        except JobNotFound:
            raise CliError(f"no job {wanted}") from None
        except NotCancellable as error:
            raise CliError(f"job {wanted} not cancelled: {error.detail}") from None
        if args.json:
            print(json.dumps({"id": str(job.id), "answer": answer.value, "state": job.state.value}))
        else:
            print(f"job {job.id} ({job.type}): {CANCEL_SAID[answer]}")
        return 0

    return run_with_store(settings, work)


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
    show = add_command(
        actions,
        "show",
        cmd_jobs_show,
        "show one job (any client's), with its recorded steps",
        EXAMPLES["jobs show"],
        argument="id",
        json_flag=True,
    )
    show.add_argument("--values", action="store_true", help="each recorded step's value too")
    add_command(
        actions,
        "trace",
        cmd_trace,
        "what happened to one job: intent, publishing, deliveries, attempts, result, why",
        EXAMPLES["trace"],
        argument="id",
        json_flag=True,
    )
    signal = add_command(
        actions,
        "signal",
        cmd_jobs_signal,
        "send any client's job a signal, for its context.wait_for_signal(NAME)",
        EXAMPLES["signal"],
        argument="id",
        json_flag=True,
    )
    signal.add_argument("name", help="the signal's name (1 to 200 characters)")
    signal.add_argument(
        "--value", default="null", metavar="JSON", help="its value, any JSON (default null)"
    )
    signal.add_argument(
        "--key", metavar="K", help="an idempotency key: sent again with it, nothing new is kept"
    )
    add_command(
        actions,
        "cancel",
        cmd_jobs_cancel,
        "cancel any client's job: at once when queued, by request when running",
        EXAMPLES["cancel"],
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
