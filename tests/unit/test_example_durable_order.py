"""The durable order example (``examples/durable_order``, docs/durable-execution.md's worked
example) tested as its guide says to, with the testing kit: in memory, the day's sleep and the
warehouse's three days fast-forwarded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobrelay.core.states import JobState
from jobrelay.testing import ChildEnd, Signal, make_context, run_durable, run_job
from jobrelay.testing.durable import FakeClock, InMemoryDurableStore

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "durable_order"
ORDER = {"order_id": "A-1", "amount_cents": 1250, "email": "ann@shop.test"}


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    import durable_order.jobs

    yield durable_order.jobs


@pytest.fixture
def charges(jobs: ModuleType, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every call of the payment provider's charge, by order."""
    calls: list[str] = []
    real = jobs.charge_card

    def counted(order_id: str, amount_cents: int, key: str) -> dict[str, Any]:
        calls.append(order_id)
        return dict(real(order_id, amount_cents, key))

    monkeypatch.setattr(jobs, "charge_card", counted)
    return calls


def test_an_order_is_charged_once_shipped_confirmed_and_followed_up_a_day_later(
    jobs: ModuleType, charges: list[str]
) -> None:
    life = run_durable(
        jobs.fulfil, ORDER, signals={"warehouse": {"parcel": "P-1"}}, children=jobs.registry
    )
    assert life.succeeded and life.result is not None
    assert life.result["status"] == "done" and life.result["parcel"] == {"parcel": "P-1"}
    assert life.result["follow_up"]["message_id"].startswith("how-was-it-jobrelay:")
    assert charges == ["A-1"]  # three attempts, one charge
    assert list(life.steps) == [
        "charge",
        "signal:warehouse",
        "confirm",
        "sleep",
        "child:orders.mail",
    ]
    day = life.sleeps[0]
    assert day.wake_at is not None and day.wake_at - day.at == timedelta(days=1)
    (follow_up,) = life.children
    assert (follow_up.type, follow_up.state) == ("orders.mail", JobState.SUCCEEDED)


def test_an_order_the_warehouse_never_ships_is_refunded_after_three_days(
    jobs: ModuleType, charges: list[str]
) -> None:
    store = InMemoryDurableStore(clock=FakeClock())
    started = store.clock.now()
    life = run_durable(jobs.fulfil, ORDER, store=store)
    assert life.succeeded and life.result is not None and life.result["status"] == "refunded"
    assert "confirm" not in life.steps and charges == ["A-1"]
    assert life.now - started == timedelta(days=3)


def test_the_warehouse_signal_sent_during_the_wait_wakes_the_order(jobs: ModuleType) -> None:
    life = run_durable(
        jobs.fulfil,
        ORDER,
        signals=[Signal("warehouse", {"parcel": "P-2"}, after=2 * 3600)],
        children={"orders.mail": {"message_id": "stub"}},
    )
    assert life.succeeded and life.result is not None
    assert life.result["parcel"] == {"parcel": "P-2"}
    assert life.sleeps[0].waiting_for == {"signal": "warehouse"}
    assert life.signals[0].taken_by == "signal:warehouse"


def test_a_follow_up_that_bounces_fails_the_order_with_child_failed(jobs: ModuleType) -> None:
    life = run_durable(
        jobs.fulfil,
        ORDER,
        signals={"warehouse": "P-3"},
        children={"orders.mail": ChildEnd("quarantined", "bounced")},
    )
    assert life.quarantined and life.error_code == "child_failed"


def test_a_later_attempt_goes_on_from_the_first_without_charging_again(
    jobs: ModuleType, charges: list[str]
) -> None:
    store = InMemoryDurableStore()
    first = run_job(jobs.fulfil, ORDER, context=make_context(jobs.fulfil, store=store))
    assert first.sleeping and first.waiting_for == {"signal": "warehouse"}
    job_id = first.context.job_id
    assert store.send_signal(job_id, "warehouse", "P-4") == "sent"
    life = run_durable(
        jobs.fulfil, ORDER, store=store, job_id=job_id, children={"orders.mail": {"id": 1}}
    )
    assert life.succeeded and charges == ["A-1"]
