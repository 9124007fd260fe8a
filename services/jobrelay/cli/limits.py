"""``jobrelay limits list | set | clear``: the limits in force per job type (the code's, from the
registry of JOBRELAY_HANDLERS or ``--handlers``, and the runtime overrides of ``type_limits``),
set and cleared at runtime: every dispatcher and consumer obeys a change within seconds."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_group,
    print_document,
    run_with_store,
    settings_from_env,
)
from jobrelay.core.runtime_limits import (
    check_throttle,
    limit_document,
    limit_line,
    runtime_limit,
)

if TYPE_CHECKING:
    from jobrelay.core.registry import Registry
    from jobrelay.db.store import Store

EXAMPLES = {
    "limits list": "jobrelay limits list --json",
    "limits set": "jobrelay limits set payments.charge --rate 10/s",
    "limits clear": "jobrelay limits clear payments.charge",
}
HANDLERS_HELP = (
    "comma-separated module:registry list of the job types (overrides JOBRELAY_HANDLERS)"
)
NOTHING_TO_SET = (
    "give --concurrency N, --rate R/s|R/m and/or --throttle N/s|N/m|N/h (jobrelay limits clear "
    "TYPE goes back to the code's limit)"
)


def _registry(args: argparse.Namespace) -> Registry:
    from jobrelay.handlers.loading import registry_for

    try:
        return registry_for(settings_from_env(), args.handlers)
    except ValueError as error:  # a type declared wrongly in the user's module
        raise CliError(str(error)) from None


def _unknown(job_type: str) -> CliError:
    return CliError(
        f"unknown job type {job_type!r}: not in the registry of JOBRELAY_HANDLERS (or --handlers) "
        "nor registered by a consumer"
    )


def cmd_limits_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    registry = _registry(args)

    async def work(store: Store) -> int:
        from jobrelay.db.flow_store import FlowStore

        limits = await FlowStore(store).limits_in_force(registry)
        document = {"limits": [limit_document(limit) for limit in limits]}
        lines = "\n".join(limit_line(limit) for limit in limits) or "no limits in force"
        print_document(document, lambda _: lines, as_json=args.json)
        return 0

    return run_with_store(settings, work)


def cmd_limits_set(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    registry = _registry(args)
    if args.concurrency is None and args.rate is None and args.throttle is None:
        raise CliError(NOTHING_TO_SET)
    try:
        limit = runtime_limit(args.concurrency, args.rate, args.per_key)
        throttle = check_throttle(args.throttle)
    except ValueError as error:
        raise CliError(str(error)) from None

    async def work(store: Store) -> int:
        from jobrelay.db.flow_store import FlowStore

        flow = FlowStore(store)
        if not await flow.is_known_type(args.type, registry):
            raise _unknown(args.type)
        await flow.set_limit(args.type, limit, throttle, registry=registry)
        in_force = await flow.limit_in_force(args.type, registry)
        said = "in force within seconds on every dispatcher and consumer"
        if throttle is not None:
            said += ", the throttle at once on every API process"
        print(f"{limit_line(in_force)}: {said}")
        return 0

    return run_with_store(settings, work)


def cmd_limits_clear(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    registry = _registry(args)

    async def work(store: Store) -> int:
        from jobrelay.db.flow_store import FlowStore

        flow = FlowStore(store)
        cleared = await flow.clear_limit(args.type)
        if not cleared and not await flow.is_known_type(args.type, registry):
            raise _unknown(args.type)
        in_force = await flow.limit_in_force(args.type, registry)
        said = "cleared" if cleared else "had no runtime limit"
        print(f"{args.type} {said}; in force: {limit_line(in_force)}")
        return 0

    return run_with_store(settings, work)


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    actions = add_group(
        commands,
        "limits",
        "the concurrency, rate and throttle limits per job type, set and cleared at runtime",
        EXAMPLES["limits set"],
    )
    listing = add_command(
        actions,
        "list",
        cmd_limits_list,
        "every type with a limit in force: the code's, or a runtime override",
        EXAMPLES["limits list"],
        json_flag=True,
    )
    setting = add_command(
        actions,
        "set",
        cmd_limits_set,
        "set a type's runtime limit (it replaces the code's until cleared)",
        EXAMPLES["limits set"],
        argument="type",
    )
    setting.add_argument(
        "--concurrency", type=int, metavar="N", help="at most N of the type run at once"
    )
    setting.add_argument(
        "--rate", metavar="R/s|R/m", help="at most R of the type start per second or minute"
    )
    setting.add_argument(
        "--throttle",
        metavar="N/s|N/m|N/h",
        help="accept at most N submissions of the type per period, refuse the excess (429 "
        "throttled); given alone, the concurrency and rate in force stay",
    )
    setting.add_argument(
        "--per-key",
        action="store_true",
        help="count the limit per concurrency key, not over the whole type",
    )
    clearing = add_command(
        actions,
        "clear",
        cmd_limits_clear,
        "clear a type's runtime limit: back to the code's",
        EXAMPLES["limits clear"],
        argument="type",
    )
    for parser in (listing, setting, clearing):
        parser.add_argument("--handlers", default=None, help=HANDLERS_HELP)
