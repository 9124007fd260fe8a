"""Flow control's values (core/flow.py) and the registry's flow options (core/registry.py)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from jobrelay.core.bounds import FLOW_KEY_MAX, PRIORITY_MAX, PRIORITY_MIN
from jobrelay.core.flow import Limit, LimitInForce, Rate, limit_key, parse_rate
from jobrelay.core.registry import Registry


class Payload(BaseModel):
    account: str = "a"


def handler(context: Any, payload: Any) -> dict[str, Any]:
    return {}


def test_the_bounds_are_those_of_the_spec() -> None:
    assert (PRIORITY_MIN, PRIORITY_MAX, FLOW_KEY_MAX) == (-100, 100, 200)


@pytest.mark.parametrize(
    ("text", "rate", "interval"),
    [("10/s", Rate(10, 1), 0.1), ("600/m", Rate(600, 60), 0.1), ("1/m", Rate(1, 60), 60.0)],
)
def test_a_rate_parses_prints_back_and_spaces_its_starts(
    text: str, rate: Rate, interval: float
) -> None:
    assert parse_rate(text) == rate
    assert str(rate) == text
    assert rate.interval == pytest.approx(interval)


@pytest.mark.parametrize("text", ["", "10", "0/s", "-1/s", "10/h", "1.5/s", "ten/s", "²/s", "/s"])
def test_a_rate_that_does_not_parse_is_a_one_line_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_rate(text)
    message = str(raised.value)
    assert "\n" not in message
    assert repr(text) in message


def test_a_rate_cannot_be_built_from_nonsense() -> None:
    with pytest.raises(ValueError):
        Rate(0, 1)
    with pytest.raises(ValueError):
        Rate(5, 3600)
    with pytest.raises(ValueError):
        Limit(concurrency=0)


def test_the_limit_key_is_the_jobs_key_only_per_key() -> None:
    per_key = Limit(concurrency=1, per_key=True)
    total = Limit(concurrency=1)
    assert limit_key(per_key, "acct-1") == "acct-1"
    assert limit_key(per_key, None) == ""
    assert limit_key(total, "acct-1") == ""
    assert LimitInForce("t", total, "code").source == "code"


def test_a_type_without_flow_options_has_none() -> None:
    registry = Registry()
    registry.job("plain", Payload)(handler)
    job_type = registry.get("plain")
    assert (job_type.priority, job_type.limit) == (0, None)
    assert job_type.concurrency_key is None and job_type.unique is None


def test_the_registry_keeps_a_types_flow_options() -> None:
    registry = Registry()

    def account(payload: dict[str, Any]) -> str:
        return str(payload["account"])

    registry.job(
        "pay",
        Payload,
        priority=50,
        concurrency=2,
        concurrency_key=account,
        rate="10/s",
        per_key=True,
    )(handler)
    registry.job("sync", Payload, rate="600/m", unique=account)(handler)
    registry.job("keyed", Payload, concurrency=3, concurrency_key=account, per_key=False)(handler)
    registry.job("per_account", Payload, concurrency=1, concurrency_key=account)(handler)
    registry.job("provider", Payload, rate="10/s", concurrency_key=account)(handler)
    pay, sync, keyed = registry.get("pay"), registry.get("sync"), registry.get("keyed")
    assert pay.limit == Limit(concurrency=2, rate=Rate(10, 1), per_key=True)
    assert pay.priority == 50 and pay.concurrency_key is account
    assert sync.limit == Limit(rate=Rate(600, 60), per_key=False)
    assert sync.unique is account
    assert keyed.limit == Limit(concurrency=3, per_key=False)
    # Unless it is said, a concurrency is per key with a concurrency_key, a rate never.
    assert registry.get("per_account").limit == Limit(concurrency=1, per_key=True)
    assert registry.get("provider").limit == Limit(rate=Rate(10, 1), per_key=False)


def test_a_per_key_concurrency_beside_a_total_rate_must_say_per_key() -> None:
    """The one case where the two defaults disagree is refused, not guessed."""
    registry = Registry()
    with pytest.raises(ValueError, match=r"say per_key=True .* or per_key=False"):
        registry.job(
            "shop.pay", Payload, concurrency=2, concurrency_key=lambda p: "k", rate="10/s"
        )(handler)


@pytest.mark.parametrize(
    ("options", "words"),
    [
        ({"priority": 101}, "priority must be from -100 to 100"),
        ({"priority": -101}, "priority must be from -100 to 100"),
        ({"priority": 1.5}, "priority must be a whole number"),
        ({"priority": True}, "priority must be a whole number"),
        ({"concurrency": 0}, "concurrency must be a whole number of at least 1"),
        ({"concurrency": "2"}, "concurrency must be a whole number of at least 1"),
        ({"rate": "10/hour"}, "invalid rate '10/hour'"),
        ({"rate": 10}, "rate must be a text"),
        ({"per_key": True}, "per_key needs a concurrency or a rate"),
        ({"unique": "order_id"}, "unique must be a function of the payload"),
        ({"concurrency_key": 3}, "concurrency_key must be a function of the payload"),
    ],
)
def test_a_bad_flow_option_raises_at_registration_naming_the_type(
    options: dict[str, Any], words: str
) -> None:
    registry = Registry()
    with pytest.raises(ValueError) as raised:
        registry.job("shop.pay", Payload, **options)
    assert words in str(raised.value)
    assert "'shop.pay'" in str(raised.value)
    assert "shop.pay" not in registry
