"""The total-queue counts (Jepsen's four: lost, recovered, unexpected, duplicated), one job per
idempotency key and at most one result per job, from the requests and answers of the load and
the final rows.

A key is acknowledged when any answer to it was a 200/202 with an id; indeterminate when every
answer was a 5xx or none came. Every acknowledged job must have ended; so must any other job
that exists (its request committed after all), unless it is blocked behind a quarantined job of
its sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from checker.findings import Findings
from checker.history import Answer, History, Job

SUBMISSIONS = ("submit", "submit_workflow")
ACKNOWLEDGED = (200, 202)
WAITING = ("queued", "scheduled", "waiting")  # states a job blocked by its sequence may be in


@dataclass(frozen=True)
class Key:
    """What the run's client was told about one idempotency key."""

    key: str
    op: str  # submit or submit_workflow
    answers: tuple[Answer | None, ...]  # None: a request whose answer was never written

    @property
    def acknowledgements(self) -> list[Answer]:
        return [a for a in self.answers if a and a.status in ACKNOWLEDGED and a.id]

    @property
    def indeterminate(self) -> bool:
        return all(a is None or a.status is None or a.status >= 500 for a in self.answers)


@dataclass(frozen=True)
class Rows:
    """The final rows, indexed the ways the checks look them up."""

    jobs: Mapping[str, Job]
    results: Counter[str]  # result lines per job
    quarantined: frozenset[str | None]  # the job ids the quarantine queue's messages name
    workflow_keys: Mapping[str, str | None]  # workflow id -> its key
    history: History

    def ended(self, job: Job) -> bool:
        """Succeeded with its result, cancelled, or quarantined with its message."""
        if job.state == "succeeded":
            return self.results[job.id] > 0
        if job.state == "quarantined":
            return job.id in self.quarantined
        return job.state == "cancelled"

    def blocked(self, job: Job) -> bool:
        """Waiting (queued, ``sequence_waits`` or never claimed) behind a quarantined job of its
        client's sequence key (one with a lower ``sequence_no`` that never succeeded): the
        sequence waits for an operator, which is its documented behaviour, not a loss."""
        if job.sequence_key is None or job.sequence_no is None:
            return False
        journal = self.history.journals.get(job.id, ())
        claimed = any(event.event == "claimed" for event in journal)
        if claimed and not job.sequence_waits and job.state not in WAITING:
            return False
        return any(self._blocks(other, job) for other in self.jobs.values())

    def _blocks(self, other: Job, job: Job) -> bool:
        return (
            other.state == "quarantined"
            and (other.client, other.sequence_key) == (job.client, job.sequence_key)
            and other.sequence_no is not None
            and job.sequence_no is not None
            and other.sequence_no < job.sequence_no
            and not any(e.event == "succeeded" for e in self.history.journals.get(other.id, ()))
        )


def submitted_keys(history: History) -> dict[str, Key]:
    """Each key the run submitted, with every answer its tries got (paired by ``n``)."""
    answers = {answer.n: answer for answer in history.answers}
    tries: dict[str, list[Answer | None]] = {}
    ops: dict[str, str] = {}
    for request in history.requests:
        if request.op in SUBMISSIONS and request.key is not None:
            tries.setdefault(request.key, []).append(answers.get(request.n))
            ops[request.key] = request.op
    return {key: Key(key, ops[key], tuple(found)) for key, found in tries.items()}


def _rows(history: History) -> Rows:
    return Rows(
        jobs={job.id: job for job in history.jobs},
        results=Counter(result.job_id for result in history.results),
        quarantined=frozenset(history.quarantined_ids),
        workflow_keys={workflow.id: workflow.key for workflow in history.workflows},
        history=history,
    )


def _jobs_of_key(key: Key, rows: Rows) -> list[str]:
    """The job ids the key's acknowledgements name: the job, or each job of the workflow
    (its jobs map, else the workflow's jobs found in the rows)."""
    found: list[str] = []
    for answer in key.acknowledgements:
        if key.op == "submit":
            found.append(str(answer.id))
        elif answer.jobs:
            found.extend(answer.jobs.values())
        else:
            found.extend(j.id for j in rows.jobs.values() if j.workflow_id == answer.id)
    return list(dict.fromkeys(found))


def _jobs_made_for(key: Key, rows: Rows) -> list[Job]:
    """The jobs in the rows that the key made, whatever its answers said."""
    if key.op == "submit":
        return [job for job in rows.jobs.values() if job.key == key.key and job.workflow_id is None]
    workflows = {wf for wf, wf_key in rows.workflow_keys.items() if wf_key == key.key}
    return [job for job in rows.jobs.values() if job.workflow_id in workflows]


def _check_lost(findings: Findings, keys: Iterable[Key], rows: Rows) -> None:
    """``lost``: an acknowledged job that is missing or did not end, and any other job of the
    rows that did not end; a blocked job is counted as ``blocked``."""
    owed: set[str] = set()
    for key in keys:
        for job_id in _jobs_of_key(key, rows):
            owed.add(job_id)
            if job_id not in rows.jobs:
                findings.fail("lost", f"job {job_id} (key {key.key}) is not in the history's rows")
    for job in rows.jobs.values():
        if rows.ended(job):
            continue
        if rows.blocked(job):
            findings.figures["blocked"] += 1
            continue
        why = "acknowledged" if job.id in owed else "never acknowledged"
        findings.fail("lost", f"job {job.id} ({why}, key {job.key}) did not end: {_end(job)}")


