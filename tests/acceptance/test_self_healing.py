"""A message lost after its confirm is healed by the dispatcher (review finding 6, hence the
tests' names; docs/failure-points.md).

A broker that lost its data, or a purged queue, leaves jobs `queued` with nothing left to
deliver them. The dispatcher publishes such a job again once its message is provably missing
(``jobrelay.dispatcher.healing``): its work queue is empty while the job, published long
enough ago, was never claimed. A queue that still holds messages is never added to.
"""

from __future__ import annotations

import asyncio
import urllib.request
import uuid
from pathlib import Path

from jobrelay.core.settings import Settings
from jobrelay.core.topology import type_queue_name, work_queue_name
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support.consumer_kit import (
    broker,
    events,
    handler_runs,
    new_client,
    rows,
    submit,
    work_queue_count,
)
from tests.support.processes import free_port, running, service_env
from tests.support.system import eventually, running_system

HANDLERS = "tests.support.consumer_kit:registry"
JOBS = 5
# Each type's own queue, where the dispatcher publishes its jobs.
COUNT_QUEUE = type_queue_name("test.count")
SLEEP_QUEUE = type_queue_name("demo.sleep")


async def test_finding6_the_dispatcher_publishes_lost_messages_again_and_each_job_runs_once(
    store: Store, make_settings: MakeSettings, tmp_path: Path
) -> None:
    port = free_port()
    system = make_settings(redispatch_after_seconds=1.0, metrics_port=port)
    client = await new_client(store)
    ids = [await submit(store, client, "test.count", {"tag": str(n)}) for n in range(JOBS)]
    with running_system(system, tmp_path / "relay", consumers=0):
        await eventually(
            lambda: _depth_is(system, JOBS, COUNT_QUEUE), what="the published messages"
        )
        # Published long ago and unclaimed, but their messages are there: nothing to heal.
        await asyncio.sleep(3.0)
        assert await _redispatched(store, ids) == [0] * JOBS
        assert await work_queue_count(system, COUNT_QUEUE) == JOBS

        await _purge(system, COUNT_QUEUE)  # the broker "lost" them after their confirms

        await eventually(
            lambda: _all_redispatched(store, ids), within=20, what="the jobs published again"
        )
        await eventually(lambda: _depth_is(system, JOBS, COUNT_QUEUE), what="their new messages")
        # The queue holds them again: it is never doubled, however long they wait.
        await asyncio.sleep(3.0)
        assert await work_queue_count(system, COUNT_QUEUE) == JOBS
        assert await _redispatched(store, ids) == [1] * JOBS
        metrics = _scrape(port)
        stats = await store.stats()
    assert f'jobrelay_dispatcher_redispatched_total{{queue="{COUNT_QUEUE}"}} {JOBS}.0' in (metrics)
    assert stats.redispatched_last_hour == JOBS
    detail = next(e for e in await store.job_events(ids[0]) if e.event == "redispatched").detail
    assert detail and "work queue was empty" in detail

    consumer_log = tmp_path / "run" / "consumer.log"
    system = system.model_copy(update={"metrics_port": 0})  # one port cannot serve two processes
    with (
        running_system(system, tmp_path / "run", consumers=0),
        running(
            ["consumer", "--handlers", HANDLERS, "--concurrency", "4"],
            service_env(system),
            consumer_log,
        ),
    ):
        await eventually(lambda: _all_succeeded(store, ids), within=30, what="every job done")
    assert [handler_runs(system.results_dir, job_id) for job_id in ids] == [1] * JOBS
    results = await rows(
        store, "SELECT job_id, attempt FROM jobrelay.job_results WHERE job_id = ANY(:ids)", ids=ids
    )
    assert sorted(attempt for _, attempt in results) == [1] * JOBS
    for job_id in ids:
        journal = [event for event, _ in await events(store, job_id)]
        assert journal.count("claimed") == 1 and journal.count("succeeded") == 1


# --- helpers ------------------------------------------------------------------------------------


async def _depth_is(settings: Settings, expected: int, queue: str = "default") -> bool:
    return await work_queue_count(settings, queue) == expected


async def _purge(settings: Settings, queue_name: str = "default") -> None:
    async with broker(settings) as channel:
        queue = await channel.declare_queue(work_queue_name(queue_name), passive=True)
        await queue.purge()


async def _redispatched(store: Store, ids: list[uuid.UUID]) -> list[int]:
    return [
        sum(1 for event, _ in await events(store, job_id) if event == "redispatched")
        for job_id in ids
    ]


async def _all_redispatched(store: Store, ids: list[uuid.UUID]) -> bool:
    return all(await _redispatched(store, ids))


async def _all_succeeded(store: Store, ids: list[uuid.UUID]) -> bool:
    for job_id in ids:
        job = await store.get_job(job_id)
        if job is None or job.state.value != "succeeded":
            return False
    return True


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


async def test_finding6_only_the_emptied_queue_is_healed_and_a_backlog_is_never_doubled(
    store: Store, make_settings: MakeSettings, tmp_path: Path
) -> None:
    # test.count and demo.sleep each have their own queue. Both hold a backlog of jobs published
    # long ago and never claimed; only test.count's queue loses its messages.
    system = make_settings(redispatch_after_seconds=1.0)
    client = await new_client(store)
    counted = [await submit(store, client, "test.count", {"tag": str(n)}) for n in range(3)]
    sleeping = [await submit(store, client, "demo.sleep", {"seconds": 0}) for _ in range(4)]
    with running_system(system, tmp_path, consumers=0):
        await eventually(lambda: _depth_is(system, 3, COUNT_QUEUE), what="test.count's messages")
        await eventually(lambda: _depth_is(system, 4, SLEEP_QUEUE), what="demo.sleep's messages")
        await _purge(system, COUNT_QUEUE)
        await eventually(
            lambda: _all_redispatched(store, counted), within=20, what="the test.count jobs again"
        )
        await eventually(lambda: _depth_is(system, 3, COUNT_QUEUE), what="their new messages")
        await asyncio.sleep(3.0)
        assert await work_queue_count(system, COUNT_QUEUE) == 3
        assert await work_queue_count(system, SLEEP_QUEUE) == 4
    assert await _redispatched(store, counted) == [1, 1, 1]
    assert await _redispatched(store, sleeping) == [0, 0, 0, 0]
