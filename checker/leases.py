"""``stale_writes``: no write by a stale lease (SPEC section 23; fenced claims and results).

Each job's journal is read in its own order (``seq``). An attempt's outcome (``succeeded``,
``retry_scheduled``, ``quarantined``) is stale when a later attempt was already ``claimed``
(that claim took a new lease) or its own ``lease_expired`` came first (its lease was gone), with
one exception: the ``quarantined`` of detail ``attempts_exhausted`` after its attempt's
``lease_expired``, which is no write of the attempt's handler but the verdict on it (its lease
was lost on the last attempt allowed, and the redelivery found no attempt left). A ``result`` is
stale when it was stored by another attempt than the one that succeeded.
"""

from __future__ import annotations

from collections.abc import Iterable

from checker.findings import Findings
from checker.history import Event, History

OUTCOMES = ("succeeded", "retry_scheduled", "quarantined")
EXHAUSTED = "attempts_exhausted"  # the detail of a quarantine no handler wrote


def stale_outcomes(journal: Iterable[Event]) -> list[tuple[Event, str]]:
    """The outcome events of this journal (in ``seq`` order) written under a stale lease, each
    with what made its lease stale."""
    latest_claim = 0
    expired: set[int] = set()
    stale = []
    for event in journal:
        attempt = event.attempt
        if event.event == "claimed" and attempt is not None:
            latest_claim = max(latest_claim, attempt)
        elif event.event == "lease_expired" and attempt is not None:
            expired.add(attempt)
        elif event.event in OUTCOMES and attempt is not None and attempt < latest_claim:
            stale.append((event, f"after attempt {latest_claim} was claimed"))
        elif event.event in OUTCOMES and attempt in expired and not _exhausted(event):
            stale.append((event, "after its lease_expired"))
    return stale


def _exhausted(event: Event) -> bool:
    return event.event == "quarantined" and event.detail == EXHAUSTED


def check_leases(history: History) -> Findings:
    findings = Findings()
    succeeded: dict[str, set[int | None]] = {}
    for job_id, journal in sorted(history.journals.items()):
        for event, why in stale_outcomes(journal):
            findings.fail(
                "stale_writes",
                f"job {job_id}: {event.event} of attempt {event.attempt} (seq {event.seq}) {why}",
            )
        succeeded[job_id] = {e.attempt for e in journal if e.event == "succeeded"}
    for result in history.results:
        attempts = succeeded.get(result.job_id, set())
        # a result of a job that never succeeded is duplicate_results' to count
        if attempts and result.attempt not in attempts:
            findings.fail(
                "stale_writes",
                f"job {result.job_id}: a result of attempt {result.attempt}, which is not the"
                f" attempt that succeeded ({', '.join(map(str, attempts))})",
            )
    return findings
