"""Periodic schedules without servers: where ticks fall (every and cron, in UTC, at the edge of
a tick), the idempotency keys of ticks, the mistakes a declaration can make, loading schedules
with their registries, and the scheduler's rounds over an in-memory store."""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from jobrelay.core.errors import ConfigurationError, StoreUnavailable
from jobrelay.core.jobs import JobRequest, is_valid_idempotency_key
from jobrelay.core.registry import Registry
from jobrelay.core.schedules import EPOCH, MadeJob, Schedule
from jobrelay.core.settings import Settings
from jobrelay.dispatcher.metrics import DispatcherMetrics
from jobrelay.dispatcher.scheduler import (
    Scheduler,
    SchedulerClientMissing,
    SchedulerConfig,
    scheduler_config,
)
from jobrelay.handlers.loading import load_registry
from tests.support.schedules import HANDLERS, HEARTBEAT


def at(text: str) -> datetime:
    """An aware UTC time from ``2026-03-01T10:00:00`` (microseconds allowed)."""
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def every(seconds: int) -> Schedule:
    return Schedule("s", "t", every=seconds)


def cron(expression: str) -> Schedule:
    return Schedule("s", "t", cron=expression)


# --- every: multiples of the period since the epoch -------------------------------------------


@pytest.mark.parametrize(
    ("now", "latest", "following"),
    [
        ("2026-03-01T10:00:30", "2026-03-01T10:00:00", "2026-03-01T10:01:00"),
        ("2026-03-01T10:00:00", "2026-03-01T10:00:00", "2026-03-01T10:01:00"),
        ("2026-03-01T09:59:59.999999", "2026-03-01T09:59:00", "2026-03-01T10:00:00"),
        ("2026-03-01T10:00:00.000001", "2026-03-01T10:00:00", "2026-03-01T10:01:00"),
    ],
)
def test_every_ticks_fall_on_whole_periods_and_a_tick_is_its_own_latest(
    now: str, latest: str, following: str
) -> None:
    schedule = every(60)
    assert schedule.latest_tick(at(now)) == at(latest)
    assert schedule.next_tick(at(now)) == at(following)


def test_every_ticks_are_multiples_of_the_period_since_the_unix_epoch() -> None:
    schedule = every(7)
    now = at("2026-03-01T10:00:00.5")
    latest = schedule.latest_tick(now)
    assert (latest - EPOCH).total_seconds() % 7 == 0
    assert latest <= now < latest + timedelta(seconds=7)
    assert schedule.next_tick(now) == latest + timedelta(seconds=7)


def test_a_daily_every_ticks_at_midnight_utc_whatever_the_zone_of_the_clock() -> None:
    schedule = every(86400)
    paris = timezone(timedelta(hours=2))
    now = datetime(2026, 7, 1, 1, 30, tzinfo=paris)  # 2026-06-30T23:30Z
    assert schedule.latest_tick(now) == at("2026-06-30T00:00:00")
    assert schedule.next_tick(now) == at("2026-07-01T00:00:00")
    assert schedule.latest_tick(now).utcoffset() == timedelta(0)


def test_every_accepts_a_timedelta_of_whole_seconds() -> None:
    schedule = registry_with_report().schedule(
        "quarterly-hour", type="report", payload={"course": "a"}, every=timedelta(minutes=15)
    )
    assert schedule.every == 900


def test_a_naive_clock_is_refused() -> None:
    with pytest.raises(ValueError, match="aware"):
        every(60).latest_tick(datetime(2026, 3, 1, 10, 0))


