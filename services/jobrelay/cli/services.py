"""``jobrelay migrate``, ``api``, ``dispatcher`` and ``consumer``: the schema and the services.

Each command imports its service lazily, so that the others start without it.
"""

from __future__ import annotations

import argparse
import os

from jobrelay import eventloop
from jobrelay.cli.common import (
    CliError,
    Subcommands,
    add_command,
    add_seconds_option,
    first_line,
    settings_from_env,
)
from jobrelay.core.errors import JobrelayError
from jobrelay.core.settings import mask_url

EXAMPLES = {
    "migrate": "jobrelay migrate",
    "api": "JOBRELAY_API_PORT=8000 jobrelay api",
    "dispatcher": "JOBRELAY_METRICS_PORT=9101 jobrelay dispatcher",
    "consumer": "jobrelay consumer --queue default --concurrency 8 --handlers myapp.jobs:registry",
}

HANDLERS_HELP = (
    "comma-separated module:registry list of your job types, added to the built-in ones "
    "(overrides JOBRELAY_HANDLERS; the current directory is importable)"
)


def cmd_migrate(args: argparse.Namespace) -> int:
    from jobrelay.db import migrations

    settings = settings_from_env()
    try:
        migrations.wait_for_database(settings.database_url, timeout_seconds=args.wait)
        moved = migrations.move_from_public(settings.database_url, settings.database_schema)
        if moved:
            print(
                f"moved jobrelay's {len(moved)} objects from schema public into "
                f"{settings.database_schema}: {', '.join(moved)}"
            )
        migrations.upgrade(settings.database_url, args.revision, schema=settings.database_schema)
    except JobrelayError:
        raise
    except Exception as error:
        raise CliError(
            f"migration failed against {mask_url(settings.database_url)}: {type(error).__name__}"
            f": {mask_url(first_line(error))[:300]}"
        ) from None
    print(
        f"database at {mask_url(settings.database_url)} is at revision {args.revision} "
        f"(schema {settings.database_schema})"
    )
    return 0


def cmd_api(args: argparse.Namespace) -> int:
    import uvicorn

    from jobrelay.core.masking import Masker
    from jobrelay.db.pooler import settle_pool_mode
    from jobrelay.handlers.loading import registry_for
    from jobrelay.logs import configure_logging

    settings = settings_from_env()
    configure_logging("api", settings.log_level, Masker.from_settings(settings))
    settings = settle_pool_mode(settings)
    # Worker processes build their app from the environment: they take the mode found here
    # instead of each probing (and warning) again.
    os.environ["JOBRELAY_DATABASE_POOL_MODE"] = settings.database_pool_mode
    if args.handlers is not None:
        # Worker processes build their app from the environment (jobrelay.api.main).
        os.environ["JOBRELAY_HANDLERS"] = args.handlers
        settings = settings.model_copy(update={"handlers": args.handlers})
    registry = registry_for(settings)  # fails here, in one line, before any worker starts
    host = args.host or settings.api_host
    port = args.port if args.port is not None else settings.api_port
    if settings.api_workers > 1:
        from jobrelay.api.multiprocess import worker_metrics_dir

        # The workers' metrics in one directory, added up by whichever answers a scrape.
        with worker_metrics_dir():
            uvicorn.run(
                "jobrelay.api.main:build_app",
                factory=True,
                host=host,
                port=port,
                workers=settings.api_workers,
                log_config=None,
                access_log=False,
            )
        return 0
    from jobrelay import telemetry
    from jobrelay.api.app import create_app

    telemetry.setup("api")  # the workers above set it up each for itself (api/main.py)
    app = create_app(settings, registry=registry)
    uvicorn.run(app, host=host, port=port, log_config=None, access_log=False)
    return 0


def cmd_dispatcher(args: argparse.Namespace) -> int:
    from jobrelay import telemetry
    from jobrelay.core.masking import Masker
    from jobrelay.db.pooler import settle_pool_mode
    from jobrelay.dispatcher.service import run_dispatcher
    from jobrelay.logs import configure_logging

    settings = settings_from_env()
    configure_logging("dispatcher", settings.log_level, Masker.from_settings(settings))
    settings = settle_pool_mode(settings)
    telemetry.setup("dispatcher")  # OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set
    return eventloop.run(run_dispatcher(settings, handlers=args.handlers))


def cmd_consumer(args: argparse.Namespace) -> int:
    from jobrelay import telemetry
    from jobrelay.consumer.service import run_consumer
    from jobrelay.core.masking import Masker
    from jobrelay.logs import configure_logging

    settings = settings_from_env()
    # 0 is a value given, refused like -3; only an absent option falls back to the setting.
    concurrency = settings.consumer_concurrency if args.concurrency is None else args.concurrency
    if concurrency < 1:
        raise CliError("--concurrency must be at least 1")
    configure_logging("consumer", settings.log_level, Masker.from_settings(settings))
    # The pool mode is settled by run_consumer, once its job types are known to be there.
    telemetry.setup("consumer")  # OTLP export when OTEL_EXPORTER_OTLP_ENDPOINT is set
    return eventloop.run(
        run_consumer(settings, queue=args.queue, concurrency=concurrency, handlers=args.handlers)
    )


def register(commands: Subcommands[argparse.ArgumentParser]) -> None:
    migrate = add_command(
        commands,
        "migrate",
        cmd_migrate,
        "upgrade the database schema (alembic)",
        EXAMPLES["migrate"],
    )
    migrate.add_argument("revision", nargs="?", default="head")
    add_seconds_option(
        migrate,
        "--wait",
        default=60.0,
        help_text="how long to wait for the database to take connections (default 60)",
    )

    api = add_command(commands, "api", cmd_api, "run the HTTP API", EXAMPLES["api"])
    api.add_argument("--host", default=None)
    api.add_argument("--port", type=int, default=None)
    api.add_argument("--handlers", default=None, help=HANDLERS_HELP)

    dispatcher = add_command(
        commands,
        "dispatcher",
        cmd_dispatcher,
        "relay the outbox to RabbitMQ and make the jobs of periodic schedules",
        EXAMPLES["dispatcher"],
    )
    dispatcher.add_argument("--handlers", default=None, help=HANDLERS_HELP)
    consumer = add_command(
        commands, "consumer", cmd_consumer, "run jobs from a work queue", EXAMPLES["consumer"]
    )
    consumer.add_argument("--queue", default="default", help="work queue (default: default)")
    consumer.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="jobs run at once = prefetch (default: JOBRELAY_CONSUMER_CONCURRENCY)",
    )
    consumer.add_argument("--handlers", default=None, help=HANDLERS_HELP)
