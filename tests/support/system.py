"""The whole system as real processes: dispatcher and consumers beside a test's database."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import aio_pika
import httpx

from jobrelay.core.settings import Settings
from jobrelay.core.topology import DEFAULT_QUEUE
from tests.conftest import auth
from tests.support.processes import Service, free_port, run_cli, running, service_env
from tests.support.waiting import eventually

__all__ = ["eventually", "free_port"]  # re-exported for the acceptance tests


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


async def submit_job(api: httpx.AsyncClient, token: str, body: Mapping[str, object]) -> str:
    """A job through the API, with a fresh idempotency key: its id."""
    response = await api.post("/v1/jobs", json=body, headers=auth(token, uuid.uuid4().hex))
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def return_until_dead_lettered(amqp_url: str, count: int = 1) -> None:
    """Take each message of the work queue and return it (nack, requeue) until the broker's
    delivery limit drops it into the quarantine queue."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(DEFAULT_QUEUE, passive=True)
        for _ in range(10 * count):
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                return
            await message.nack(requeue=True)
    raise AssertionError("the broker never dead-lettered the messages")
