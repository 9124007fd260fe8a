"""``jobrelay quarantine list | show | replay | purge | reconcile``: quarantined jobs and their
dead-lettered messages."""

from __future__ import annotations

import argparse
import functools
import sys
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_group,
    job_id,
    job_ids,
    print_document,
    print_json,
    progress,
    run_with_operations,
)
from jobrelay.cli.output import render_trace

if TYPE_CHECKING:
    from jobrelay.operations import Operations

EXAMPLES = {
    "list": "jobrelay quarantine list --code attempts_exhausted",
    "show": "jobrelay quarantine show 5b0c9f6e-...",
    "replay": "jobrelay quarantine replay 5b0c9f6e-... 7d1e...  or  replay --all --code C",
    "purge": "jobrelay quarantine purge --yes",
    "reconcile": "jobrelay quarantine reconcile",
}

BROKER_NOTES = {
    "unavailable": "the broker is unreachable",
    "busy": "the quarantine queue is held by a replay or a sweep",
}


def _broker_note(report: dict[str, Any]) -> None:
    """One line on stderr when the messages could not be read: the listing is the database's,
    and the line says why (``connection refused``, ``login refused …``)."""
    broker = report["broker"]
    if broker != "ok":
        note = BROKER_NOTES.get(broker, broker)
        if report.get("broker_cause"):
            note = f"{note} ({report['broker_cause']})"
        print(
            f"jobrelay: {note}: showing the database side only "
            "(the messages in jobrelay.quarantine are unknown)",
            file=sys.stderr,
        )


def _job_lines(job: dict[str, Any], *, messages_known: bool) -> list[str]:
    """A quarantined job, where its messages are, and its last error."""
    messages = job["messages"]
    if not messages_known:
        where = "messages unknown"
    elif messages:
        where = (
            f"{len(messages)} message(s) in jobrelay.quarantine "
            f"({', '.join(str(m['reason']) for m in messages)})"
        )
    else:
        where = "no message in the queue"
    line = (
        f"{job['job_id']}  {job['type']:<16} {job['reason']:<20} "
        f"attempts {job['attempts']}/{job['max_attempts']}  {where}"
    )
    return [line, f"    {job['error']}"] if job["error"] else [line]


def _other_message_line(message: dict[str, Any]) -> str:
    """A message in the quarantine queue whose job is not quarantined."""
    state = message.get("job_state")
    if message["malformed"]:
        what = message["malformed"]
    elif message["job_id"] is None or state is None:
        what = f"job {message['job_id']} does not exist"
    else:
        what = f"job {message['job_id']} is {state}, not quarantined"
    return f"message {message['message_id']}: {what} (x-death reason {message['reason']})"


def render_report(report: dict[str, Any], *, code: str | None = None) -> str:
    """The jobs, then the messages of no quarantined job, then the count. Listed by ``code``,
    only the listed jobs and their messages: the other messages are of no job with that code."""
    known = report["broker"] == "ok"
    jobs = report["jobs"]
    lines = [line for job in jobs for line in _job_lines(job, messages_known=known)]
    if code is None:
        lines.extend(_other_message_line(message) for message in report["other_messages"])
        in_queue = f"{report['messages_in_queue']}" if known else "unknown"
        lines.append(
            f"{len(jobs)} quarantined job(s), {in_queue} message(s) in jobrelay.quarantine"
        )
    else:
        held = sum(len(job["messages"]) for job in jobs)
        in_queue = f"{held}" if known else "unknown"
        lines.append(
            f"{len(jobs)} quarantined job(s) with code {code}, {in_queue} message(s) of theirs "
            "in jobrelay.quarantine"
        )
    return "\n".join(lines)


def render_shown(shown: dict[str, Any]) -> str:
    """The job's trace, then its messages in the quarantine queue when they could be read."""
    lines = [render_trace(shown["trace"])]
    if shown["broker"] == "ok":
        lines.append(f"  messages in jobrelay.quarantine: {len(shown['messages'])}")
        lines.extend(
            f"    message {message['message_id']} reason {message['reason']} "
            f"from {message['queue']} at {message['died_at']} ({message['deaths']} death(s))"
            for message in shown["messages"]
        )
    return "\n".join(lines)


def render_reconciled(result: dict[str, Any]) -> str:
    return (
        f"reconciled {result['reconciled_delivery_limit']} job(s) the broker dead-lettered "
        f"on its own (reason delivery_limit); removed {result['removed_surplus']} surplus "
        f"and {result['removed_stale']} stale message(s); "
        f"restored {result['restored_missing']} missing message(s); "
        f"{result['messages_in_queue']} message(s) in jobrelay.quarantine"
    )