# --- cron: five fields, in UTC ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "latest", "following"),
    [
        ("2026-03-01T10:07:59", "2026-03-01T10:00:00", "2026-03-01T10:15:00"),
        ("2026-03-01T10:15:00", "2026-03-01T10:15:00", "2026-03-01T10:30:00"),
        ("2026-03-01T10:14:59.999999", "2026-03-01T10:00:00", "2026-03-01T10:15:00"),
        ("2026-03-01T10:15:00.000001", "2026-03-01T10:15:00", "2026-03-01T10:30:00"),
        ("2026-03-01T23:59:30", "2026-03-01T23:45:00", "2026-03-02T00:00:00"),
    ],
)
def test_cron_ticks_at_the_edge_of_a_tick(now: str, latest: str, following: str) -> None:
    schedule = cron("*/15 * * * *")
    assert schedule.latest_tick(at(now)) == at(latest)
    assert schedule.next_tick(at(now)) == at(following)


def test_cron_is_read_in_utc_so_a_daylight_saving_change_moves_nothing() -> None:
    schedule = cron("30 2 * * *")  # 02:30 does not exist in Paris on 2026-03-29
    ticks = [schedule.next_tick(at("2026-03-27T12:00:00"))]
    for _ in range(3):
        ticks.append(schedule.next_tick(ticks[-1]))
    assert ticks[0] == at("2026-03-28T02:30:00")
    assert [b - a for a, b in itertools.pairwise(ticks)] == [timedelta(days=1)] * 3


def test_cron_weekdays_skip_the_weekend() -> None:
    schedule = cron("0 9 * * mon-fri")
    friday_evening = at("2026-03-06T18:00:00")  # a Friday
    assert schedule.latest_tick(friday_evening) == at("2026-03-06T09:00:00")
    assert schedule.next_tick(friday_evening) == at("2026-03-09T09:00:00")  # Monday
    assert schedule.latest_tick(at("2026-03-08T12:00:00")) == at("2026-03-06T09:00:00")


def test_cron_from_a_clock_in_another_zone_gives_utc_ticks() -> None:
    schedule = cron("0 * * * *")
    tokyo = timezone(timedelta(hours=9))
    now = datetime(2026, 3, 1, 19, 30, tzinfo=tokyo)  # 10:30Z
    assert schedule.latest_tick(now) == at("2026-03-01T10:00:00")
    assert schedule.next_tick(now) == at("2026-03-01T11:00:00")


def test_cron_fields_are_normalized_to_single_spaces() -> None:
    assert cron("  0   3 * *  * ").cron == "0 3 * * *"


# --- keys -------------------------------------------------------------------------------------


def test_the_key_of_a_tick_names_the_schedule_and_the_tick_in_utc_iso_8601() -> None:
    schedule = Schedule("nightly-report", "t", cron="0 3 * * *")
    tick = schedule.latest_tick(at("2026-03-01T10:00:00"))
    assert schedule.key(tick) == "schedule:nightly-report:2026-03-01T03:00:00+00:00"
    assert schedule.key(tick).startswith(schedule.key_prefix)
    plus_one = timezone(timedelta(hours=1))
    assert schedule.key(tick.astimezone(plus_one)) == schedule.key(tick)


def test_the_longest_name_still_makes_a_valid_idempotency_key() -> None:
    schedule = Schedule("n" * 100, "t", every=1)
    assert is_valid_idempotency_key(schedule.key(schedule.latest_tick(at("2026-12-31T23:59:59"))))


# --- declaring: the mistakes -------------------------------------------------------------------


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")
    course: str


