"""``jobrelay stats``: jobs by state, outbox backlog, leases, quarantine."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    Subcommands,
    add_command,
    print_document,
    run_with_store,
    settings_from_env,
)

if TYPE_CHECKING:
    from jobrelay.db.store import Store

EXAMPLE = "jobrelay stats --json"


def _paused(queues: list[dict[str, Any]]) -> str:
    return ", ".join(
        f"{queue['name']} (since {queue['since']} by {queue['by']})" for queue in queues
    )


def render_stats(stats: dict[str, Any]) -> str:
    states = "  ".join(f"{k}={v}" for k, v in stats["jobs_by_state"].items())
    outbox = stats["outbox"]
    age = outbox["oldest_due_age_seconds"]
    retrying = stats["retrying"]
    quarantined = ", ".join(f"{k}={v}" for k, v in stats["quarantined_by_code"].items())
    return "\n".join(
        [
            f"jobs         {states}",
            f"outbox       unpublished={outbox['unpublished']} due={outbox['due']} "
            f"oldest_due_age={'-' if age is None else f'{age:.1f}s'}",
            f"leases       expired_running={stats['expired_leases']}",
            f"retrying     {retrying['count']} next_due_at={retrying['next_due_at'] or '-'}",
            f"quarantined  {quarantined or '-'}",
            f"never_claimed {stats['published_never_claimed']}",
            f"redispatched {stats['redispatched_last_hour']} in the last hour (lost messages)",
            f"paused       {_paused(stats['paused_queues']) or '-'}",
            f"no_consumer  {_by_type(stats['no_consumer']) or '-'}",
            *(
                f"BROKER BLOCKS PUBLISHING since {block['since']}: {block['reason']} "
                f"(dispatcher {block['dispatcher']}; the outbox keeps every job)"
                for block in stats["broker_blocks"]
            ),
        ]
    )


def _by_type(counts: dict[str, int]) -> str:
    """Waiting jobs by type, as ``shop.charge=3, mail.send=1``."""
    return ", ".join(f"{job_type}={n}" for job_type, n in counts.items())


def cmd_stats(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Store) -> int:
        print_document((await store.stats()).as_document(), render_stats, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    add_command(
        commands,
        "stats",
        cmd_stats,
        "jobs by state, outbox backlog, leases, quarantine",
        EXAMPLE,
        json_flag=True,
    )
