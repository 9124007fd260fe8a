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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from pydantic import ValidationError

from jobrelay.core.errors import (
    ConfigurationError,
    InvalidCursor,
    JobrelayError,
    StoreUnavailable,
)
from jobrelay.core.pages import Page, decode_cursor
from jobrelay.core.settings import Settings

if TYPE_CHECKING:  # the commands import them lazily, so that the others start without them
    from jobrelay.db.store import Store
    from jobrelay.operations import Operations

Handler = Callable[[argparse.Namespace], int]
"""A command's callback: the parsed arguments in, the exit status out."""

Subcommands = argparse._SubParsersAction  # the object ``add_subparsers`` returns

Document = TypeVar("Document")


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


def print_json(value: Any, *, ensure_ascii: bool = False) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=ensure_ascii))


def print_document(
    document: Document,
    render: Callable[[Document], str],
    *,
    as_json: bool,
    ensure_ascii: bool = False,
) -> None:
    """The document as JSON under ``--json``, else as ``render`` shows it to a person."""
    if as_json:
        print_json(document, ensure_ascii=ensure_ascii)
    else:
        print(render(document))


@contextmanager
def progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A callback showing ``label: done/total`` on one line of stderr, only when it is a
    terminal; the line ends when the block does."""

    def show(done: int, total: int) -> None:
        if sys.stderr.isatty():
            print(f"\r{label}: {done}/{total}", end="", file=sys.stderr, flush=True)

    yield show
    if sys.stderr.isatty():
        print(file=sys.stderr)


# --- running ------------------------------------------------------------------------------------


@asynccontextmanager
async def _connected_store(settings: Settings, *, pool_size: int) -> AsyncIterator[Store]:
    from jobrelay.db.pooler import settle_pool_mode
    from jobrelay.db.store import Store

    settings = settle_pool_mode(settings, strict=True)
    store = Store.connect(
        settings.database_url,
        pool_size=pool_size,
        application_name="jobrelay-cli",
        pool_mode=settings.pool_mode,
        schema=settings.database_schema,
    )
    try:
        yield store
    finally:
        await store.close()


def run_with_store(settings: Settings, work: Callable[[Store], Awaitable[int]]) -> int:
    """Runs ``work`` with a one-connection store; its exit status is the command's."""

    async def main() -> int:
        async with _connected_store(settings, pool_size=1) as store:
            return await work(store)

    return asyncio.run(main())


def run_with_operations(work: Callable[[Operations], Awaitable[int]]) -> int:
    """Runs ``work`` with an ``Operations`` over the store (the operator's commands)."""
    settings = settings_from_env()

    async def main() -> int:
        from jobrelay.handlers.loading import registry_for
        from jobrelay.operations import Operations

        async with _connected_store(settings, pool_size=2) as store:
            return await work(Operations(store, settings, registry_for(settings)))

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


class ArgumentParser(argparse.ArgumentParser):
    """argparse, with its mistakes as the CLI's others: one line on stderr, exit status 1
    (argparse's own prints the usage too, and exits 2). ``--help`` is unchanged; the
    sub-commands' parsers are of this class too (``add_subparsers`` makes them so)."""

    def error(self, message: str) -> NoReturn:
        print(f"jobrelay: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(1)


def add_group(
    commands: Subcommands[argparse.ArgumentParser], name: str, help_text: str, example: str
) -> Subcommands[argparse.ArgumentParser]:
    """A command with actions of its own (``jobrelay NAME ACTION``); returns where to add them."""
    group = commands.add_parser(name, help=help_text, epilog=f"example: {example}")
    return group.add_subparsers(dest=f"{name}_command", required=True, metavar="ACTION")


def add_command(
    subparsers: Subcommands[argparse.ArgumentParser],
    name: str,
    handler: Handler,
    help_text: str,
    example: str | None = None,
    *,
    argument: str | None = None,
    json_flag: bool = False,
) -> argparse.ArgumentParser:
    """A sub-command whose help and description are ``help_text``, with an example epilog;
    ``argument`` names its one positional argument (``id``, ``name``) and ``json_flag`` gives
    it ``--json``, in that order (options added later are listed after them)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=f"example: {example}" if example else None,
    )
    parser.set_defaults(handler=handler)
    if argument is not None:
        parser.add_argument(argument)
    if json_flag:
        parser.add_argument("--json", action="store_true")
    return parser


def add_seconds_option(
    parser: argparse.ArgumentParser, flag: str, *, default: float, help_text: str
) -> None:
    """An option whose value is a number of seconds (``--wait 30``, ``--timeout 2.5``)."""
    parser.add_argument(flag, type=float, default=default, metavar="SECONDS", help=help_text)


# The most rows a listing (`jobs list`, `workflows list`) prints on a page.
MAX_LIST_LIMIT = 1000


def list_page(args: argparse.Namespace) -> Page:
    """The page ``--limit`` and ``--cursor`` ask for (jobs and workflows alike)."""
    if not 1 <= args.limit <= MAX_LIST_LIMIT:
        raise CliError(f"--limit must be 1 to {MAX_LIST_LIMIT}")
    try:
        return Page(args.limit, decode_cursor(args.cursor) if args.cursor else None)
    except InvalidCursor:
        raise CliError(f"--cursor {args.cursor!r} is not one this command printed") from None
