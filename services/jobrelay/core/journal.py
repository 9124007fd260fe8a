"""The markers of the job journal (``job_events.detail``) that code reads back.

Most journal details are text for a person (``unexpected_error: retry at …``, the consumer that
claimed). A few are the reason a job was quarantined without an attempt of its own, and the
trace counts those as deliveries that ended without a claim. They are named here, once, for
their writers: ``db/queries.py`` (``QUARANTINE_EXHAUSTED``, ``DEFER_UNKNOWN_TYPE``,
``QUARANTINE_DELIVERY_LIMITED``), ``core/jobs.py::decide_outcome`` (the reason code of a
failed last attempt, which is also its journal detail) and the tests' in-memory store
(``tests/support/consumer_fakes.py``); their reader is ``core/trace.py::is_unclaimed_delivery``.
"""

from __future__ import annotations

from enum import StrEnum


class QuarantineMarker(StrEnum):
    """The detail of a ``quarantined`` entry that no failed attempt of a handler wrote."""

    # No attempt left to claim (a redelivery after the last lease expired); a failed last
    # attempt is quarantined with the same code, but its entry carries the attempt's error.
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    # The type stayed unknown to every consumer past the patience (never claimed).
    UNKNOWN_JOB_TYPE = "unknown_job_type"
    # The broker dead-lettered the message itself: no consumer received it.
    DELIVERY_LIMIT = "delivery_limit"


# The quarantines a consumer's delivery caused without claiming the job.
UNCLAIMED_DELIVERY_MARKERS = frozenset(
    {QuarantineMarker.ATTEMPTS_EXHAUSTED, QuarantineMarker.UNKNOWN_JOB_TYPE}
)
