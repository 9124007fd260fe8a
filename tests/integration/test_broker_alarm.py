"""A RabbitMQ resource alarm against the real broker (docs/overload.md): while the broker blocks
publishers the API keeps accepting into the outbox, the dispatcher publishes nothing and says
so (log, metric, stats), and once the alarm clears every job runs."""

from __future__ import annotations

import asyncio
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

from sqlalchemy import func, select

from jobrelay.db import tables
from tests.support import factories, faults
from tests.support.processes import free_port, running, service_env
from tests.support.system import System
from tests.support.waiting import eventually

JOB = {"type": "demo.sleep", "payload": {"seconds": 0}}
# The broker's default; a fraction this small of the machine's memory is below what any node
# uses, so the memory alarm goes off at once.
DEFAULT_WATERMARK = "0.4"
ALARM_WATERMARK = "0.00001"


@contextmanager
def memory_alarm() -> Iterator[None]:
    faults.rabbitmqctl("set_vm_memory_high_watermark", ALARM_WATERMARK)
    try:
        yield
    finally:
        faults.rabbitmqctl("set_vm_memory_high_watermark", DEFAULT_WATERMARK)


def metric(port: int, name: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None


async def unpublished(system: System, job_ids: list[str]) -> int:
    outbox = tables.outbox
    async with factories.connection(system.store) as conn:
        query = select(func.count()).where(
            outbox.c.job_id.in_(job_ids), outbox.c.published_at.is_(None)
        )
        return int((await conn.execute(query)).scalar_one())


async def test_a_memory_alarm_pauses_relaying_and_every_job_runs_once_it_clears(
    system: System,
) -> None:
    port = free_port()
    env = service_env(system.settings)
    with ExitStack() as stack:
        dispatcher = stack.enter_context(
            running(
                ["dispatcher"],
                env | {"JOBRELAY_METRICS_PORT": str(port)},
                system.log_dir / "dispatcher.log",
            )
        )
        stack.enter_context(running(["consumer"], env, system.log_dir / "consumer.log"))
        before = await system.submit(JOB)
        await system.wait_for("succeeded", before, what="a job before the alarm")

        with memory_alarm():
            # The broker blocks a connection once it publishes: the first job is the trigger.
            # Accepting never waits for the broker (the API has no part in publishing): every
            # submission is answered while the alarm lasts, which is until this block ends.
            submitted = [await asyncio.wait_for(system.submit(JOB), 60) for _ in range(30)]

            async def reported() -> bool:
                return bool(system.cli_json("stats")["broker_blocks"])

            await eventually(reported, what="the block in the stats")
            [block] = system.cli_json("stats")["broker_blocks"]
            assert "memory" in block["reason"]
            assert metric(port, "jobrelay_dispatcher_broker_blocked") == 1.0
            assert "the broker blocks publishing" in dispatcher.output()
            # Accepted jobs wait in the outbox; none is marked published without its confirm.
            # (The one publish that met the block may be confirmed once it lifts.)
            assert await unpublished(system, submitted) >= len(submitted) - 1
            more = [await system.submit(JOB) for _ in range(10)]
            assert await unpublished(system, more) == len(more)
            assert system.cli_json("stats")["outbox"]["unpublished"] >= len(more)

        everything = [*submitted, *more]
        await system.wait_for("succeeded", *everything, what="every job after the alarm")
        assert await unpublished(system, everything) == 0
        assert metric(port, "jobrelay_dispatcher_broker_blocked") == 0.0
        assert system.cli_json("stats")["broker_blocks"] == []
        assert "the broker unblocked publishing" in dispatcher.output()
        # Each job ran once: one result each.
        for job_id in everything:
            assert len(await factories.results_of(system.store, job_id)) == 1
