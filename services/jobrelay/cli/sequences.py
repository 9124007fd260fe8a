"""``jobrelay sequences list [--blocked]``: the sequences with jobs waiting in line, as
``GET /v1/admin/sequences`` answers them, read in PostgreSQL. A blocked one is unblocked by its
blocker's replay (``jobrelay quarantine replay``) or cancel (``jobrelay jobs cancel``)."""

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

if TYPE_CHECKING:
    from jobrelay.db.store import Store

EXAMPLES = {"sequences list": "jobrelay sequences list --blocked"}
LIMIT_MAX = 1000  # as GET /v1/admin/sequences?limit=


def render_sequences(document: dict[str, Any]) -> str:
    if not document["sequences"]:
        return "no sequence has jobs waiting"
    table = [("CLIENT", "KEY", "WAITING", "BLOCKED BY")]
    for sequence in document["sequences"]:
        blocked_by = sequence["blocked_by"] or "-"
        table.append((sequence["client"], sequence["key"], str(sequence["waiting"]), blocked_by))
    return "\n".join(aligned(table))


def cmd_sequences_list(args: argparse.Namespace) -> int:
    if not 1 <= args.limit <= LIMIT_MAX:
        raise CliError(f"--limit must be between 1 and {LIMIT_MAX}, not {args.limit}")
    settings = settings_from_env()

    async def work(store: Store) -> int:
        from jobrelay.db.sequence_store import SequenceStore

        listed = await SequenceStore(store).waiting(blocked=args.blocked, limit=args.limit)
        document = {"sequences": [sequence.as_document() for sequence in listed]}
        print_document(document, render_sequences, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    actions = add_group(
        commands,
        "sequences",
        "the sequences (jobs of one key, run one at a time) with jobs waiting in line",
        EXAMPLES["sequences list"],
    )
    listing = add_command(
        actions,
        "list",
        cmd_sequences_list,
        "the sequences with jobs waiting, blocked first (blocked by: the quarantined job at "
        "their head), then the longest lines",
        EXAMPLES["sequences list"],
        json_flag=True,
    )
    listing.add_argument(
        "--blocked", action="store_true", help="only those a quarantined job blocks"
    )
    listing.add_argument(
        "--limit", type=int, default=100, metavar="N", help="at most N (default 100)"
    )
