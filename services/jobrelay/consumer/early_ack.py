"""A long job's message acked before its outcome (docs/long-jobs.md).

RabbitMQ closes a consumer's whole channel when one of its deliveries stays unacked past the
broker's ``consumer_timeout`` (30 minutes by default, node-wide on 3.10): every other delivery of
the channel goes back and the long job's own ack fails. Once the claim has committed, the lease
already decides who runs the job (a redelivery under a live lease is a duplicate; an expired
lease is rescued by the dispatcher), so a job still running ``long_job_ack_seconds`` after its
delivery arrived has its message acked, and its lease alone holds it from then on. Its
outcome is settled here too (``EarlyAck.settle``): the broker has no message of it left to ack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable

from jobrelay.consumer.metrics import ConsumerMetrics
from jobrelay.consumer.patience import Backoff
from jobrelay.consumer.verdict import Disposition, Verdict
from jobrelay.core.execution import Delivery

log = logging.getLogger("jobrelay.consumer")

ACK_TIMEOUT_SECONDS = 10.0
# Tries at the quarantine copy of a long job's message acked early (a reconnect in between).
LATE_DEAD_LETTER_TRIES = 4

# RabbitMQ's reason when it closes a channel over a delivery held past its consumer_timeout
# (3.10: "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value
# used: 5000 ms. ..."); the value is the only way a client learns the broker's setting.
_ACK_TIMED_OUT = re.compile(r"delivery acknowledgement on channel \d+ timed out")
_TIMEOUT_USED = re.compile(r"Timeout value used: (\d+) ms")
# When the reason names no value: ack a long job's message this soon after its delivery (its
# claim has committed by then, or the early ack waits for it), under any timeout a broker takes.
ACK_AT_ONCE_SECONDS = 0.5


def broker_ack_timeout(reason: str) -> float | None:
    """The broker's consumer_timeout in seconds when ``reason`` (a channel's closing reason)
    says a delivery's acknowledgement timed out; ``ACK_AT_ONCE_SECONDS`` if it names no value;
    None for any other reason."""
    if not _ACK_TIMED_OUT.search(reason):
        return None
    used = _TIMEOUT_USED.search(reason)
    return int(used.group(1)) / 1000 if used else ACK_AT_ONCE_SECONDS


def early_ack_within(configured: float, broker_timeout: float) -> float:
    """The early-ack time that keeps every delivery's ack before ``broker_timeout``: half of
    it (the ack itself, and a loaded event loop, take some of the rest), or ``configured``
    when that is sooner already. ``configured`` 0 (never early) is overruled too: otherwise
    every long job would have the broker close the channel again, and every other delivery
    on it go back."""
    bound = max(broker_timeout / 2, ACK_AT_ONCE_SECONDS / 2)
    return bound if configured <= 0 else min(configured, bound)


class EarlyAck:
    """The early ack of one delivery: armed once its claim has committed, due
    ``after_seconds`` after the delivery arrived (0: never), dropped when the run ends first.

    ``sent`` tells the settling code that the delivery is settled already: set before the ack
    is written, and kept even if the ack fails (the channel closed: the broker then gives the
    message to a consumer that acks it as a duplicate while the lease lives)."""

    def __init__(
        self,
        delivery: Delivery,
        after_seconds: float,
        metrics: ConsumerMetrics,
        *,
        arrived: float | None = None,
        on_sent: Callable[[], None] | None = None,
    ) -> None:
        self.delivery = delivery
        self.after_seconds = after_seconds
        self.metrics = metrics
        self.due = (arrived if arrived is not None else time.monotonic()) + after_seconds
        self.sent = False
        self.on_sent = on_sent  # the consumer frees the job's slot then
        self.extra: dict[str, object] = {}
        self._describe: Callable[[], dict[str, object]] = dict
        # A timer, not a task: most jobs end long before it is due, and a sleeping task per
        # delivery costs more than a timer handle; the ack's task is made only when it fires.
        self._timer: asyncio.TimerHandle | None = None
        self._ack: asyncio.Task[None] | None = None

    def arm(self, describe: Callable[[], dict[str, object]]) -> None:
        """The claim committed: from now on the lease may hold the job alone. ``describe``
        gives the job's log fields, called only if the early ack happens."""
        if self.after_seconds <= 0 or self._timer is not None or self._ack is not None:
            return
        self._describe = describe
        loop = asyncio.get_running_loop()
        # The loop's clock is time.monotonic, the clock ``due`` was computed on.
        self._timer = loop.call_at(self.due, self._fire)

    async def disarm(self) -> None:
        """The run ended: an ack not yet begun never happens; one being written ends first."""
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()  # a no-op once it fired: then ``_ack`` is its task
        ack, self._ack = self._ack, None
        if ack is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await ack

    def _fire(self) -> None:
        self._timer = None
        self.sent = True  # before the ack is even begun: a disarm cannot split the two
        self._ack = asyncio.ensure_future(self._ack_now())

    async def _ack_now(self) -> None:
        self.extra = self._describe()
        if self.on_sent is not None:
            self.on_sent()
        log.info(
            "still running after %gs: message acked, the lease alone holds the job",
            self.after_seconds,
            extra={**self.extra, "event": "long_job_acked"},
        )
        self.metrics.long_job_acks.inc()
        try:
            async with asyncio.timeout(ACK_TIMEOUT_SECONDS):
                await self.delivery.ack()
        except Exception as error:
            self.metrics.settle_errors.inc()
            log.warning(
                "early ack failed (%s): the broker delivers the message again, and that "
                "delivery is acked as a duplicate while the lease lives",
                type(error).__name__,
                extra={**self.extra, "event": "settle_failed", "outcome": "long_job_acked"},
            )

    async def settle(self, verdict: Verdict, backoff: Backoff) -> None:
        """Settle the delivery, its message acked early (docs/long-jobs.md): an ack is done; a
        quarantine still needs its message in the quarantine queue; a requeue has no message to
        put back, and needs none: the job comes back through its lease, which expires unrenewed
        and is rescued by the dispatcher with a new outbox row."""
        if verdict.disposition is Disposition.ACK:
            return
        if verdict.disposition is Disposition.REQUEUE:
            log.info(
                "not finished; its message was acked early: the job comes back once its "
                "lease expires",
                extra={**self.extra, "event": "long_job_given_back", "outcome": verdict.outcome},
            )
            return
        try:
            await _patiently_publish(self.delivery.dead_letter_after_ack, backoff)
        except Exception as error:
            # The quarantine is committed; the quarantine sweep restores a missing message.
            self.metrics.settle_errors.inc()
            log.warning(
                "quarantined, but its message could not be put in the quarantine queue (%s)",
                type(error).__name__,
                extra={**self.extra, "event": "settle_failed", "outcome": verdict.outcome},
            )


async def _patiently_publish(publish: Callable[[], Awaitable[None]], backoff: Backoff) -> None:
    """A few tries at a publish, each with a timeout: a reconnect of the broker in between
    takes seconds."""
    for failures in range(1, LATE_DEAD_LETTER_TRIES + 1):
        try:
            async with asyncio.timeout(10):
                return await publish()
        except Exception:
            if failures == LATE_DEAD_LETTER_TRIES:
                raise
            await asyncio.sleep(backoff.before_republish(failures))
