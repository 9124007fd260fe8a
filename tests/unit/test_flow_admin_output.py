"""What the operators' side of flow control shows, from its values (pure: no servers): the
queues' table and its unknown broker figures, the limits' lines, the stats' paused queues, and
a runtime limit checked once for the API, the CLI and the console (issue 25, items 4, 5, 7)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from jobrelay.cli.queues import UNREACHABLE, render_queues
from jobrelay.cli.stats import render_stats
from jobrelay.core.flow import Limit, LimitInForce, Rate, Throttle
from jobrelay.core.queues import QueuesReport, QueueState
from jobrelay.core.relay import QueueDepth
from jobrelay.core.runtime_limits import (
    check_throttle,
    limit_document,
    limit_line,
    runtime_limit,
    throttle_only,
)
from jobrelay.core.stats import OutboxBacklog, PausedQueue, RetryingSummary, SystemStats

SINCE = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
STATES = [
    QueueState("bulk", SINCE, "ops", backlog=5000, running=2),
    QueueState("default", None, None, backlog=3, running=1),
]


def test_the_queues_table_has_a_line_per_queue_with_the_brokers_figures() -> None:
    report = QueuesReport(STATES, {"bulk": QueueDepth(0, 2), "default": QueueDepth(40, 3)})
    lines = render_queues(report.as_document()).splitlines()
    assert lines[0].split() == ["NAME", "STATE", "BACKLOG", "WINDOW", "RUNNING", "CONSUMERS"]
    assert lines[1].split()[:2] == ["bulk", "paused"] and "by ops" in lines[1]
    assert lines[1].split()[-4:] == ["5000", "0", "2", "2"]
    assert lines[2].split() == ["default", "running", "3", "40", "1", "3"]
    assert len(lines) == 3


def test_without_the_broker_its_figures_are_unknown_and_the_table_says_so() -> None:
    document = QueuesReport(STATES, None).as_document()
    assert document["broker"] == "unavailable"
    assert [q["window_in_use"] for q in document["queues"]] == [None, None]
    lines = render_queues(document).splitlines()
    assert lines[2].split() == ["default", "running", "3", "-", "1", "-"]
    assert lines[-1] == UNREACHABLE


def test_a_limit_in_force_is_shown_with_its_source() -> None:
    code = LimitInForce("pay.charge", Limit(2, Rate(10, 1), per_key=True), "code")
    lifted = LimitInForce("mail.send", Limit(), "runtime")
    assert limit_document(code) == {
        "type": "pay.charge",
        "concurrency": 2,
        "rate": "10/s",
        "per_key": True,
        "source": "code",
        "throttle": None,
    }
    assert limit_line(code) == "pay.charge  concurrency=2 rate=10/s per key  (code)"
    assert limit_line(lifted) == "mail.send  no limit  (runtime)"


def test_a_throttle_in_force_is_shown_beside_the_limit() -> None:
    throttled = LimitInForce("mail.send", Limit(concurrency=4), "runtime", Throttle(5, 60))
    assert limit_document(throttled)["throttle"] == "5/m"
    assert limit_line(throttled) == "mail.send  concurrency=4 throttle=5/m  (runtime)"


@pytest.mark.parametrize(
    ("concurrency", "rate", "per_key", "says"),
    [
        (0, None, False, "a concurrency limit is from 1 to 100,000, not 0"),
        (100_001, None, False, "a concurrency limit is from 1 to 100,000"),
        (None, "10/h", False, "invalid rate '10/h'"),
        (None, "2000000/s", False, "at most 1,000,000 per period"),
        (None, None, True, "per_key needs a concurrency or a rate"),
    ],
)
def test_a_runtime_limit_that_is_not_one_is_a_one_line_value_error(
    concurrency: int | None, rate: str | None, per_key: bool, says: str
) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(")) as raised:
        runtime_limit(concurrency, rate, per_key)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("5/d", "invalid throttle '5/d': write N/s or N/m or N/h"),
        ("0/m", "invalid throttle '0/m'"),
        ("-1/s", "invalid throttle '-1/s'"),
        ("five/m", "invalid throttle 'five/m'"),
        ("5", "invalid throttle '5'"),
        ("2000000/h", "at most 1,000,000 per period"),
    ],
)
def test_a_runtime_throttle_that_is_not_one_is_a_one_line_value_error(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as raised:
        check_throttle(text)
    assert "\n" not in str(raised.value)


def test_a_runtime_throttle_is_the_throttle_it_names_and_alone_keeps_the_limit() -> None:
    assert check_throttle(" 5/m ") == Throttle(5, 60)
    assert check_throttle("1000/h") == Throttle(1000, 3600)
    assert check_throttle("3/s") == Throttle(3, 1)
    assert check_throttle(None) is None
    assert throttle_only(Limit(), Throttle(5, 60))
    assert not throttle_only(Limit(), None)
    assert not throttle_only(Limit(concurrency=1), Throttle(5, 60))
    assert not throttle_only(Limit(per_key=True), Throttle(5, 60))


def test_a_runtime_limit_is_the_limit_it_names() -> None:
    assert runtime_limit(3, "600/m", True) == Limit(3, Rate(600, 60), per_key=True)
    assert runtime_limit(None, None, False) == Limit()


def test_stats_name_the_paused_queues() -> None:
    stats = SystemStats(
        jobs_by_state={},
        outbox=OutboxBacklog(unpublished=0, due=0, oldest_due_age_seconds=None),
        expired_leases=0,
        retrying=RetryingSummary(count=0, next_due_at=None),
        quarantined_by_code={},
        failed_by_code={},
        published_never_claimed=0,
        published_never_claimed_after_seconds=300.0,
        redispatched_last_hour=0,
        paused_queues=[PausedQueue("bulk", SINCE, "ops")],
    )
    document = stats.as_document()
    assert document["paused_queues"] == [{"name": "bulk", "since": SINCE.isoformat(), "by": "ops"}]
    assert f"paused       bulk (since {SINCE.isoformat()} by ops)" in render_stats(document)
    nothing = SystemStats(**{**stats.__dict__, "paused_queues": []})
    assert "paused       -" in render_stats(nothing.as_document()).splitlines()
