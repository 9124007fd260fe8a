"""What every command module of the CLI shares: the user-facing error, the settings, job-id
parsing, output, running a coroutine against the store, and turning errors into exit statuses.

Command modules import this module and jobrelay's own packages, never one another.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

from pydantic import ValidationError

from jobrelay.core.errors import ConfigurationError, JobrelayError, StoreUnavailable
from jobrelay.core.settings import Settings

Handler = Callable[[argparse.Namespace], int]
"""A command's callback: the parsed arguments in, the exit status out."""

Subcommands = argparse._SubParsersAction  # the object ``add_subparsers`` returns


class CliError(Exception):
    """A message for the user; printed as one line, exit status 1."""


def settings_from_env() -> Settings:
    try:
        return Settings()
    except ValidationError as error:  # name the variable, never the value (it may be a secret)
        problems = "; ".join(
            f"JOBRELAY_{'_'.join(str(part) for part in item['loc']).upper()}: "
            f"{item['msg'].removeprefix('Value error, ')}"
            for item in error.errors(include_input=False, include_url=False)
        )
        raise CliError(f"invalid setting: {problems}") from None
    except Exception as error:  # pydantic-settings' own parse errors: the class name only
        raise CliError(f"invalid JOBRELAY_* setting ({type(error).__name__})") from None


def database_hint() -> str:
    """Which database URL the CLI used and how to choose another (appended to connection
    errors, whose text already names the URL, password masked)."""
    if os.environ.get("JOBRELAY_DATABASE_URL"):
        return " (the URL comes from JOBRELAY_DATABASE_URL)"
    return " (JOBRELAY_DATABASE_URL is not set, so this is the default URL; set it to yours)"


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return " ".join(text[:3]) if text else type(error).__name__


def job_id(raw: str) -> uuid.UUID:
    """A job id from the command line, or a ``CliError`` naming what was given."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise CliError(f"{raw!r} is not a job id (a UUID)") from None


def job_ids(raw: list[str]) -> list[uuid.UUID]:
    return [job_id(value) for value in raw]


# --- output -------------------------------------------------------------------------------------


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False))


def progress(label: str) -> Callable[[int, int], None]:
    """``label: done/total`` on one line of stderr, only when it is a terminal."""

    def show(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\r{label}: {done}/{total}", end="", file=sys.stderr, flush=True)

    return show


# --- running ------------------------------------------------------------------------------------


def run(coroutine: Coroutine[Any, Any, int]) -> int:
    return asyncio.run(coroutine)


async def with_store(settings: Settings, work: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    from jobrelay.db.store import Store

    store = Store.connect(settings.database_url, pool_size=1, application_name="jobrelay-cli")
    try:
        return await work(store)
    finally:
        await store.close()


def run_with_operations(work: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    """Runs ``work`` with an ``Operations`` over the store (the operator's commands)."""
    settings = settings_from_env()

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


def exit_status(handler: Handler, args: argparse.Namespace) -> int:
    """Runs a command; every error a user can cause becomes one line on stderr and status 1."""
    try:
        return int(handler(args))
    except CliError as error:
        print(f"jobrelay: {error}", file=sys.stderr)
        return 1
    except StoreUnavailable as error:
        print(f"jobrelay: {error}{database_hint()}", file=sys.stderr)
        return 1
    except (JobrelayError, ConfigurationError) as error:
        print(f"jobrelay: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


# --- argument parsing ---------------------------------------------------------------------------


def add_command(
    subparsers: Subcommands[argparse.ArgumentParser],
    name: str,
    handler: Handler,
    help_text: str,
    example: str | None = None,
) -> argparse.ArgumentParser:
    """A sub-command whose help and description are ``help_text``, with an example epilog."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=f"example: {example}" if example else None,
    )
    parser.set_defaults(handler=handler)
    return parser
