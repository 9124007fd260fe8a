"""Periodic schedules against real PostgreSQL: several schedulers make each tick exactly once,
the job of a tick is an ordinary job of the client ``jobrelay-scheduler``, a stretch nobody ran
makes only its latest tick, and (with the real dispatcher and consumer processes) a scheduled
job runs to ``succeeded`` while ``jobrelay schedules`` shows it."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest
from sqlalchemy import select

from jobrelay.core.jobs import Job
from jobrelay.core.registry import Registry
from jobrelay.core.schedules import SCHEDULER_CLIENT
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.db import tables
from jobrelay.db.engine import PoolMode
from jobrelay.db.schedule_store import ScheduleStore
from jobrelay.db.store import Store, job_from_row
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.dispatcher.scheduler import Scheduler, scheduler_config
from tests.support.schedules import HANDLERS, HEARTBEAT, with_builtins
from tests.support.system import System
from tests.support.waiting import eventually

EVERY_SECOND = "every-second"


def every_second() -> Registry:
    registry = with_builtins()
    registry.schedule(
        EVERY_SECOND, type="demo.sleep", payload={"seconds": 0}, every=1, max_attempts=4
    )
    return registry


async def scheduled_jobs(store: Store, name: str) -> list[Job]:
    """The jobs of schedule ``name``, by tick."""
    jobs = tables.jobs
    async with store.transaction() as connection:
        rows = (
            await connection.execute(
                select(jobs).where(jobs.c.idempotency_key.like(f"schedule:{name}:%"))
            )
        ).all()
    return sorted((job_from_row(row) for row in rows), key=lambda job: job.idempotency_key)


def ticks_of(jobs: list[Job], name: str) -> list[datetime]:
    return [
        datetime.fromisoformat(job.idempotency_key.removeprefix(f"schedule:{name}:"))
        for job in jobs
    ]


def made_by(scheduler: Scheduler, name: str) -> float:
    value: float = scheduler.metrics.scheduled.labels(schedule=name)._value.get()
    return value


@pytest.fixture
async def other_store(database_url: str, pool_mode: PoolMode) -> AsyncIterator[Store]:
    """A second process's connections to the same database."""
    store = Store.connect(database_url, pool_size=2, pool_mode=pool_mode)
    yield store
    await store.close()


def scheduler_on(store: Store, registry: Registry, settings: Settings) -> Scheduler:
    return Scheduler(
        ScheduleStore(store), registry, scheduler_config(settings), DispatcherMetrics()
    )


async def test_two_schedulers_make_each_tick_exactly_once(
    store: Store, other_store: Store, settings: Settings
) -> None:
    registry = every_second()
    schedulers = [
        scheduler_on(store, registry, settings),
        scheduler_on(other_store, registry, settings),
    ]
    stopping = asyncio.Event()
    running = [asyncio.create_task(scheduler.run(stopping)) for scheduler in schedulers]
    await asyncio.sleep(3.5)
    stopping.set()
    await asyncio.wait_for(asyncio.gather(*running), 5)

    jobs = await scheduled_jobs(store, EVERY_SECOND)
    ticks = ticks_of(jobs, EVERY_SECOND)
    assert 3 <= len(ticks) <= 5, ticks
    assert len(set(ticks)) == len(ticks)
    assert [b - a for a, b in itertools.pairwise(ticks)] == [timedelta(seconds=1)] * (
        len(ticks) - 1
    )
    # Each tick was made by one of them, whichever came first.
    assert sum(made_by(scheduler, EVERY_SECOND) for scheduler in schedulers) == len(ticks)


async def test_many_schedulers_at_the_same_instant_make_one_job(
    store: Store, settings: Settings
) -> None:
    registry = every_second()
    schedulers = [scheduler_on(store, registry, settings) for _ in range(8)]
    now = await ScheduleStore(store).now()
    await asyncio.gather(*(scheduler.run_once(now) for scheduler in schedulers))
    assert len(await scheduled_jobs(store, EVERY_SECOND)) == 1
    assert sum(made_by(scheduler, EVERY_SECOND) for scheduler in schedulers) == 1


