"""``jobrelay stats``: jobs by state, outbox backlog, leases, quarantine."""

from __future__ import annotations

import argparse
from typing import Any

from jobrelay.cli.common import (
    Subcommands,
    add_command,
    print_json,
    run,
    settings_from_env,
    with_store,
)

EXAMPLE = "jobrelay stats --json"


def cmd_stats(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Any) -> int:
        stats = await store.stats()
        if args.json:
            print_json(stats)
            return 0
        states = "  ".join(f"{k}={v}" for k, v in stats["jobs_by_state"].items())
        print(f"jobs         {states}")
        outbox = stats["outbox"]
        age = outbox["oldest_due_age_seconds"]
        print(
            f"outbox       unpublished={outbox['unpublished']} due={outbox['due']} "
            f"oldest_due_age={'-' if age is None else f'{age:.1f}s'}"
        )
        print(f"leases       expired_running={stats['expired_leases']}")
        retrying = stats["retrying"]
        print(f"retrying     {retrying['count']} next_due_at={retrying['next_due_at']}")
        quarantined = ", ".join(f"{k}={v}" for k, v in stats["quarantined_by_code"].items())
        print(f"quarantined  {quarantined or '-'}")
        print(f"never_claimed {stats['published_never_claimed']}")
        print(f"redispatched {stats['redispatched_last_hour']} in the last hour (lost messages)")
        return 0

    return run(with_store(settings, work))


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    stats = add_command(
        commands, "stats", cmd_stats, "jobs by state, outbox backlog, leases, quarantine", EXAMPLE
    )
    stats.add_argument("--json", action="store_true")
