"""The whole system as real processes: dispatcher and consumers beside a test's database."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    ExitStack,
    contextmanager,
)
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aio_pika
import httpx

from jobrelay.core.settings import Settings
from jobrelay.core.topology import DEFAULT_QUEUE
from jobrelay.db.store import Store
from tests.conftest import api_client, auth
from tests.support.processes import Service, free_port, run_cli, running, service_env
from tests.support.queues import depth_is
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


async def return_until_dead_lettered(
    amqp_url: str, count: int = 1, queue_name: str = DEFAULT_QUEUE
) -> None:
    """Take each message of the work queue ``queue_name`` (a type's own queue, where the
    dispatcher publishes) and return it (nack, requeue) until the broker's delivery limit drops
    it into the quarantine queue."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(queue_name, passive=True)
        for _ in range(10 * count):
            message = await queue.get(no_ack=False, fail=False)
            if message is None:
                return
            await message.nack(requeue=True)
    raise AssertionError("the broker never dead-lettered the messages")


@dataclass
class System:
    """A test's whole system (the ``system`` fixture): its settings (the test's database, its own
    RabbitMQ vhost, the fast timings), the API in process, the store, and the tokens of a client
    (alice) and of an admin. ``running()`` starts the dispatcher and consumers as real processes
    and stops them when its block ends; between blocks nothing runs but what the test runs."""

    make_settings: Callable[..., Settings]
    api: httpx.AsyncClient
    store: Store
    alice: str
    admin: str
    log_dir: Path

    def __post_init__(self) -> None:
        self.settings = self.make_settings()

    def configure(self, **overrides: Any) -> None:
        """Other settings than the defaults (for every block, CLI call and helper after this)."""
        self.settings = self.make_settings(**overrides)

    @property
    def amqp_url(self) -> str:
        return self.settings.amqp_url

    def running(self, logs: str = "", *, consumers: int = 1) -> AbstractContextManager[Any]:
        """The dispatcher and ``consumers`` consumers, logging under ``log_dir / logs``."""
        return running_system(self.settings, self.log_dir / logs, consumers=consumers)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return cli(self.settings, *args)

    def cli_json(self, *args: str) -> Any:
        return cli_json(self.settings, *args)

    def admin_api(self) -> AbstractAsyncContextManager[httpx.AsyncClient]:
        """An API client on the system's settings (the ``api`` fixture's reach no broker)."""
        return api_client(self.settings, self.store)

    async def submit(self, body: Mapping[str, object]) -> str:
        """A job submitted by alice through the API: its id."""
        return await submit_job(self.api, self.alice, body)

    async def state_of(self, job_id: str | uuid.UUID) -> str | None:
        job = await self.store.get_job(uuid.UUID(str(job_id)))
        return job.state.value if job else None

    async def wait_for(
        self, state: str, *job_ids: str | uuid.UUID, what: str, within: float = 30.0
    ) -> None:
        """Until every one of the jobs is in ``state`` (fails after ``within`` seconds)."""

        async def reached() -> bool:
            return {await self.state_of(job_id) for job_id in job_ids} == {state}

        await eventually(reached, within=within, what=what)

    async def wait_for_depth(self, expected: int, queue: str = DEFAULT_QUEUE, *, what: str) -> None:
        """Until the queue holds exactly ``expected`` messages."""
        await eventually(lambda: depth_is(self.amqp_url, expected, queue), what=what)
