"""``jobrelay clients create | list | update | disable | enable | rotate | limit``: API clients,
their tokens, the job types they may submit and their submission limits."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_group,
    print_json,
    run_with_store,
    settings_from_env,
)
from jobrelay.core.clients import MAX_GRACE_SECONDS, RateLimit, new_token, parse_type_patterns
from jobrelay.core.durations import parse_duration
from jobrelay.core.fingerprint import token_hash

if TYPE_CHECKING:
    from jobrelay.db.client_store import ClientStore
    from jobrelay.db.store import Store

EXAMPLES = {
    "clients create": "jobrelay clients create shop-backend --admin",
    "clients list": "jobrelay clients list --json",
    "clients update": "jobrelay clients update shop-backend --types 'shop.*,mail.send'",
    "clients disable": "jobrelay clients disable shop-backend",
    "clients enable": "jobrelay clients enable shop-backend",
    "clients rotate": "jobrelay clients rotate shop-backend --grace 1h",
    "clients limit": "jobrelay clients limit shop-backend --per-second 50 --burst 200",
}

MAX_RATE = 1_000_000.0
MAX_BURST = 1_000_000


def cmd_clients_create(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    name = args.name.strip()
    if not 1 <= len(name) <= 100:
        raise CliError("a client name is 1 to 100 characters")
    patterns = _type_patterns(args.types)
    token = new_token()

    async def work(store: Store) -> int:
        clients = _clients(store)
        client_id = await clients.create_client(
            name, token_hash(token), is_admin=args.admin, type_patterns=patterns
        )
        if client_id is None:
            raise CliError(f"a client named {name!r} already exists")
        if args.json:
            print_json(
                {
                    "id": str(client_id),
                    "name": name,
                    "admin": args.admin,
                    "type_patterns": list(patterns) if patterns is not None else None,
                    "token": token,
                }
            )
        else:
            role = "admin client" if args.admin else "client"
            print(f"created {role} {name!r} ({client_id})", file=sys.stderr)
            print(f"it may submit: {_describe_types(patterns, admin=args.admin)}", file=sys.stderr)
            print("its token (shown once, store it now):", file=sys.stderr)
            print(token)
        return 0

    return run_with_store(settings, work)


def cmd_clients_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Store) -> int:
        rows = await _clients(store).list_clients()
        items = [
            {
                "id": str(r.id),
                "name": r.name,
                "admin": r.is_admin,
                "disabled": r.disabled_at is not None,
                "created_at": r.created_at.isoformat(),
                "disabled_at": r.disabled_at.isoformat() if r.disabled_at else None,
                "previous_token_expires_at": (
                    r.previous_token_expires_at.isoformat() if r.previous_token_expires_at else None
                ),
                "rate_limit": _limit_document(r.rate_limit_per_second, r.rate_limit_burst),
                "type_patterns": r.type_patterns,
            }
            for r in rows
        ]
        if args.json:
            print_json(items)
            return 0
        if not items:
            print("no clients yet (create one: jobrelay clients create NAME)", file=sys.stderr)
            return 0
        width = max(len(row.name) for row in rows)
        for row, item in zip(rows, items, strict=True):
            role = "admin " if item["admin"] else "client"
            state = "disabled" if item["disabled"] else "enabled "
            grace = item["previous_token_expires_at"]
            note = f"  previous token works until {grace}" if grace else ""
            if row.rate_limit_per_second is not None:
                note += f"  limit {row.rate_limit_per_second:g}/s burst {row.rate_limit_burst}"
            if row.type_patterns is not None:
                note += f"  types {','.join(row.type_patterns)}"
            print(
                f"{item['name']:<{width}}  {role}  {state}  {item['id']}  "
                f"created {item['created_at']}{note}"
            )
        return 0

    return run_with_store(settings, work)


def _type_patterns(text: str | None) -> tuple[str, ...] | None:
    """``--types``' patterns, checked; None without the option (the default rule)."""
    if text is None:
        return None
    try:
        return parse_type_patterns(text)
    except ValueError as error:
        raise CliError(f"--types: {error}") from None


def _describe_types(patterns: tuple[str, ...] | list[str] | None, *, admin: bool) -> str:
    if patterns is not None:
        return "the types " + ", ".join(patterns)
    if admin:
        return "every type (an admin client without --types)"
    return "every type but Django tasks and api=False types (no --types)"


