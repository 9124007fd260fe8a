"""The operator's commands: ``jobs trace``, ``jobs redispatch`` and ``quarantine ...``."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from jobrelay.core.durations import parse_duration
from jobrelay.core.trace import render_trace

EXAMPLES = {
    "trace": "jobrelay jobs trace 5b0c9f6e-...  (or --json for tools)",
    "redispatch": "jobrelay jobs redispatch --older-than 15m",
    "list": "jobrelay quarantine list --code attempts_exhausted",
    "show": "jobrelay quarantine show 5b0c9f6e-...",
    "replay": "jobrelay quarantine replay 5b0c9f6e-... 7d1e...  or  replay --all --code C",
    "purge": "jobrelay quarantine purge --yes",
    "reconcile": "jobrelay quarantine reconcile",
}


def _cli() -> Any:
    from jobrelay import cli

    return cli


def _run_ops(work: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    cli = _cli()
    settings = cli.settings_from_env()

    async def main() -> int:
        from jobrelay.db.store import Store
        from jobrelay.handlers.loading import registry_for
        from jobrelay.operations import Operations

        store = Store.connect(settings.database_url, pool_size=2, application_name="jobrelay-cli")
        try:
            return await work(Operations(store, settings, registry_for(settings)))
        finally:
            await store.close()

    return asyncio.run(main())


def _progress(label: str) -> Callable[[int, int], None]:
    def show(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\r{label}: {done}/{total}", end="", file=sys.stderr, flush=True)

    return show


def _ids(raw: list[str]) -> list[uuid.UUID]:
    cli = _cli()
    return [cli._job_id(value) for value in raw]


# --- jobs trace / redispatch ---------------------------------------------------------------------


def cmd_trace(args: argparse.Namespace) -> int:
    (job_id,) = _ids([args.id])

    async def work(ops: Any) -> int:
        trace = await ops.store.trace(job_id)
        if trace is None:
            raise _cli().CliError(f"no job {job_id}")
        print(json.dumps(trace, indent=2, default=str) if args.json else render_trace(trace))
        return 0

    return _run_ops(work)


def cmd_redispatch(args: argparse.Namespace) -> int:
    try:
        older_than = parse_duration(args.older_than)
    except ValueError as error:
        raise _cli().CliError(str(error)) from None

    async def work(ops: Any) -> int:
        count = await ops.redispatch(
            older_than_seconds=older_than, progress=_progress("redispatched")
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

    return _run_ops(work)


# --- quarantine ---------------------------------------------------------------------------------


BROKER_NOTES = {
    "unavailable": "the broker is unreachable",
    "busy": "the quarantine queue is held by a replay or a sweep",
}


def _broker_note(broker: str) -> None:
    """One line on stderr when the messages could not be read: the listing is the database's."""
    if broker != "ok":
        print(
            f"jobrelay: {BROKER_NOTES.get(broker, broker)}: showing the database side only "
            "(the messages in jobrelay.quarantine are unknown)",
            file=sys.stderr,
        )


def cmd_quarantine_list(args: argparse.Namespace) -> int:
    async def work(ops: Any) -> int:
        report = await ops.quarantine_report(code=args.code, limit=args.limit)
        _broker_note(report["broker"])
        if args.json:
            print(json.dumps(report, indent=2, default=str))
            return 0
        known = report["broker"] == "ok"
        for job in report["jobs"]:
            messages = job["messages"]
            if not known:
                where = "messages unknown"
            elif messages:
                where = (
                    f"{len(messages)} message(s) in jobrelay.quarantine "
                    f"({', '.join(str(m['reason']) for m in messages)})"
                )
            else:
                where = "no message in the queue"
            print(
                f"{job['job_id']}  {job['type']:<16} {job['reason']:<20} "
                f"attempts {job['attempts']}/{job['max_attempts']}  {where}"
            )
            if job["error"]:
                print(f"    {job['error']}")
        for message in report["other_messages"]:
            state = message.get("job_state")
            if message["malformed"]:
                what = message["malformed"]
            elif message["job_id"] is None or state is None:
                what = f"job {message['job_id']} does not exist"
            else:
                what = f"job {message['job_id']} is {state}, not quarantined"
            print(f"message {message['message_id']}: {what} (x-death reason {message['reason']})")
        in_queue = f"{report['messages_in_queue']}" if known else "unknown"
        print(
            f"{len(report['jobs'])} quarantined job(s), "
            f"{in_queue} message(s) in jobrelay.quarantine"
        )
        return 0

    return _run_ops(work)


def cmd_quarantine_reconcile(args: argparse.Namespace) -> int:
    async def work(ops: Any) -> int:
        result = (await ops.reconcile_quarantine()).as_dict()
        if args.json:
            print(json.dumps(result, indent=2))
            return 0
        print(
            f"reconciled {result['reconciled_delivery_limit']} job(s) the broker dead-lettered "
            f"on its own (reason delivery_limit); removed {result['removed_surplus']} surplus "
            f"and {result['removed_stale']} stale message(s); "
            f"{result['messages_in_queue']} message(s) in jobrelay.quarantine"
        )
        return 0

    return _run_ops(work)


