"""The whole system as real processes: dispatcher and consumers beside a test's database."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aio_pika

from jobrelay.core.settings import Settings
from jobrelay.core.topology import QUARANTINE_QUEUE
from tests.support.processes import Service, free_port, run_cli, running, service_env
from tests.support.waiting import eventually

__all__ = ["eventually", "free_port"]  # re-exported for the acceptance tests


def fast_settings(settings: Settings, amqp_url: str, **overrides: Any) -> Settings:
    """Short leases and backoffs so that a test sees retries and expiries in seconds."""
    values: dict[str, Any] = {
        "amqp_url": amqp_url,
        "lease_seconds": 3.0,
        "retry_base_seconds": 0.2,
        "retry_max_seconds": 1.0,
        "poll_interval_seconds": 0.2,
        "shutdown_grace_seconds": 5.0,
    }
    values.update(overrides)
    return settings.model_copy(update=values)


@contextmanager
def running_system(
    settings: Settings, log_dir: Path, *, dispatcher: bool = True, consumers: int = 1
) -> Iterator[list[Service]]:
    env = service_env(settings)
    log_dir.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        services = []
        if dispatcher:
            services.append(
                stack.enter_context(running(["dispatcher"], env, log_dir / "dispatcher.log"))
            )
        for number in range(consumers):
            services.append(
                stack.enter_context(
                    running(
                        ["consumer", "--concurrency", "4"], env, log_dir / f"consumer{number}.log"
                    )
                )
            )
        yield services


def cli(settings: Settings, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(service_env(settings), *args)


def cli_json(settings: Settings, *args: str) -> Any:
    result = cli(settings, *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def message_count(amqp_url: str, queue: str = QUARANTINE_QUEUE) -> int:
    """Exact depth of a queue (passive declare; the management API's counts lag); -1 while
    the queue does not exist yet (the services declare it when they start)."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        try:
            declared = await channel.declare_queue(queue, passive=True)
        except aio_pika.exceptions.ChannelNotFoundEntity:
            return -1
        return int(declared.declaration_result.message_count or 0)
