"""``jobrelay schedules``: the periodic schedules of the registry (JOBRELAY_HANDLERS or
``--handlers``), each with its latest tick, whether that tick's job exists, and its next tick."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    print_document,
    run_with_store,
    settings_from_env,
)
from jobrelay.cli.output import aligned
from jobrelay.core.schedules import SCHEDULER_CLIENT

if TYPE_CHECKING:
    from jobrelay.db.store import Store

EXAMPLE = "jobrelay schedules --handlers myapp.jobs:registry --json"
HANDLERS_HELP = (
    "comma-separated module:registry list whose schedules to list (overrides JOBRELAY_HANDLERS)"
)


def render_schedules(document: dict[str, Any]) -> str:
    rows = document["schedules"]
    if not rows:
        return "no schedules: the registries of JOBRELAY_HANDLERS (or --handlers) declare none"
    table = [("NAME", "TYPE", "WHEN", "LATEST TICK", "ITS JOB", "NEXT TICK")]
    for row in rows:
        job = row["latest_job"]
        table.append(
            (
                row["name"],
                row["type"],
                f"every {row['every_seconds']}s" if row["cron"] is None else f"cron {row['cron']}",
                row["latest_tick"],
                "not made" if job is None else f"{job['id']} {job['state']}",
                row["next_tick"],
            )
        )
    lines = aligned(table)
    return "\n".join([f"now {document['now']} (the database's clock, UTC)", *lines])


def cmd_schedules(args: argparse.Namespace) -> int:
    from jobrelay.handlers.loading import registry_for

    settings = settings_from_env()
    try:
        registry = registry_for(settings, args.handlers)
    except ValueError as error:  # a schedule or type declared wrongly in the user's module
        raise CliError(str(error)) from None
    schedules = sorted(registry.schedules.values(), key=lambda schedule: schedule.name)

    async def work(store: Store) -> int:
        from jobrelay.db.schedule_store import ScheduleStore
        from jobrelay.operations import schedule_document

        schedule_store = ScheduleStore(store)
        now = await schedule_store.now()
        client_id = await schedule_store.scheduler_client_id()
        if client_id is None:
            raise CliError(f"the database has no client {SCHEDULER_CLIENT!r}: run jobrelay migrate")
        document = {
            "now": now.isoformat(),
            "schedules": [
                await schedule_document(schedule, now, schedule_store, client_id)
                for schedule in schedules
            ],
        }
        print_document(document, render_schedules, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    parser = add_command(
        commands,
        "schedules",
        cmd_schedules,
        "list the periodic schedules with their latest and next ticks",
        EXAMPLE,
        json_flag=True,
    )
    parser.add_argument("--handlers", default=None, help=HANDLERS_HELP)
