"""The quarantine: its jobs grouped by reason (``Operations.quarantine_report``, as
``jobrelay quarantine list`` shows them), replay one job or a whole reason, and purge the
dead-lettered messages after a confirmation page. Without the broker (``console/broker.py``)
the pages say so, their buttons are disabled and their forms are refused, changing nothing."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Form, Query, Request, Response

from jobrelay.console.context import context_of
from jobrelay.console.security import Flash, safe_next
from jobrelay.console.web import (
    ActingDep,
    ConsoleRoute,
    OperatorDep,
    operations_of,
    redirect,
    render,
    store_of,
)
from jobrelay.core.errors import BrokerUnavailable
from jobrelay.operations import ReplayOutcome

router = APIRouter(route_class=ConsoleRoute, include_in_schema=False)
T = TypeVar("T")

QUARANTINE_PATH = "/ui/quarantine"
# The newest quarantined jobs the page reads, and how many of them each reason shows; one
# reason's page (?reason=) lists up to REASON_LISTED of its own. The counts are of all of them.
LISTED = 100
SHOWN_PER_REASON = 10
REASON_LISTED = 500
# Unreachable is the banner's (macros.html), with the buttons disabled.
BROKER_NOTES = {
    "busy": "The quarantine queue is held by a replay or a sweep: its messages are unknown "
    "right now.",
}
NOT_REPLAYED = Flash(
    "error", "Not replayed: the broker is unreachable, so replay is unavailable. Nothing changed."
)
NOT_PURGED = Flash(
    "error", "Not purged: the broker is unreachable, so purge is unavailable. Nothing changed."
)


@dataclass
class Reason:
    code: str
    total: int
    jobs: list[dict[str, Any]] = field(default_factory=list)


def by_reason(jobs: Sequence[dict[str, Any]], totals: dict[str, int]) -> list[Reason]:
    """The listed jobs under their reason, the reasons with the most jobs first (a reason
    counted in the totals but none of whose jobs are listed still shows, with its count)."""
    reasons = {code: Reason(code, total) for code, total in totals.items()}
    for job in jobs:
        code = job["reason"] or "unknown"
        reasons.setdefault(code, Reason(code, 0)).jobs.append(job)
    for reason in reasons.values():
        reason.total = max(reason.total, len(reason.jobs))
    return sorted(reasons.values(), key=lambda reason: (-reason.total, reason.code))


@router.get(QUARANTINE_PATH)
async def quarantine_page(
    request: Request,
    operator: OperatorDep,
    reason: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    """Every reason with its newest jobs; or (``reason``) one reason's jobs."""
    wanted = reason.strip() or None
    limit = REASON_LISTED if wanted else LISTED
    report = await operations_of(request).quarantine_report(code=wanted, limit=limit)
    broker_down = _learned(request, report)
    totals = (await store_of(request).stats()).quarantined_by_code
    if wanted:
        totals = {wanted: totals.get(wanted, 0)}
    context = {
        "reasons": by_reason(report["jobs"], totals),
        "report": report,
        "broker_note": BROKER_NOTES.get(report["broker"]),
        "broker_down": broker_down,
        "one_reason": wanted,
        "shown": REASON_LISTED if wanted else SHOWN_PER_REASON,
    }
    return await render(request, "quarantine.html", context, operator=operator)


def _learned(request: Request, report: dict[str, Any]) -> bool:
    """Whether the report found the broker unreachable (the check learns it either way: the
    report connected, or tried to); a busy queue is a broker that answered."""
    down: bool = report["broker"] == "unavailable"
    context_of(request).console_broker.learned(reachable=not down)
    return down


async def _if_reachable(request: Request, action: Callable[[], Awaitable[T]]) -> T | None:
    """The action's answer, or None when the broker is unreachable: known before (the action
    does not run) or met by the action (which then changed nothing)."""
    check = context_of(request).console_broker
    if await check.reachable():
        try:
            return await action()
        except BrokerUnavailable:
            check.learned(reachable=False)
    return None


def replay_flash(outcome: ReplayOutcome) -> Flash:
    if outcome.status == "replayed":
        return Flash(
            "ok",
            f"Replayed job {outcome.job_id}: queued again with a fresh attempt "
            "budget; its message left the quarantine queue.",
        )
    if outcome.status == "not_found":
        return Flash("error", f"Not replayed: there is no job {outcome.job_id}.")
    return Flash(
        "error", f"Not replayed: job {outcome.job_id} is {outcome.state}, not quarantined."
    )


@router.post(QUARANTINE_PATH + "/replay")
async def replay_job(
    request: Request,
    operator: ActingDep,
    job_id: Annotated[uuid.UUID, Form()],
    back: Annotated[str, Form()] = QUARANTINE_PATH,
) -> Response:
    outcomes = await _if_reachable(request, lambda: operations_of(request).replay([job_id]))
    if outcomes is None:
        return await redirect(request, safe_next(back), NOT_REPLAYED)
    (outcome,) = outcomes
    return await redirect(request, safe_next(back), replay_flash(outcome))


@router.post(QUARANTINE_PATH + "/replay-reason")
async def replay_reason(
    request: Request, operator: ActingDep, code: Annotated[str, Form(max_length=200)]
) -> Response:
    outcomes = await _if_reachable(request, lambda: operations_of(request).replay_all(code=code))
    if outcomes is None:
        return await redirect(request, QUARANTINE_PATH, NOT_REPLAYED)
    replayed = sum(1 for outcome in outcomes if outcome.status == "replayed")
    flash = Flash(
        "ok" if replayed == len(outcomes) else "error",
        f"Replayed {replayed} of {len(outcomes)} job(s) quarantined for {code}: queued again "
        "with a fresh attempt budget.",
    )
    return await redirect(request, QUARANTINE_PATH, flash)


@router.get(QUARANTINE_PATH + "/purge")
async def purge_confirmation(request: Request, operator: OperatorDep) -> Response:
    """The confirmation step: what a purge deletes and what it keeps, and the one button."""
    report = await operations_of(request).quarantine_report(limit=1)
    context = {
        "report": report,
        "broker_note": BROKER_NOTES.get(report["broker"]),
        "broker_down": _learned(request, report),
    }
    return await render(request, "purge.html", context, operator=operator)


@router.post(QUARANTINE_PATH + "/purge")
async def purge(request: Request, operator: ActingDep) -> Response:
    count = await _if_reachable(request, operations_of(request).purge)
    if count is None:
        return await redirect(request, QUARANTINE_PATH, NOT_PURGED)
    flash = Flash(
        "ok",
        f"Purged {count} message(s) from jobrelay.quarantine; the jobs stay quarantined and "
        "can still be replayed.",
    )
    return await redirect(request, QUARANTINE_PATH, flash)
