"""``jobrelay queues list | pause | resume``: the work queues with their figures (as
``GET /v1/admin/queues`` answers them), and their pause, read and written in PostgreSQL; the
broker's figures from a passive declare (unknown, ``-``, while it is unreachable)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_group,
    print_document,
    run_with_store,
    settings_from_env,
)
from jobrelay.cli.output import aligned
from jobrelay.core.settings import parse_type_queues

if TYPE_CHECKING:
    from jobrelay.core.queues import QueuesReport
    from jobrelay.core.settings import Settings
    from jobrelay.db.store import Store

EXAMPLES = {
    "queues list": "jobrelay queues list --json",
    "queues pause": "jobrelay queues pause bulk",
    "queues resume": "jobrelay queues resume bulk",
}
# Who paused a queue from the command line (the API and the console name the admin client).
PAUSED_BY = "jobrelay queues pause"
UNREACHABLE = "broker unreachable: window in use and consumers unknown (-)"


def _figure(value: int | None) -> str:
    return "-" if value is None else str(value)


def render_queues(document: dict[str, Any]) -> str:
    table = [("NAME", "STATE", "BACKLOG", "WINDOW", "RUNNING", "CONSUMERS")]
    for queue in document["queues"]:
        state = f"paused since {queue['paused_at']} by {queue['paused_by']}"
        table.append(
            (
                queue["name"],
                state if queue["paused"] else "running",
                str(queue["backlog"]),
                _figure(queue["window_in_use"]),
                str(queue["running"]),
                _figure(queue["consumers"]),
            )
        )
    lines = aligned(table)
    if document["broker"] != "ok":
        lines.append(UNREACHABLE)
    return "\n".join(lines)


async def queues_report(settings: Settings, store: Store) -> QueuesReport:
    from jobrelay.broker.health import BrokerProbe
    from jobrelay.db.flow_store import FlowStore

    probe = BrokerProbe(settings.amqp_url)
    try:
        routes = parse_type_queues(settings.type_queues)
        return await FlowStore(store).queues_report(routes, probe.queue_depths)
    finally:
        await probe.close()


def cmd_queues_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Store) -> int:
        report = await queues_report(settings, store)
        print_document(report.as_document(), render_queues, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def _unknown(name: str) -> CliError:
    return CliError(f"no queue named {name!r} (jobrelay queues list shows them)")


def cmd_queues_pause(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Store) -> int:
        from jobrelay.db.flow_store import FlowStore

        if not await FlowStore(store).pause_queue(args.name, by=PAUSED_BY):
            raise _unknown(args.name)
        print(
            f"queue {args.name!r} paused: none of its jobs is claimed or published until "
            f"jobrelay queues resume {args.name} (jobs are still accepted; those running finish)"
        )
        return 0

    return run_with_store(settings, work)


def cmd_queues_resume(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Store) -> int:
        from jobrelay.db.flow_store import FlowStore

        if not await FlowStore(store).resume_queue(args.name):
            raise _unknown(args.name)
        print(f"queue {args.name!r} resumed")
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    actions = add_group(
        commands, "queues", "the work queues: figures, pause, resume", EXAMPLES["queues pause"]
    )
    add_command(
        actions,
        "list",
        cmd_queues_list,
        "every queue: paused or not, backlog, window in use, running jobs, consumers",
        EXAMPLES["queues list"],
        json_flag=True,
    )
    add_command(
        actions,
        "pause",
        cmd_queues_pause,
        "pause a queue: none of its jobs is claimed or published until it is resumed",
        EXAMPLES["queues pause"],
        argument="name",
    )
    add_command(
        actions,
        "resume",
        cmd_queues_resume,
        "resume a paused queue",
        EXAMPLES["queues resume"],
        argument="name",
    )