def cmd_quarantine_show(args: argparse.Namespace) -> int:
    (job_id,) = _ids([args.id])

    async def work(ops: Any) -> int:
        shown = await ops.show(job_id)
        if shown is None:
            raise _cli().CliError(f"no job {job_id}")
        _broker_note(shown["broker"])
        if args.json:
            print(json.dumps(shown, indent=2, default=str))
            return 0
        print(render_trace(shown["trace"]))
        if shown["broker"] != "ok":
            return 0
        print(f"  messages in jobrelay.quarantine: {len(shown['messages'])}")
        for message in shown["messages"]:
            print(
                f"    message {message['message_id']} reason {message['reason']} "
                f"from {message['queue']} at {message['died_at']} ({message['deaths']} death(s))"
            )
        return 0

    return _run_ops(work)


def cmd_quarantine_replay(args: argparse.Namespace) -> int:
    cli = _cli()
    if bool(args.ids) == bool(args.all):
        raise cli.CliError("give job ids, or --all (optionally with --code C)")
    if args.code and not args.all:
        raise cli.CliError("--code goes with --all")
    ids = _ids(args.ids) if args.ids else []

    async def work(ops: Any) -> int:
        progress = _progress("replayed")
        if args.all:
            outcomes = await ops.replay_all(code=args.code, progress=progress)
        else:
            outcomes = await ops.replay(ids, progress=progress)
        if sys.stderr.isatty():
            print(file=sys.stderr)
        replayed = sum(1 for o in outcomes if o.status == "replayed")
        if args.json:
            print(json.dumps([o.as_dict() for o in outcomes], indent=2))
        else:
            for outcome in outcomes:
                if outcome.status != "replayed":
                    state = f" (it is {outcome.state})" if outcome.state else ""
                    print(f"{outcome.job_id}: skipped, {outcome.status.replace('_', ' ')}{state}")
            print(
                f"replayed {replayed} of {len(outcomes)} job(s): queued again with a fresh "
                "attempt budget; their messages left the quarantine queue"
            )
        missing = any(o.status == "not_found" for o in outcomes)
        return 1 if missing else 0

    return _run_ops(work)


def cmd_quarantine_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        raise _cli().CliError("purge deletes every message in jobrelay.quarantine; add --yes")

    async def work(ops: Any) -> int:
        count = await ops.purge()
        print(
            f"purged {count} message(s) from jobrelay.quarantine; the jobs stay quarantined "
            "and can still be replayed"
        )
        return 0

    return _run_ops(work)


# --- parser -------------------------------------------------------------------------------------


def register(commands: Any, job_commands: Any, add: Callable[..., argparse.ArgumentParser]) -> None:
    trace = add(
        job_commands,
        "trace",
        cmd_trace,
        "what happened to one job: intent, publishing, deliveries, attempts, result, why",
    )
    trace.epilog = f"example: {EXAMPLES['trace']}"
    trace.add_argument("id")
    trace.add_argument("--json", action="store_true")

    redispatch = add(
        job_commands,
        "redispatch",
        cmd_redispatch,
        "publish again jobs published long ago but never claimed",
    )
    redispatch.epilog = f"example: {EXAMPLES['redispatch']}"
    redispatch.add_argument("--older-than", default="10m", help="e.g. 90s, 15m, 2h (default 10m)")
    redispatch.add_argument("--json", action="store_true")

    quarantine = commands.add_parser(
        "quarantine",
        help="inspect and replay quarantined jobs and their dead-lettered messages",
        epilog=f"example: {EXAMPLES['list']}",
    )
    actions = quarantine.add_subparsers(dest="quarantine_command", required=True, metavar="ACTION")
    listing = add(
        actions,
        "list",
        cmd_quarantine_list,
        "quarantined jobs with reasons, and the messages in jobrelay.quarantine",
    )
    listing.epilog = f"example: {EXAMPLES['list']}"
    listing.add_argument("--code", help="only this reason code")
    listing.add_argument("--limit", type=int, default=100)
    listing.add_argument("--json", action="store_true")
    show = add(actions, "show", cmd_quarantine_show, "one job's trace and quarantined messages")
    show.epilog = f"example: {EXAMPLES['show']}"
    show.add_argument("id")
    show.add_argument("--json", action="store_true")
    replay = add(
        actions,
        "replay",
        cmd_quarantine_replay,
        "queue quarantined jobs again with a fresh attempt budget",
    )
    replay.epilog = f"example: {EXAMPLES['replay']}"
    replay.add_argument("ids", nargs="*", metavar="ID")
    replay.add_argument("--all", action="store_true", help="every quarantined job")
    replay.add_argument("--code", help="with --all: only this reason code")
    replay.add_argument("--json", action="store_true")
    purge = add(
        actions,
        "purge",
        cmd_quarantine_purge,
        "delete the messages in jobrelay.quarantine (jobs stay replayable)",
    )
    purge.epilog = f"example: {EXAMPLES['purge']}"
    purge.add_argument("--yes", action="store_true", help="really delete them")
    reconcile = add(
        actions,
        "reconcile",
        cmd_quarantine_reconcile,
        "now, what the dispatcher does by itself: quarantine the jobs the broker dead-lettered "
        "(delivery_limit), keep one message per quarantined job, drop stale ones",
    )
    reconcile.epilog = f"example: {EXAMPLES['reconcile']}"
    reconcile.add_argument("--json", action="store_true")