def registry_with_report() -> Registry:
    registry = Registry()
    registry.job("report", Report, max_attempts=5)(lambda context, payload: {})
    return registry


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"name": ""}, "non-empty string"),
        ({"name": "a:b"}, "without ':'"),
        ({"name": "has space"}, "visible ASCII"),
        ({"name": "é"}, "visible ASCII"),
        ({"name": "x" * 101}, "longer than 100"),
        ({"every": 60, "cron": "* * * * *"}, "exactly one of every"),
        ({"every": None}, "exactly one of every"),
        ({"every": 0}, "at least 1 second"),
        ({"every": -5}, "at least 1 second"),
        ({"every": 1.5}, "whole number of seconds"),
        ({"every": True}, "whole number of seconds"),
        ({"every": timedelta(seconds=1.5)}, "whole number of seconds"),
        ({"every": None, "cron": "* * * *"}, "must have 5 fields"),
        ({"every": None, "cron": "0 0 * * * *"}, "must have 5 fields"),
        ({"every": None, "cron": "@hourly"}, "must have 5 fields"),
        ({"every": None, "cron": "61 * * * *"}, "not a valid expression"),
        ({"every": None, "cron": "*/0 * * * *"}, "not a valid expression"),
        ({"every": None, "cron": "0 0 30 2 *"}, "never matches"),
        ({"type": "nope"}, "unknown job type 'nope'"),
        ({"payload": {"course": 7}}, "does not match the schema of 'report': course"),
        ({"payload": {"course": "x", "extra": 1}}, "does not match the schema"),
        ({"payload": ["course"]}, "must be a JSON object"),
        ({"payload": {"course": "x", "when": datetime(2026, 1, 1)}}, "plain JSON"),
        ({"payload": {"course": float("nan")}}, "plain JSON"),
        ({"max_attempts": 0}, "max_attempts must be an int from 1 to 100"),
        ({"max_attempts": 101}, "max_attempts must be an int from 1 to 100"),
    ],
)
def test_a_wrong_declaration_is_a_value_error_naming_the_schedule(
    arguments: dict[str, Any], message: str
) -> None:
    declared: dict[str, Any] = {
        "name": "nightly",
        "type": "report",
        "payload": {"course": "JavaScript"},
        "every": 60,
    } | arguments
    name = declared.pop("name")
    with pytest.raises(ValueError, match=message) as raised:
        registry_with_report().schedule(name, **declared)
    assert str(raised.value).startswith("schedule")
    if name == "nightly":
        assert str(raised.value).startswith("schedule 'nightly': ")


def test_a_schedule_is_declared_once() -> None:
    registry = registry_with_report()
    registry.schedule("nightly", type="report", payload={"course": "a"}, cron="0 3 * * *")
    with pytest.raises(ValueError, match="'nightly' is declared twice"):
        registry.schedule("nightly", type="report", payload={"course": "b"}, every=60)


def test_a_payload_may_be_the_types_model_and_is_copied() -> None:
    registry = registry_with_report()
    payload = {"course": "Go"}
    by_dict = registry.schedule("a", type="report", payload=payload, every=60)
    payload["course"] = "changed later"
    by_model = registry.schedule("b", type="report", payload=Report(course="Go"), every=60)
    assert by_dict.payload == by_model.payload == {"course": "Go"}


def test_loading_registries_carries_their_schedules() -> None:
    registry = load_registry(HANDLERS)
    assert registry.schedules[HEARTBEAT].type == "demo.sleep"
    twice = load_registry(f"{HANDLERS},{HANDLERS}")  # the same declaration reached twice
    assert list(twice.schedules) == [HEARTBEAT]


def test_two_registries_declaring_one_schedule_name_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigurationError, match="'heartbeat' is declared twice") as raised:
        load_registry(f"{HANDLERS},tests.support.schedules:clashing")
    assert HANDLERS in str(raised.value)
    assert "tests.support.schedules:clashing" in str(raised.value)