def replay_summary(replayed: int, asked: int) -> str:
    """The last line of a replay: what was queued again, or that nothing was."""
    if replayed:
        return (
            f"replayed {replayed} of {asked} job(s): queued again with a fresh attempt budget; "
            "their messages left the quarantine queue"
        )
    if asked:
        return f"replayed none of {asked} job(s): nothing was queued again"
    return "no quarantined job to replay: nothing was queued again"


def cmd_quarantine_list(args: argparse.Namespace) -> int:
    async def work(ops: Operations) -> int:
        report = await ops.quarantine_report(code=args.code, limit=args.limit)
        _broker_note(report)
        render = functools.partial(render_report, code=args.code)
        print_document(report, render, as_json=args.json, ensure_ascii=True)
        return 0

    return run_with_operations(work)


def cmd_quarantine_show(args: argparse.Namespace) -> int:
    wanted = job_id(args.id)

    async def work(ops: Operations) -> int:
        shown = await ops.show(wanted)
        if shown is None:
            raise CliError(f"no job {wanted}")
        _broker_note(shown)
        print_document(shown, render_shown, as_json=args.json, ensure_ascii=True)
        return 0

    return run_with_operations(work)


def cmd_quarantine_replay(args: argparse.Namespace) -> int:
    if bool(args.ids) == bool(args.all):
        raise CliError("give job ids, or --all (optionally with --code C)")
    if args.code and not args.all:
        raise CliError("--code goes with --all")
    ids = job_ids(args.ids) if args.ids else []

    async def work(ops: Operations) -> int:
        with progress("replayed") as show_progress:
            if args.all:
                outcomes = await ops.replay_all(
                    code=args.code, progress=show_progress, reset_steps=args.reset_steps
                )
            else:
                outcomes = await ops.replay(
                    ids, progress=show_progress, reset_steps=args.reset_steps
                )
        replayed = sum(1 for o in outcomes if o.status == "replayed")
        if args.json:
            print_json([o.as_dict() for o in outcomes], ensure_ascii=True)
        else:
            for outcome in outcomes:
                if outcome.status != "replayed":
                    state = f" (it is {outcome.state})" if outcome.state else ""
                    print(f"{outcome.job_id}: skipped, {outcome.status.replace('_', ' ')}{state}")
            print(replay_summary(replayed, len(outcomes)))
        missing = any(o.status == "not_found" for o in outcomes)
        return 1 if missing else 0

    return run_with_operations(work)


def cmd_quarantine_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        raise CliError("purge deletes every message in jobrelay.quarantine; add --yes")

    async def work(ops: Operations) -> int:
        count = await ops.purge()
        print(
            f"purged {count} message(s) from jobrelay.quarantine; the jobs stay quarantined "
            "and can still be replayed"
        )
        return 0

    return run_with_operations(work)


def cmd_quarantine_reconcile(args: argparse.Namespace) -> int:
    async def work(ops: Operations) -> int:
        result = (await ops.reconcile_quarantine()).as_dict()
        print_document(result, render_reconciled, as_json=args.json, ensure_ascii=True)
        return 0

    return run_with_operations(work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    actions = add_group(
        commands,
        "quarantine",
        "inspect and replay quarantined jobs and their dead-lettered messages",
        EXAMPLES["list"],
    )
    listing = add_command(
        actions,
        "list",
        cmd_quarantine_list,
        "quarantined jobs with reasons, and the messages in jobrelay.quarantine",
        EXAMPLES["list"],
    )
    listing.add_argument("--code", help="only this reason code")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true")
    add_command(
        actions,
        "show",
        cmd_quarantine_show,
        "one job's trace and quarantined messages",
        EXAMPLES["show"],
        argument="id",
        json_flag=True,
    )
    replay = add_command(
        actions,
        "replay",
        cmd_quarantine_replay,
        "queue quarantined jobs again with a fresh attempt budget",
        EXAMPLES["replay"],
    )
    replay.add_argument("ids", nargs="*", metavar="ID")
    replay.add_argument("--all", action="store_true", help="every quarantined job")
    replay.add_argument("--code", help="with --all: only this reason code")
    replay.add_argument(
        "--reset-steps",
        action="store_true",
        help="forget their recorded steps too, so the new run runs every step again (without: "
        "it goes on from them; docs/durable-execution.md)",
    )
    replay.add_argument("--json", action="store_true")
    purge = add_command(
        actions,
        "purge",
        cmd_quarantine_purge,
        "delete the messages in jobrelay.quarantine (jobs stay replayable)",
        EXAMPLES["purge"],
    )
    purge.add_argument("--yes", action="store_true", help="really delete them")
    add_command(
        actions,
        "reconcile",
        cmd_quarantine_reconcile,
        "now, what the dispatcher does by itself: quarantine the jobs the broker dead-lettered "
        "(delivery_limit), keep one message per quarantined job, drop stale ones",
        EXAMPLES["reconcile"],
        json_flag=True,
    )