async def test_the_job_of_a_tick_is_an_ordinary_queued_job_of_the_scheduler_client(
    store: Store, settings: Settings
) -> None:
    scheduler = scheduler_on(store, every_second(), settings)
    await scheduler.run_once()
    [job] = await scheduled_jobs(store, EVERY_SECOND)
    assert job.state is JobState.QUEUED
    assert (job.type, job.payload, job.attempts, job.max_attempts) == (
        "demo.sleep",
        {"seconds": 0},
        0,
        4,
    )
    assert job.client_id == await ScheduleStore(store).scheduler_client_id()
    trace = await store.trace(job.id)
    assert trace is not None
    assert trace.client_name == SCHEDULER_CLIENT
    assert [entry.event for entry in trace.events] == ["received"]
    assert [row.published_at for row in trace.outbox] == [None]  # the relay publishes it


async def test_a_missed_stretch_makes_only_its_latest_tick(
    store: Store, settings: Settings
) -> None:
    registry = every_second()
    started = await ScheduleStore(store).now()
    await scheduler_on(store, registry, settings).run_once(started)
    later = started + timedelta(seconds=10)
    # A dispatcher that starts again after ten seconds of nobody running.
    await scheduler_on(store, registry, settings).run_once(later)
    schedule = registry.schedules[EVERY_SECOND]
    ticks = ticks_of(await scheduled_jobs(store, EVERY_SECOND), EVERY_SECOND)
    assert ticks == [schedule.latest_tick(started), schedule.latest_tick(later)]


async def test_a_scheduled_job_runs_to_succeeded_through_the_real_system(system: System) -> None:
    system.configure(handlers=HANDLERS)

    async def a_scheduled_job_succeeded() -> bool:
        jobs = await scheduled_jobs(system.store, HEARTBEAT)
        return any(job.state is JobState.SUCCEEDED for job in jobs)

    with system.running("schedules"):
        await eventually(a_scheduled_job_succeeded, what="a heartbeat job succeeded")
        listing = system.cli_json("schedules")
    jobs = await scheduled_jobs(system.store, HEARTBEAT)
    ticks = ticks_of(jobs, HEARTBEAT)
    assert len(set(ticks)) == len(ticks)
    assert all(job.max_attempts == 2 for job in jobs)

    [shown] = listing["schedules"]
    assert (shown["name"], shown["type"], shown["every_seconds"], shown["cron"]) == (
        HEARTBEAT,
        "demo.sleep",
        1,
        None,
    )
    latest = datetime.fromisoformat(shown["latest_tick"])
    assert datetime.fromisoformat(shown["next_tick"]) == latest + timedelta(seconds=1)
    if shown["latest_job"] is not None:  # unless the listing fell just after a tick
        assert shown["latest_job"]["id"] in {str(job.id) for job in jobs}

    log = (system.log_dir / "schedules" / "dispatcher.log").read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    scheduled = [line for line in lines if line.get("event") == "scheduled"]
    assert scheduled and all(line["schedule"] == HEARTBEAT for line in scheduled)
    assert {line["job_id"] for line in scheduled} <= {str(job.id) for job in jobs}


async def test_jobrelay_schedules_without_schedules_and_with_wrong_registries(
    system: System,
) -> None:
    empty = system.cli("schedules")
    assert empty.returncode == 0, empty.stderr
    assert "no schedules" in empty.stdout
    assert system.cli_json("schedules")["schedules"] == []

    for handlers, told in [
        ("nowhere.at.all:registry", "cannot import handlers module 'nowhere.at.all'"),
        (f"{HANDLERS},tests.support.schedules:clashing", "'heartbeat' is declared twice"),
    ]:
        wrong = system.cli("schedules", "--handlers", handlers)
        assert wrong.returncode == 1
        assert wrong.stderr.startswith("jobrelay: ") and told in wrong.stderr
        assert len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