def cmd_clients_update(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    if args.default_types == (args.types is not None):
        raise CliError("give --types PATTERNS, or --default-types")
    patterns = _type_patterns(args.types)

    async def work(store: Store) -> int:
        if await _clients(store).set_client_type_patterns(args.name, patterns) is None:
            raise CliError(f"no client named {args.name!r} (see: jobrelay clients list)")
        if patterns is None:
            print(
                f"client {args.name!r} now has the default rule: it may submit every type but "
                "Django tasks and api=False types (an admin client: every type)"
            )
        else:
            print(f"client {args.name!r} may submit {_describe_types(patterns, admin=False)}")
        return 0

    return run_with_store(settings, work)


def _set_disabled(args: argparse.Namespace, *, disabled: bool) -> int:
    settings = settings_from_env()

    async def work(store: Store) -> int:
        change = await _clients(store).set_client_disabled(args.name, disabled=disabled)
        if change is None:
            raise CliError(f"no client named {args.name!r} (see: jobrelay clients list)")
        if not change.changed:
            print(f"client {args.name!r} was already {'disabled' if disabled else 'enabled'}")
        elif disabled:
            print(f"client {args.name!r} disabled: its token is refused from now on")
        else:
            print(f"client {args.name!r} enabled: its token works again")
        return 0

    return run_with_store(settings, work)


def cmd_clients_disable(args: argparse.Namespace) -> int:
    return _set_disabled(args, disabled=True)


def cmd_clients_enable(args: argparse.Namespace) -> int:
    return _set_disabled(args, disabled=False)


def cmd_clients_rotate(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    try:
        grace = parse_duration(args.grace) if args.grace else 0.0
    except ValueError as error:
        raise CliError(f"--grace: {error}") from None
    if grace > MAX_GRACE_SECONDS:
        raise CliError("--grace is at most 30d")
    token = new_token()

    async def work(store: Store) -> int:
        change = await _clients(store).rotate_client_token(
            args.name, token_hash(token), grace_seconds=grace
        )
        if change is None:
            raise CliError(f"no client named {args.name!r} (see: jobrelay clients list)")
        expires = change.previous_token_expires_at
        if args.json:
            print_json(
                {
                    "id": str(change.id),
                    "name": args.name,
                    "token": token,
                    "previous_token_expires_at": expires.isoformat() if expires else None,
                }
            )
            return 0
        print(f"rotated the token of client {args.name!r} ({change.id})", file=sys.stderr)
        if expires:
            print(f"the previous token keeps working until {expires.isoformat()}", file=sys.stderr)
        else:
            print("the previous token is refused from now on", file=sys.stderr)
        if change.disabled:
            print("note: the client is disabled (jobrelay clients enable NAME)", file=sys.stderr)
        print("its new token (shown once, store it now):", file=sys.stderr)
        print(token)
        return 0

    return run_with_store(settings, work)


def _limit_document(per_second: float | None, burst: int | None) -> dict[str, Any] | None:
    return None if per_second is None else {"per_second": per_second, "burst": burst}


def cmd_clients_limit(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    if args.burst is not None and args.per_second is None:
        raise CliError("--burst needs --per-second")
    if args.clear == (args.per_second is not None):
        raise CliError("give --per-second R [--burst B], or --clear")
    if args.per_second is not None and not 0 < args.per_second <= MAX_RATE:
        raise CliError(f"--per-second is more than 0 and at most {MAX_RATE:g}")
    if args.burst is not None and not 1 <= args.burst <= MAX_BURST:
        raise CliError(f"--burst is 1 to {MAX_BURST}")
    limit = RateLimit.of(args.per_second, args.burst)

    async def work(store: Store) -> int:
        if await _clients(store).set_client_rate_limit(args.name, limit) is None:
            raise CliError(f"no client named {args.name!r} (see: jobrelay clients list)")
        if limit is None:
            print(f"client {args.name!r} now has the API's limit (JOBRELAY_RATE_LIMIT_*)")
        else:
            print(f"client {args.name!r} may submit {limit.describe()}")
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    actions = add_group(
        commands, "clients", "manage API clients and their tokens", EXAMPLES["clients create"]
    )
    create = add_command(
        actions,
        "create",
        cmd_clients_create,
        "create a client and print its token once",
        EXAMPLES["clients create"],
        argument="name",
    )
    create.add_argument("--admin", action="store_true", help="may use the /v1/admin endpoints")
    create.add_argument("--types", metavar="PATTERNS", help=TYPES_HELP)
    create.add_argument("--json", action="store_true")
    add_command(
        actions, "list", cmd_clients_list, "list clients", EXAMPLES["clients list"], json_flag=True
    )
    update = add_command(
        actions,
        "update",
        cmd_clients_update,
        "change the job types a client may submit",
        EXAMPLES["clients update"],
        argument="name",
    )
    update.add_argument("--types", metavar="PATTERNS", help=TYPES_HELP)
    update.add_argument(
        "--default-types",
        action="store_true",
        help="back to the default rule: every type but Django tasks and api=False types",
    )
    add_command(
        actions,
        "disable",
        cmd_clients_disable,
        "refuse a client's token (its jobs stay; enable gives it back)",
        EXAMPLES["clients disable"],
        argument="name",
    )
    add_command(
        actions,
        "enable",
        cmd_clients_enable,
        "accept a disabled client's token again",
        EXAMPLES["clients enable"],
        argument="name",
    )
    rotate = add_command(
        actions,
        "rotate",
        cmd_clients_rotate,
        "give a client a new token (printed once); its jobs stay its own",
        EXAMPLES["clients rotate"],
        argument="name",
    )
    rotate.add_argument(
        "--grace",
        metavar="DURATION",
        default=None,
        help="how long the previous token keeps working, e.g. 10m or 1h (default: it stops now)",
    )
    rotate.add_argument("--json", action="store_true")
    limit = add_command(
        actions,
        "limit",
        cmd_clients_limit,
        "set a client's own submission limit (answered 429 past it), or --clear it",
        EXAMPLES["clients limit"],
        argument="name",
    )
    limit.add_argument("--per-second", type=float, metavar="R", help="submissions per second")
    limit.add_argument(
        "--burst", type=int, metavar="B", help="submissions at once (default: one second's worth)"
    )
    limit.add_argument(
        "--clear", action="store_true", help="back to JOBRELAY_RATE_LIMIT_* (or none)"
    )


TYPES_HELP = (
    "the job types it may submit, comma-separated shell-style globs (* and ?), e.g. "
    "'shop.*,mail.send'; without it: every type but Django tasks and api=False types "
    "(an admin client: every type)"
)


def _clients(store: Store) -> ClientStore:
    from jobrelay.db.client_store import ClientStore  # the database driver, on use only

    return ClientStore(store)