def test_a_module_declaring_a_wrong_schedule_is_a_configuration_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "wrong_schedules.py").write_text(
        "from jobrelay import Registry\n"
        "registry = Registry()\n"
        "registry.schedule('nightly', type='nope', every=60)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError, match="'wrong_schedules': schedule 'nightly': unknown"):
        load_registry("wrong_schedules:registry")


# --- the scheduler's rounds, over an in-memory store ----------------------------------------


class FakeScheduleStore:
    """The scheduler's side of the database in memory: jobs by idempotency key."""

    def __init__(self, now: datetime) -> None:
        self.clock = now
        self.client_id: uuid.UUID | None = uuid.uuid4()
        self.jobs: dict[str, tuple[uuid.UUID, JobRequest]] = {}
        self.down = False
        self.client_lookups = 0

    async def scheduler_client_id(self) -> uuid.UUID | None:
        self.client_lookups += 1
        return self.client_id

    async def now(self) -> datetime:
        if self.down:
            raise StoreUnavailable("the database is down")
        return self.clock

    async def make_job(self, client_id: uuid.UUID, request: JobRequest) -> MadeJob:
        if self.down:
            raise StoreUnavailable("the database is down")
        assert client_id == self.client_id
        known = self.jobs.get(request.idempotency_key)
        if known is not None:
            conflict = (known[1].type, known[1].payload) != (request.type, request.payload)
            return MadeJob(known[0], created=False, conflict=conflict)
        job_id = uuid.uuid4()
        self.jobs[request.idempotency_key] = (job_id, request)
        return MadeJob(job_id, created=True)

    def ticks(self, name: str) -> list[str]:
        prefix = f"schedule:{name}:"
        return sorted(key.removeprefix(prefix) for key in self.jobs if key.startswith(prefix))


def scheduling_registry() -> Registry:
    registry = registry_with_report()
    registry.schedule("minutely", type="report", payload={"course": "a"}, every=60)
    registry.schedule("hourly", type="report", payload={"course": "b"}, cron="0 * * * *")
    return registry


def scheduler(
    store: FakeScheduleStore, registry: Registry | None = None, **config: Any
) -> Scheduler:
    return Scheduler(
        store,
        registry or scheduling_registry(),
        SchedulerConfig(**config),
        DispatcherMetrics(),
    )


async def test_a_round_makes_the_latest_tick_of_each_schedule_once() -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    first = scheduler(store)
    until_next = await first.run_once()
    assert store.ticks("minutely") == ["2026-03-01T10:30:00+00:00"]
    assert store.ticks("hourly") == ["2026-03-01T10:00:00+00:00"]
    assert until_next == 40.0  # to 10:31:00
    await first.run_once()
    assert len(store.jobs) == 2
    assert store.client_lookups == 1  # read once, then cached


async def test_two_schedulers_make_each_tick_once() -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    one, other = scheduler(store), scheduler(store)
    for _ in range(3):
        await one.run_once()
        await other.run_once()
        store.clock += timedelta(minutes=1)
    assert store.ticks("minutely") == [f"2026-03-01T10:3{m}:00+00:00" for m in range(3)]
    made = [s.metrics.scheduled.labels(schedule="minutely")._value.get() for s in (one, other)]
    assert sum(made) == 3


async def test_ticks_missed_while_nothing_ran_are_not_replayed() -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    await scheduler(store).run_once()
    store.clock = at("2026-03-01T12:45:10")
    await scheduler(store).run_once()  # a dispatcher started after a long stop
    assert store.ticks("minutely") == ["2026-03-01T10:30:00+00:00", "2026-03-01T12:45:00+00:00"]
    assert store.ticks("hourly") == ["2026-03-01T10:00:00+00:00", "2026-03-01T12:00:00+00:00"]


async def test_a_tick_older_than_retention_is_not_made() -> None:
    registry = registry_with_report()
    registry.schedule("monthly", type="report", payload={"course": "a"}, cron="0 0 1 * *")
    store = FakeScheduleStore(at("2026-03-20T10:00:00"))
    await scheduler(store, registry, horizon_seconds=7 * 86400).run_once()
    assert store.jobs == {}
    store.clock = at("2026-04-03T00:00:00")
    await scheduler(store, registry, horizon_seconds=7 * 86400).run_once()
    assert store.ticks("monthly") == ["2026-04-01T00:00:00+00:00"]


def test_the_horizon_is_the_shortest_retention_of_a_finished_job() -> None:
    assert scheduler_config(Settings(retention_hours=48)).horizon_seconds == 48 * 3600
    both = Settings(retention_hours=48, quarantine_retention_hours=24, max_attempts=7)
    assert scheduler_config(both).horizon_seconds == 24 * 3600
    assert scheduler_config(both).default_max_attempts == 7


async def test_the_job_of_a_tick_is_the_schedules_type_payload_and_attempt_budget() -> None:
    registry = registry_with_report()  # the type allows 5 attempts
    registry.schedule("own", type="report", payload={"course": "a"}, every=60, max_attempts=2)
    registry.schedule("types", type="report", payload={"course": "b"}, every=60)
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    await scheduler(store, registry, default_max_attempts=3).run_once()
    requests = {key.split(":")[1]: request for key, (_, request) in store.jobs.items()}
    assert requests["own"].max_attempts == 2
    assert requests["types"].max_attempts == 5
    assert requests["own"] == JobRequest(
        "schedule:own:2026-03-01T10:30:00+00:00", "report", {"course": "a"}, 2
    )


async def test_a_round_in_an_outage_raises_and_the_next_one_makes_the_tick() -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    rounds = scheduler(store)
    store.down = True
    with pytest.raises(StoreUnavailable):
        await rounds.run_once()
    store.down = False
    await rounds.run_once()
    assert store.ticks("minutely") == ["2026-03-01T10:30:00+00:00"]


async def test_a_missing_scheduler_client_is_waited_out_like_an_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    store.client_id = None
    rounds = scheduler(store)
    with pytest.raises(SchedulerClientMissing, match="run jobrelay migrate"):
        await rounds.run_once()
    with caplog.at_level(logging.WARNING):
        delay = await rounds._round()
    assert 0 < delay <= rounds.config.outage_max_seconds
    assert "jobrelay-scheduler" in caplog.text


async def test_the_loop_sleeps_until_the_next_tick_and_stops_when_asked() -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:59.9"))
    rounds = scheduler(store)
    assert await rounds._round() == pytest.approx(0.1 + rounds.config.wake_margin_seconds)
    store.clock = at("2026-03-01T10:31:00.01")
    assert await rounds._round() == rounds.config.max_sleep_seconds  # 59.99 s, capped
    stopping = asyncio.Event()
    stopping.set()
    await asyncio.wait_for(rounds.run(stopping), 1)


async def test_a_changed_payload_finds_the_old_job_of_the_tick_and_makes_no_other(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    await scheduler(store).run_once()
    changed = registry_with_report()
    changed.schedule("minutely", type="report", payload={"course": "new"}, every=60)
    with caplog.at_level(logging.WARNING):
        await scheduler(store, changed).run_once()
    assert store.ticks("minutely") == ["2026-03-01T10:30:00+00:00"]
    assert "another type or payload" in caplog.text


async def test_a_registry_without_schedules_runs_no_loop() -> None:
    store = FakeScheduleStore(at("2026-03-01T10:30:20"))
    rounds = scheduler(store, registry_with_report())
    assert await rounds.run_once() is None
    await asyncio.wait_for(rounds.run(asyncio.Event()), 1)  # returns at once
    assert store.client_lookups == 0


def test_jobrelay_schedules_shows_a_row_a_schedule_with_its_job_or_not_made() -> None:
    from jobrelay.cli.schedules import render_schedules

    row = {
        "name": "heartbeat",
        "type": "demo.sleep",
        "every_seconds": 1,
        "cron": None,
        "latest_tick": "2026-03-01T10:00:00+00:00",
        "latest_job": {"id": "0190aa", "state": "succeeded"},
        "next_tick": "2026-03-01T10:00:01+00:00",
    }
    nightly = row | {
        "name": "nightly",
        "every_seconds": None,
        "cron": "0 3 * * *",
        "latest_job": None,
    }
    text = render_schedules({"now": "2026-03-01T10:00:00.5+00:00", "schedules": [row, nightly]})
    header, first, second = text.splitlines()[1:]
    assert header.split() == [
        "NAME",
        "TYPE",
        "WHEN",
        "LATEST",
        "TICK",
        "ITS",
        "JOB",
        "NEXT",
        "TICK",
    ]
    assert "every 1s" in first and "0190aa succeeded" in first
    assert "cron 0 3 * * *" in second and "not made" in second
    assert first.index("2026-03-01T10:00:01") == second.index("2026-03-01T10:00:01")
