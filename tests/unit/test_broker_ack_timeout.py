"""What the consumer learns from the broker's reason for closing its channel, and the early-ack
time it takes from then on (consumer/early_ack.py; the broker itself: test_long_jobs.py)."""

from __future__ import annotations

from jobrelay.consumer.early_ack import ACK_AT_ONCE_SECONDS, broker_ack_timeout, early_ack_within

# RabbitMQ 3.10.8's words, as aiormq shows them.
TIMED_OUT = (
    "The client requested a method that was not allowed because some precondition failed: "
    "'PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value "
    "used: 5000 ms. This timeout value can be configured, see consumers doc guide to learn more'"
)


def test_the_broker_s_timeout_is_read_from_its_reason() -> None:
    assert broker_ack_timeout(TIMED_OUT) == 5.0


def test_a_reason_without_the_value_means_ack_at_once() -> None:
    older = "PRECONDITION_FAILED - delivery acknowledgement on channel 7 timed out"
    assert broker_ack_timeout(older) == ACK_AT_ONCE_SECONDS


def test_any_other_close_changes_nothing() -> None:
    assert broker_ack_timeout("NOT_FOUND - no queue 'jobrelay.work.default'") is None
    assert broker_ack_timeout("CancelledError()") is None


def test_the_early_ack_comes_within_half_the_broker_s_timeout() -> None:
    assert early_ack_within(900.0, 5.0) == 2.5
    assert early_ack_within(1.0, 5.0) == 1.0  # sooner already: kept
    assert early_ack_within(0.0, 1800.0) == 900.0  # "never early" would close it every time
