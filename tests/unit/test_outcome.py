"""The outcome of an attempt is a pure decision; the retry delay grows, is capped and jittered."""

from __future__ import annotations

import random

import pytest

from jobrelay.core.errors import HandlerError, PermanentError, TransientError
from jobrelay.core.jobs import Quarantine, RetryLater, Succeeded, decide_outcome
from jobrelay.core.retry import RetryPolicy

POLICY = RetryPolicy(base_seconds=1.0, max_seconds=300.0)


def decide(attempt: int, error: BaseException | None, *, max_attempts: int = 3, result=None):  # type: ignore[no-untyped-def]
    return decide_outcome(
        attempt=attempt,
        max_attempts=max_attempts,
        result=result,
        error=error,
        policy=POLICY,
        rng=random.Random(7),
    )


def test_no_error_means_succeeded_with_the_result() -> None:
    assert decide(1, None, result={"key": "reports/x.csv"}) == Succeeded({"key": "reports/x.csv"})


def test_a_transient_error_with_attempts_left_retries_later_within_the_backoff() -> None:
    outcome = decide(1, TransientError("upstream 503"))
    assert isinstance(outcome, RetryLater)
    assert outcome.error_code == "transient_error" and outcome.error == "upstream 503"
    assert 0.5 <= outcome.delay_seconds <= 1


def test_an_unexpected_exception_is_transient_and_named_by_its_class_and_message() -> None:
    outcome = decide(2, ValueError("card declined, password=hunter2"))
    assert isinstance(outcome, RetryLater)
    assert outcome.error_code == "unexpected_error"
    assert outcome.error == "ValueError: card declined, password=***"
    assert outcome.failure is not None and outcome.failure.error_class == "ValueError"


def test_a_transient_error_on_the_last_attempt_quarantines_as_attempts_exhausted() -> None:
    outcome = decide(3, TransientError("still down"), max_attempts=3)
    assert isinstance(outcome, Quarantine)
    assert outcome.reason_code == "attempts_exhausted"
    assert "transient_error" in outcome.error and "still down" in outcome.error


def test_a_permanent_error_quarantines_at_once_with_its_code() -> None:
    outcome = decide(1, PermanentError("course does not exist", code="no_such_course"))
    assert isinstance(outcome, Quarantine)
    assert (outcome.reason_code, outcome.error) == ("no_such_course", "course does not exist")


def test_a_handler_error_with_a_custom_code_keeps_it() -> None:
    outcome = decide(1, HandlerError("rate limited", code="rate_limited"))
    assert isinstance(outcome, RetryLater) and outcome.error_code == "rate_limited"


def test_a_long_error_message_is_cut_to_2_kib() -> None:
    outcome = decide(1, PermanentError("é" * 5000))
    assert isinstance(outcome, Quarantine) and len(outcome.error.encode()) <= 2048


def test_the_decision_depends_only_on_its_inputs() -> None:
    error = TransientError("flaky")
    assert decide(1, error) == decide(1, error)


@pytest.mark.parametrize("attempt", range(1, 12))
def test_delays_stay_within_half_the_ceiling_and_the_ceiling(attempt: int) -> None:
    rng = random.Random(attempt)
    ceiling = POLICY.ceiling(attempt)
    for _ in range(200):
        assert ceiling / 2 <= POLICY.delay(attempt, rng) <= ceiling


def test_the_ceiling_doubles_per_attempt_until_the_cap() -> None:
    policy = RetryPolicy(base_seconds=0.5, max_seconds=10.0)
    assert [policy.ceiling(n) for n in range(1, 8)] == [0.5, 1, 2, 4, 8, 10, 10]


def test_delays_grow_from_one_attempt_to_the_next_whatever_the_jitter() -> None:
    # Attempt n draws from [c/2, c] and attempt n+1 from [c, 2c]: never shorter than before.
    rng = random.Random(1)
    for _ in range(500):
        delays = [POLICY.delay(n, rng) for n in range(1, 8)]
        assert delays == sorted(delays)


def test_jitter_spreads_a_burst_of_failures() -> None:
    rng = random.Random(3)
    delays = {round(POLICY.delay(5, rng), 6) for _ in range(100)}
    assert len(delays) > 90


def test_a_zero_base_retries_at_once() -> None:
    assert RetryPolicy(base_seconds=0, max_seconds=10).delay(4) == 0
