"""The ``jobrelay`` command: services, migrations, clients, submissions and inspection.

Every error prints one line to stderr and exits non-zero; nothing prints a traceback for a
mistake a user can make.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from pydantic import ValidationError

from jobrelay import eventloop
from jobrelay.core.durations import parse_duration
from jobrelay.core.errors import ConfigurationError, JobrelayError, StoreUnavailable
from jobrelay.core.fingerprint import token_hash
from jobrelay.core.settings import Settings, mask_url

EXAMPLES = {
    "migrate": "jobrelay migrate",
    "api": "JOBRELAY_API_PORT=8000 jobrelay api",
    "dispatcher": "JOBRELAY_METRICS_PORT=9101 jobrelay dispatcher",
    "consumer": "jobrelay consumer --queue default --concurrency 8 --handlers myapp.jobs:registry",
    "clients create": "jobrelay clients create shop-backend --admin",
    "clients list": "jobrelay clients list --json",
    "clients disable": "jobrelay clients disable shop-backend",
    "clients enable": "jobrelay clients enable shop-backend",
    "clients rotate": "jobrelay clients rotate shop-backend --grace 1h",
    "submit": 'jobrelay submit catalog.export --payload \'{"course": "JavaScript"}\' --key k1',
    "jobs show": "jobrelay jobs show 3f2b...-uuid",
    "stats": "jobrelay stats --json",
}


HANDLERS_HELP = (
    "comma-separated module:registry list of your job types, added to the built-in ones "
    "(overrides JOBRELAY_HANDLERS; the current directory is importable)"
)


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


def _database_hint() -> str:
    """Which database URL the CLI used and how to choose another (appended to connection
    errors, whose text already names the URL, password masked)."""
    if os.environ.get("JOBRELAY_DATABASE_URL"):
        return " (the URL comes from JOBRELAY_DATABASE_URL)"
    return " (JOBRELAY_DATABASE_URL is not set, so this is the default URL; set it to yours)"


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return " ".join(text[:3]) if text else type(error).__name__


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    return asyncio.run(coroutine)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, default=str, ensure_ascii=False))


# --- migrate ------------------------------------------------------------------------------------


def cmd_migrate(args: argparse.Namespace) -> int:
    from jobrelay.db import migrations

    settings = settings_from_env()
    try:
        migrations.wait_for_database(settings.database_url, timeout_seconds=args.wait)
        migrations.upgrade(settings.database_url, args.revision)
    except JobrelayError:
        raise
    except Exception as error:
        raise CliError(
            f"migration failed against {mask_url(settings.database_url)}: {type(error).__name__}"
            f": {mask_url(_first_line(error))[:300]}"
        ) from None
    print(f"database at {mask_url(settings.database_url)} is at revision {args.revision}")
    return 0


# --- services -----------------------------------------------------------------------------------


def cmd_api(args: argparse.Namespace) -> int:
    import uvicorn

    from jobrelay.core.masking import Masker
    from jobrelay.handlers.loading import registry_for
    from jobrelay.logs import configure_logging

    settings = settings_from_env()
    configure_logging("api", settings.log_level, Masker.from_settings(settings))
    if args.handlers is not None:
        # Worker processes build their app from the environment (jobrelay.api.main).
        os.environ["JOBRELAY_HANDLERS"] = args.handlers
        settings = settings.model_copy(update={"handlers": args.handlers})
    registry = registry_for(settings)  # fails here, in one line, before any worker starts
    host = args.host or settings.api_host
    port = args.port if args.port is not None else settings.api_port
    if settings.api_workers > 1:
        uvicorn.run(
            "jobrelay.api.main:app",
            host=host,
            port=port,
            workers=settings.api_workers,
            log_config=None,
            access_log=False,
        )
        return 0
    from jobrelay.api.app import create_app

    app = create_app(settings, registry=registry)
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)
    return 0


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from jobrelay.core.masking import Masker
    from jobrelay.dispatcher.service import run_dispatcher
    from jobrelay.logs import configure_logging

    settings = settings_from_env()
    configure_logging("dispatcher", settings.log_level, Masker.from_settings(settings))
    return eventloop.run(run_dispatcher(settings))


def cmd_consumer(args: argparse.Namespace) -> int:
    from jobrelay.consumer.service import run_consumer
    from jobrelay.core.masking import Masker
    from jobrelay.logs import configure_logging

    settings = settings_from_env()
    configure_logging("consumer", settings.log_level, Masker.from_settings(settings))
    concurrency = args.concurrency or settings.consumer_concurrency
    if concurrency < 1:
        raise CliError("--concurrency must be at least 1")
    return eventloop.run(
        run_consumer(settings, queue=args.queue, concurrency=concurrency, handlers=args.handlers)
    )


# --- clients ------------------------------------------------------------------------------------


def new_token() -> str:
    """A bearer token: 256 random bits; only its SHA-256 is stored."""
    return "jr_" + secrets.token_urlsafe(32)


async def _with_store(settings: Settings, work: Callable[[Any], Coroutine[Any, Any, int]]) -> int:
    from jobrelay.db.store import Store

    store = Store.connect(settings.database_url, pool_size=1, application_name="jobrelay-cli")
    try:
        return await work(store)
    finally:
        await store.close()


def cmd_clients_create(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    name = args.name.strip()
    if not 1 <= len(name) <= 100:
        raise CliError("a client name is 1 to 100 characters")
    token = new_token()

    async def work(store: Any) -> int:
        client_id = await store.create_client(name, token_hash(token), is_admin=args.admin)
        if client_id is None:
            raise CliError(f"a client named {name!r} already exists")
        if args.json:
            _print_json({"id": str(client_id), "name": name, "admin": args.admin, "token": token})
        else:
            role = "admin client" if args.admin else "client"
            print(f"created {role} {name!r} ({client_id})", file=sys.stderr)
            print("its token (shown once, store it now):", file=sys.stderr)
            print(token)
        return 0

    return _run(_with_store(settings, work))


def cmd_clients_list(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Any) -> int:
        rows = await store.list_clients()
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
            }
            for r in rows
        ]
        if args.json:
            _print_json(items)
            return 0
        if not items:
            print("no clients yet (create one: jobrelay clients create NAME)", file=sys.stderr)
            return 0
        width = max(len(item["name"]) for item in items)
        for item in items:
            role = "admin " if item["admin"] else "client"
            state = "disabled" if item["disabled"] else "enabled "
            grace = item["previous_token_expires_at"]
            note = f"  previous token works until {grace}" if grace else ""
            print(
                f"{item['name']:<{width}}  {role}  {state}  {item['id']}  "
                f"created {item['created_at']}{note}"
            )
        return 0

    return _run(_with_store(settings, work))


def _set_disabled(args: argparse.Namespace, *, disabled: bool) -> int:
    settings = settings_from_env()

    async def work(store: Any) -> int:
        change = await store.set_client_disabled(args.name, disabled=disabled)
        if change is None:
            raise CliError(f"no client named {args.name!r} (see: jobrelay clients list)")
        if not change.changed:
            print(f"client {args.name!r} was already {'disabled' if disabled else 'enabled'}")
        elif disabled:
            print(f"client {args.name!r} disabled: its token is refused from now on")
        else:
            print(f"client {args.name!r} enabled: its token works again")
        return 0

    return _run(_with_store(settings, work))


def cmd_clients_disable(args: argparse.Namespace) -> int:
    return _set_disabled(args, disabled=True)


def cmd_clients_enable(args: argparse.Namespace) -> int:
    return _set_disabled(args, disabled=False)


MAX_GRACE_SECONDS = 30 * 86400.0


def cmd_clients_rotate(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    try:
        grace = parse_duration(args.grace) if args.grace else 0.0
    except ValueError as error:
        raise CliError(f"--grace: {error}") from None
    if grace > MAX_GRACE_SECONDS:
        raise CliError("--grace is at most 30d")
    token = new_token()

    async def work(store: Any) -> int:
        change = await store.rotate_client_token(args.name, token_hash(token), grace_seconds=grace)
        if change is None:
            raise CliError(f"no client named {args.name!r} (see: jobrelay clients list)")
        expires = change.previous_token_expires_at
        if args.json:
            _print_json(
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

    return _run(_with_store(settings, work))


# --- submit (through the HTTP API, with the same checks as any client) -------------------------


def cmd_submit(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as error:
        raise CliError(
            f"--payload is not valid JSON: {error.msg} at position {error.pos}"
        ) from None
    token = args.token or os.environ.get("JOBRELAY_TOKEN")
    if not token:
        raise CliError("no token: pass --token or set JOBRELAY_TOKEN")
    key = args.key or str(uuid.uuid4())
    body: dict[str, Any] = {"type": args.type, "payload": payload}
    if args.max_attempts is not None:
        body["max_attempts"] = args.max_attempts
    request = urllib.request.Request(
        args.api_url.rstrip("/") + "/v1/jobs",
        data=json.dumps(body).encode(),
        method="POST",
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
    )
    status, answer = _http(request)
    if status >= 400:
        raise CliError(
            f"{status} {answer.get('code', '')}: {answer.get('detail') or answer.get('title')}"
            + "".join(f"\n  {line}" for line in field_errors(answer))
        )
    if args.json:
        _print_json(answer)
    else:
        verb = "accepted" if status == 202 else "already known"
        print(f"{verb}: job {answer['id']} ({answer['type']}) is {answer['state']}; key {key}")
    return 0


MAX_FIELD_ERRORS = 10


def field_errors(problem: dict[str, Any]) -> list[str]:
    """``where: what`` for each field error of a problem (``payload.seconds: Field required``):
    the request's own fields from a ``validation_error``, the payload's from an
    ``invalid_payload`` (whose locations are inside the payload)."""
    errors = problem.get("errors")
    if not isinstance(errors, list):
        return []
    lines: list[str] = []
    for item in errors:
        if not isinstance(item, dict):
            continue
        loc = [str(part) for part in item.get("loc") or []]
        if problem.get("code") == "invalid_payload":
            loc = ["payload", *loc]
        elif loc[:1] == ["body"]:
            loc = loc[1:]
        lines.append(f"{'.'.join(loc) or 'body'}: {item.get('msg', 'invalid')}")
    if len(lines) > MAX_FIELD_ERRORS:
        more = len(lines) - MAX_FIELD_ERRORS
        lines = [*lines[:MAX_FIELD_ERRORS], f"... and {more} more"]
    return lines


def _http(request: urllib.request.Request) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"{}")
        except json.JSONDecodeError:
            return error.code, {"title": error.reason}
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise CliError(f"cannot reach the API at {request.full_url}: {reason}") from None


# --- inspection ---------------------------------------------------------------------------------


def _job_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise CliError(f"{raw!r} is not a job id (a UUID)") from None


def cmd_jobs_show(args: argparse.Namespace) -> int:
    settings = settings_from_env()
    job_id = _job_id(args.id)

    async def work(store: Any) -> int:
        from jobrelay.api.schemas import JobView

        job = await store.get_job(job_id)
        if job is None:
            raise CliError(f"no job {job_id}")
        view = JobView.of(job).model_dump(mode="json")
        if args.json:
            _print_json(view)
            return 0
        for field in (
            "id",
            "type",
            "state",
            "attempts",
            "max_attempts",
            "created_at",
            "updated_at",
            "finished_at",
            "last_error_code",
            "last_error",
            "result",
        ):
            value = view.get(field)
            if value is not None:
                print(f"{field:16} {json.dumps(value) if isinstance(value, dict) else value}")
        return 0

    return _run(_with_store(settings, work))


def cmd_stats(args: argparse.Namespace) -> int:
    settings = settings_from_env()

    async def work(store: Any) -> int:
        stats = await store.stats()
        if args.json:
            _print_json(stats)
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

    return _run(_with_store(settings, work))


# --- argument parsing ---------------------------------------------------------------------------


def _add(
    subparsers: Any,
    name: str,
    handler: Callable[[argparse.Namespace], int],
    help_text: str,
    example_key: str | None = None,
) -> argparse.ArgumentParser:
    example = EXAMPLES.get(example_key or name)
    parser: argparse.ArgumentParser = subparsers.add_parser(
        name,
        help=help_text,
        description=help_text,
        epilog=f"example: {example}" if example else None,
    )
    parser.set_defaults(handler=handler)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobrelay",
        description="Durable background jobs: transactional outbox, PostgreSQL, RabbitMQ.",
        epilog='example: jobrelay submit catalog.export --payload \'{"course": "JavaScript"}\''
        "\nconfiguration comes from JOBRELAY_* environment variables (see the README)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    migrate = _add(commands, "migrate", cmd_migrate, "upgrade the database schema (alembic)")
    migrate.add_argument("revision", nargs="?", default="head")
    migrate.add_argument(
        "--wait",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for the database to take connections (default 60)",
    )

    api = _add(commands, "api", cmd_api, "run the HTTP API")
    api.add_argument("--host", default=None)
    api.add_argument("--port", type=int, default=None)
    api.add_argument("--handlers", default=None, help=HANDLERS_HELP)

    _add(commands, "dispatcher", cmd_dispatcher, "relay the outbox to RabbitMQ")
    consumer = _add(commands, "consumer", cmd_consumer, "run jobs from a work queue")
    consumer.add_argument("--queue", default="default", help="work queue (default: default)")
    consumer.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="jobs run at once = prefetch (default: JOBRELAY_CONSUMER_CONCURRENCY)",
    )
    consumer.add_argument("--handlers", default=None, help=HANDLERS_HELP)

    clients = commands.add_parser(
        "clients",
        help="manage API clients and their tokens",
        epilog=f"example: {EXAMPLES['clients create']}",
    )
    client_commands = clients.add_subparsers(
        dest="clients_command", required=True, metavar="ACTION"
    )
    create = _add(
        client_commands,
        "create",
        cmd_clients_create,
        "create a client and print its token once",
        "clients create",
    )
    create.add_argument("name")
    create.add_argument("--admin", action="store_true", help="may use the /v1/admin endpoints")
    create.add_argument("--json", action="store_true")
    listing = _add(client_commands, "list", cmd_clients_list, "list clients", "clients list")
    listing.add_argument("--json", action="store_true")
    disable = _add(
        client_commands,
        "disable",
        cmd_clients_disable,
        "refuse a client's token (its jobs stay; enable gives it back)",
        "clients disable",
    )
    disable.add_argument("name")
    enable = _add(
        client_commands,
        "enable",
        cmd_clients_enable,
        "accept a disabled client's token again",
        "clients enable",
    )
    enable.add_argument("name")
    rotate = _add(
        client_commands,
        "rotate",
        cmd_clients_rotate,
        "give a client a new token (printed once); its jobs stay its own",
        "clients rotate",
    )
    rotate.add_argument("name")
    rotate.add_argument(
        "--grace",
        metavar="DURATION",
        default=None,
        help="how long the previous token keeps working, e.g. 10m or 1h (default: it stops now)",
    )
    rotate.add_argument("--json", action="store_true")

    submit = _add(commands, "submit", cmd_submit, "submit a job through the API")
    submit.add_argument("type")
    submit.add_argument("--payload", default="{}", help="the payload as JSON")
    submit.add_argument("--key", help="Idempotency-Key (default: a new UUID)")
    submit.add_argument("--max-attempts", type=int, default=None)
    submit.add_argument(
        "--api-url", default=os.environ.get("JOBRELAY_API_URL", "http://127.0.0.1:8000")
    )
    submit.add_argument("--token", help="bearer token (default: $JOBRELAY_TOKEN)")
    submit.add_argument("--json", action="store_true")

    jobs = commands.add_parser(
        "jobs", help="inspect jobs", epilog="example: jobrelay jobs trace 5b0c9f6e-..."
    )
    job_commands = jobs.add_subparsers(dest="jobs_command", required=True, metavar="ACTION")
    show = _add(job_commands, "show", cmd_jobs_show, "show one job (any client's)", "jobs show")
    show.add_argument("id")
    show.add_argument("--json", action="store_true")

    from jobrelay import ops_cli

    ops_cli.register(commands, job_commands, _add)
    from jobrelay import healthcheck

    healthcheck.register(commands, _add)

    stats = _add(commands, "stats", cmd_stats, "jobs by state, outbox backlog, leases, quarantine")
    stats.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except CliError as error:
        print(f"jobrelay: {error}", file=sys.stderr)
        return 1
    except StoreUnavailable as error:
        print(f"jobrelay: {error}{_database_hint()}", file=sys.stderr)
        return 1
    except (JobrelayError, ConfigurationError) as error:
        print(f"jobrelay: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
