"""Limits never exceeded, batches never oversized, sequences in order (SPEC section 23).

An attempt runs from its ``claimed`` (attempt N) to the first end of attempt N that follows in
the job's journal (``succeeded``, ``retry_scheduled``, ``quarantined``, ``cancelled``,
``lease_expired``, or ``sleeping``: a durable job's attempt that suspends until a wake time or a
signal), or, with none, to the job's last event (an open attempt, a figure). Running
attempts are counted by a sweep over the journal's times (PostgreSQL's clock, one for every
event); at one instant an end frees its slot before a start takes one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from checker.findings import Findings
from checker.history import Event, History, Job

ENDS = ("succeeded", "retry_scheduled", "quarantined", "cancelled", "lease_expired", "sleeping")
FINISHES = ("succeeded", "cancelled")  # how a job ahead in a sequence lets the next one go


@dataclass(frozen=True)
class Attempt:
    job: Job
    number: int
    start: float
    end: float
    open: bool  # no end of this attempt in the journal: it runs to the job's last event


def attempts_of(job: Job, journal: Sequence[Event]) -> list[Attempt]:
    """The job's attempts, as its journal (in ``seq`` order) tells them."""
    found = []
    for index, event in enumerate(journal):
        if event.event != "claimed" or event.attempt is None:
            continue
        end = next(
            (
                later
                for later in journal[index + 1 :]
                if later.event in ENDS and later.attempt in (event.attempt, None)
            ),
            None,
        )
        last = journal[-1].at if end is None else end.at
        found.append(Attempt(job, event.attempt, event.at, last, open=end is None))
    return found


def peaks(attempts: Iterable[Attempt]) -> Iterable[tuple[Attempt, list[Attempt]]]:
    """Each attempt as it starts, with the attempts running then (itself included)."""
    moments = []
    for attempt in attempts:
        moments.append((attempt.end, 0, attempt))  # 0: at one instant, ends come first
        moments.append((attempt.start, 1, attempt))
    running: dict[int, Attempt] = {}
    for _, starts, attempt in sorted(moments, key=lambda m: (m[0], m[1])):
        if not starts:
            running.pop(id(attempt), None)
            continue
        running[id(attempt)] = attempt
        yield attempt, list(running.values())


def _label(attempt: Attempt) -> str:
    return f"job {attempt.job.id} attempt {attempt.number}"


def _check_limits(findings: Findings, attempts: list[Attempt], limits: dict[str, int]) -> None:
    """``limit_exceeded``: more attempts of one type and concurrency key at once than its
    limit (one violation per start that goes over it)."""
    groups: dict[tuple[str, str | None], list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.job.type in limits:
            groups[(attempt.job.type, attempt.job.concurrency_key)].append(attempt)
    for (job_type, key), group in sorted(groups.items(), key=str):
        for attempt, running in peaks(group):
            findings.figures["limited_peak"] = max(findings.figures["limited_peak"], len(running))
            if len(running) > limits[job_type]:
                findings.fail(
                    "limit_exceeded",
                    f"{job_type} key {key}: {len(running)} running at once (limit"
                    f" {limits[job_type]}) when {_label(attempt)} started",
                )


def _sequences(jobs: Iterable[Job]) -> dict[tuple[str | None, str], list[Job]]:
    found: dict[tuple[str | None, str], list[Job]] = defaultdict(list)
    for job in jobs:
        if job.sequence_key is not None and job.sequence_no is not None:
            found[(job.client, job.sequence_key)].append(job)
    return found


def _check_overlaps(findings: Findings, attempts: list[Attempt], jobs: Iterable[Job]) -> None:
    """``sequence_overlaps``: an attempt started while another job of its sequence ran."""
    members = {job.id for group in _sequences(jobs).values() for job in group}
    groups: dict[tuple[str | None, str | None], list[Attempt]] = defaultdict(list)
    for attempt in attempts:
        if attempt.job.id in members:
            groups[(attempt.job.client, attempt.job.sequence_key)].append(attempt)
    for (_, key), group in sorted(groups.items(), key=str):
        for attempt, running in peaks(group):
            others = [other for other in running if other.job.id != attempt.job.id]
            if others:
                findings.fail(
                    "sequence_overlaps",
                    f"sequence {key}: {_label(attempt)} started while {_label(others[0])} ran",
                )


def _check_order(findings: Findings, history: History) -> None:
    """``sequence_order``: a job first claimed before every job ahead of it in its sequence
    had succeeded or been cancelled (never, for one that did neither)."""
    for (_, key), group in sorted(_sequences(history.jobs).items(), key=str):
        first_claim: dict[str, float] = {}
        finished: dict[str, float] = {}
        for job in group:
            journal = history.journals.get(job.id, ())
            claims = [e.at for e in journal if e.event == "claimed"]
            ends = [e.at for e in journal if e.event in FINISHES]
            if claims:
                first_claim[job.id] = min(claims)
            if ends:
                finished[job.id] = min(ends)
        for job in group:
            claimed = first_claim.get(job.id)
            early = [
                ahead
                for ahead in group
                if claimed is not None
                and (ahead.sequence_no or 0) < (job.sequence_no or 0)
                and not finished.get(ahead.id, claimed + 1) <= claimed
            ]
            if early:
                findings.fail(
                    "sequence_order",
                    f"sequence {key}: job {job.id} (no. {job.sequence_no}) claimed before job"
                    f" {early[0].id} (no. {early[0].sequence_no}) finished",
                )


def _check_batches(findings: Findings, history: History) -> None:
    """``batch_oversized``: a call of a batch type took more jobs than its batch size. A call
    is known by its ``call``; its type by the job whose ``payload.tag`` its effect names (or
    the one batch type of the run)."""
    sizes = history.run.batch_sizes
    type_of_tag = {job.tag: job.type for job in history.jobs if job.tag is not None}
    only = next(iter(sizes.values())) if len(sizes) == 1 else None
    calls = {call.call: call for call in history.batch_calls}
    for name, call in sorted(calls.items()):
        job_type = type_of_tag.get(call.tag)
        size = sizes.get(job_type, only) if job_type is not None else only
        findings.figures["batch_largest"] = max(findings.figures["batch_largest"], call.size)
        if size is not None and call.size > size:
            findings.fail("batch_oversized", f"batch call {name} took {call.size} (size {size})")


def check_limits(history: History) -> Findings:
    """Limits, batch sizes and sequences, from the journal's attempts."""
    findings = Findings()
    jobs = {job.id: job for job in history.jobs}
    attempts = [
        attempt
        for job_id, journal in sorted(history.journals.items())
        if job_id in jobs
        for attempt in attempts_of(jobs[job_id], journal)
    ]
    findings.figures["attempts"] = len(attempts)
    findings.figures["open_attempts"] = sum(attempt.open for attempt in attempts)
    _check_limits(findings, attempts, dict(history.run.limits))
    _check_overlaps(findings, attempts, history.jobs)
    _check_order(findings, history)
    _check_batches(findings, history)
    return findings