def _end(job: Job) -> str:
    if job.state == "succeeded":
        return "succeeded without a result"
    if job.state == "quarantined":
        return "quarantined, no message of the quarantine queue names it"
    return f"still {job.state}"


def _check_recovered(findings: Findings, keys: Iterable[Key], rows: Rows) -> None:
    """``recovered`` (a figure): a key never acknowledged, every answer indeterminate, whose
    jobs exist and ended all the same."""
    for key in keys:
        if key.indeterminate:
            findings.figures["indeterminate_keys"] += 1
            made = _jobs_made_for(key, rows)
            if made and all(rows.ended(job) for job in made):
                findings.figures["recovered"] += 1
        elif key.acknowledgements:
            findings.figures["acknowledged_keys"] += 1
        else:
            findings.figures["refused_keys"] += 1


def _check_unexpected(findings: Findings, keys: Mapping[str, Key], rows: Rows) -> None:
    """``unexpected``: a job no request asked for. A child's parent made it; a workflow's job
    belongs to a workflow whose key was submitted; any other job's key was submitted."""
    for job in rows.jobs.values():
        if job.parent_job_id is not None:
            if job.parent_job_id not in rows.jobs:
                findings.fail("unexpected", f"job {job.id}: child of {job.parent_job_id}, absent")
        elif job.workflow_id is not None:
            wf_key = rows.workflow_keys.get(job.workflow_id)
            if wf_key is None or wf_key not in keys:
                findings.fail(
                    "unexpected", f"job {job.id}: workflow {job.workflow_id}, never submitted"
                )
        elif job.key is None or job.key not in keys:
            findings.fail("unexpected", f"job {job.id}: key {job.key} was never submitted")


def _check_keys(findings: Findings, keys: Iterable[Key], rows: Rows) -> None:
    """``keys_with_two_jobs``: two jobs (or workflows) of one client and key, or two
    acknowledgements of one key naming different ids."""
    for key in keys:
        ids = {str(answer.id) for answer in key.acknowledgements}
        if len(ids) > 1:
            findings.fail("keys_with_two_jobs", f"key {key.key} acknowledged as {sorted(ids)}")
    made = Counter((job.client, job.key) for job in rows.jobs.values() if job.key is not None)
    for (client, key_name), jobs in sorted(made.items(), key=str):
        if jobs > 1:
            findings.fail("keys_with_two_jobs", f"key {key_name} of {client} has {jobs} jobs")
    workflows = Counter(key for key in rows.workflow_keys.values() if key is not None)
    for key_name, count in sorted(workflows.items(), key=str):
        if count > 1:
            findings.fail("keys_with_two_jobs", f"key {key_name} has {count} workflows")


def _check_results(findings: Findings, rows: Rows) -> None:
    """``duplicate_results``: more than one result for a job (also ``duplicated``: its effect
    stored twice), or a result for a job that did not succeed."""
    for job_id, count in sorted(rows.results.items()):
        job = rows.jobs.get(job_id)
        if count > 1:
            findings.fail("duplicate_results", f"job {job_id} has {count} results")
            findings.fail("duplicated", f"job {job_id}'s result was stored {count} times")
        elif job is None or job.state != "succeeded":
            state = "absent" if job is None else job.state
            findings.fail("duplicate_results", f"job {job_id} has a result but is {state}")


def _check_effects(findings: Findings, history: History) -> None:
    """``duplicated``: a batch job's effect or a report written twice."""
    written = Counter(call.tag for call in history.batch_calls if call.outcome == "written")
    for tag, count in sorted(written.items()):
        if count > 1:
            findings.fail("duplicated", f"batch effect {tag} written {count} times")
    reports = Counter(report.job_id for report in history.reports if report.outcome == "written")
    for job_id, count in sorted(reports.items()):
        if count > 1:
            findings.fail("duplicated", f"job {job_id}'s report written {count} times")


def check_queue(history: History) -> Findings:
    """Lost, recovered, unexpected, duplicated; keys with two jobs; duplicate results."""
    findings = Findings()
    keys = submitted_keys(history)
    rows = _rows(history)
    _check_lost(findings, keys.values(), rows)
    _check_recovered(findings, keys.values(), rows)
    _check_unexpected(findings, keys, rows)
    _check_keys(findings, keys.values(), rows)
    _check_results(findings, rows)
    _check_effects(findings, history)
    findings.figures["jobs"] = len(rows.jobs)
    findings.figures["requests"] = len(history.requests)
    findings.figures["workflows"] = len(rows.workflow_keys)
    findings.figures["children"] = sum(job.parent_job_id is not None for job in rows.jobs.values())
    findings.figures.update(f"state_{job.state}" for job in rows.jobs.values())
    findings.figures["outbox_unpublished"] = history.unpublished
    findings.figures["queued_messages"] = history.queued_messages
    findings.figures["quarantine_messages"] = len(history.quarantined_ids)
    return findings
