"""The independent checker (``checker/``, docs/history.md): a small clean history, written here
line by line, passes with every count 0; the same history doctored once per count fails that
count, and only the counts it should; the CLI's exit statuses and one-line refusals; and the
checker imports nothing but the standard library and itself.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from checker.counts import COUNTS, Report, check, summary_line
from checker.history import HistoryError, parse_history
from tests.unit.test_architecture_doc import files_no_row_names, missing_paths, table_rows
from tests.unit.test_imports import imported_names, sources

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "checker"
Line = dict[str, Any]

# --- a clean history ----------------------------------------------------------------------------


class Story:
    """A history's lines, written by the run it describes, in the file's order."""

    def __init__(self) -> None:
        self.load: list[Line] = []
        self.effects: list[Line] = []
        self.rows: list[Line] = []
        self.n = 0

    def submit(self, key: str, *answers: Line | None, op: str = "submit") -> None:
        """One request per answer (None: the answer never came), all under ``key``."""
        for answer in answers:
            self.n += 1
            self.load.append({"record": "request", "n": self.n, "at": 1.0, "op": op, "key": key})
            status = {"status": None, "error": "ConnectError"} if answer is None else answer
            self.load.append({"record": "answer", "n": self.n, "at": 1.1, **status})

    def job(self, job_id: str, state: str = "succeeded", **fields: Any) -> None:
        row = {"record": "job", "id": job_id, "client": "c1", "key": None, "type": "demo.sleep"}
        row.update(state=state, sequence_key=None, sequence_no=None, workflow_id=None)
        row.update(parent_job_id=None, concurrency_key=None, sequence_waits=False)
        self.rows.append(row | fields)

    def attempt(self, job_id: str, number: int, start: float, end: float, outcome: str) -> None:
        for event, at in (("claimed", start), (outcome, end)):
            self.rows.append(self.event(job_id, event, number, at))

    def event(self, job_id: str, event: str, attempt: int | None, at: float) -> Line:
        seq = sum(1 for r in self.rows if r["record"] == "event") + 1
        return {
            "record": "event",
            "job_id": job_id,
            "seq": seq,
            "event": event,
            "attempt": attempt,
            "at": at,
        }

    def result(self, job_id: str, attempt: int = 1) -> None:
        self.rows.append({"record": "result", "job_id": job_id, "attempt": attempt, "result": {}})

    def finished(self, job_id: str, start: float, **fields: Any) -> None:
        """A job that succeeded in its first attempt, with its result."""
        self.job(job_id, **fields)
        self.attempt(job_id, 1, start, start + 1, "succeeded")
        self.result(job_id)

    def lines(self) -> list[Line]:
        run = {"record": "run", "format": 1, "profile": "test", "seed": 7, "at": 0.0}
        run.update(limits={"chaos.limited": 2}, batch_sizes={"chaos.batch": 20})
        final = [{"record": "outbox", "unpublished": 0}]
        final.append({"record": "queue", "name": "jobrelay.type.demo.sleep", "messages": 0})
        return [run, *self.load, *self.effects, *self.rows, *final, {"record": "end", "at": 99.0}]


def ack(job_id: str, **fields: Any) -> Line:
    return {"status": 202, "id": job_id, "jobs": None, "error": None, **fields}


def clean_lines() -> list[Line]:
    story = Story()
    # a plain job, acknowledged at the second try
    story.submit("k-plain", {"status": 503, "id": None}, ack("job-plain"))
    story.finished("job-plain", 10.0, key="k-plain")
    # indeterminate (a 5xx, then no answer), yet it committed and ended: recovered
    story.submit("k-recovered", {"status": 500, "id": None}, None)
    story.finished("job-recovered", 12.0, key="k-recovered")
    # a workflow of two jobs
    jobs = {"a": "job-wf-a", "b": "job-wf-b"}
    story.submit("k-wf", ack("wf-1", jobs=jobs), op="submit_workflow")
    story.rows.append({"record": "workflow", "id": "wf-1", "key": "k-wf"})
    story.finished("job-wf-a", 14.0, workflow_id="wf-1", workflow_ref="a")
    story.finished("job-wf-b", 16.0, workflow_id="wf-1", workflow_ref="b")
    # three jobs of one limited key (limit 2): the third starts as the first ends
    for number, start in ((1, 20.0), (2, 21.0), (3, 22.0)):
        story.submit(f"k-lim-{number}", ack(f"job-lim-{number}"))
        story.job(
            f"job-lim-{number}", key=f"k-lim-{number}", type="chaos.limited", concurrency_key="a1"
        )
        story.attempt(f"job-lim-{number}", 1, start, start + 2, "succeeded")
        story.result(f"job-lim-{number}")
    # a sequence of 3, each claimed as the one before it succeeds
    for number in (1, 2, 3):
        story.submit(f"k-seq-{number}", ack(f"job-seq-{number}"))
        story.finished(
            f"job-seq-{number}",
            29.0 + number,
            key=f"k-seq-{number}",
            sequence_key="s1",
            sequence_no=number,
        )
    # a durable job: its first attempt recorded step "first", ran "second" and failed; the
    # second recorded "second", and started a child
    story.submit("k-durable", ack("job-durable"))
    story.job("job-durable", key="k-durable", type="chaos.durable")
    story.attempt("job-durable", 1, 40.0, 41.0, "retry_scheduled")
    story.attempt("job-durable", 2, 42.0, 44.0, "succeeded")
    story.result("job-durable", attempt=2)
    for name, attempt in (("first", 1), ("second", 2)):
        story.rows.append(
            {"record": "step", "job_id": "job-durable", "name": name, "kind": "step"}
            | {"status": "done", "attempt": attempt, "value": {}}
        )
    story.rows.append(
        {"record": "step", "job_id": "job-durable", "name": "child", "kind": "child"}
        | {"status": "done", "attempt": 2, "value": {}}
    )
    for name, attempt in (("first", 1), ("second", 1), ("second", 2)):
        story.effects.append(
            {"record": "effect", "effect": "step_run", "job_id": "job-durable"}
            | {"step": name, "attempt": attempt, "nonce": f"{name}-{attempt}"}
        )
    story.finished("job-child", 43.0, parent_job_id="job-durable")
    # one batch call of two jobs
    for tag in ("t1", "t2"):
        story.submit(f"k-{tag}", ack(f"job-{tag}"))
        story.finished(f"job-{tag}", 46.0, key=f"k-{tag}", type="chaos.batch", payload={"tag": tag})
        story.effects.append(
            {"record": "effect", "effect": "batch_call", "tag": tag, "call": "call-1"}
            | {"size": 2, "outcome": "written"}
        )
    # a report, written once
    story.submit("k-export", ack("job-export"))
    story.finished("job-export", 48.0, key="k-export", type="catalog.export")
    story.effects.append(
        {"record": "effect", "effect": "report", "job_id": "job-export", "outcome": "written"}
    )
    # a quarantined job, its message in the quarantine queue
    story.submit("k-quarantined", ack("job-quarantined"))
    story.job("job-quarantined", "quarantined", key="k-quarantined")
    story.attempt("job-quarantined", 1, 50.0, 51.0, "quarantined")
    story.rows.append({"record": "quarantine_message", "job_id": "job-quarantined"})
    # a sequence whose first job was quarantined: its second waits, blocked
    story.submit("k-seq2-1", ack("job-seq2-1"))
    story.job("job-seq2-1", "quarantined", key="k-seq2-1", sequence_key="s2", sequence_no=1)
    story.attempt("job-seq2-1", 1, 60.0, 61.0, "quarantined")
    story.rows.append({"record": "quarantine_message", "job_id": "job-seq2-1"})
    story.submit("k-seq2-2", ack("job-seq2-2"))
    story.job(
        "job-seq2-2",
        "queued",
        key="k-seq2-2",
        sequence_key="s2",
        sequence_no=2,
        sequence_waits=True,
    )
    return story.lines()


def run_check(lines: list[Line]) -> Report:
    return check(parse_history(json.dumps(line) for line in lines))


def failing(report: Report) -> set[str]:
    return {name for name, count in report.counts.items() if count}


def test_the_clean_history_passes_with_every_count_zero() -> None:
    report = run_check(clean_lines())
    assert report.violations == ()
    assert set(report.counts) == set(COUNTS)
    assert report.passed
    figures = report.figures
    assert (figures["recovered"], figures["blocked"]) == (1, 1)
    assert figures["jobs"] == 18
    assert (figures["acknowledged_keys"], figures["indeterminate_keys"]) == (15, 1)
    assert figures["limited_peak"] == 2  # the third started as the first ended: not 3
    assert figures["step_runs_before_recorded"] == 1
    assert (figures["state_quarantined"], figures["state_queued"]) == (2, 1)
    assert figures["open_attempts"] == 0


# --- doctored once per count --------------------------------------------------------------------


def _rows_of(lines: list[Line], record: str, **match: Any) -> Iterator[Line]:
    for line in lines:
        if line["record"] == record and all(line.get(k) == v for k, v in match.items()):
            yield line


def _one(lines: list[Line], record: str, **match: Any) -> Line:
    (found,) = _rows_of(lines, record, **match)
    return found


def _before_end(lines: list[Line], *added: Line) -> None:
    lines[-1:-1] = added


def _drop_job(lines: list[Line]) -> None:  # the job vanished from the database
    rows = [*_rows_of(lines, "job", id="job-plain"), *_rows_of(lines, "result", job_id="job-plain")]
    rows += _rows_of(lines, "event", job_id="job-plain")
    lines[:] = [line for line in lines if line not in rows]


def _running(lines: list[Line]) -> None:
    _one(lines, "job", id="job-quarantined")["state"] = "running"


def _no_message(lines: list[Line]) -> None:
    lines.remove(_one(lines, "quarantine_message", job_id="job-quarantined"))


def _unsubmitted(lines: list[Line]) -> None:
    job = copy.deepcopy(_one(lines, "job", id="job-plain"))
    _before_end(lines, job | {"id": "job-stray", "key": "k-never", "state": "cancelled"})


def _second_result(lines: list[Line]) -> None:
    _before_end(lines, copy.deepcopy(_one(lines, "result", job_id="job-plain")))


def _second_job(lines: list[Line]) -> None:
    job = copy.deepcopy(_one(lines, "job", id="job-plain"))
    _before_end(lines, job | {"id": "job-plain-2", "state": "cancelled"})


def _two_ids(lines: list[Line]) -> None:
    # a later try answered with another id, which the rows do not hold: lost too
    request = {"record": "request", "n": 999, "at": 2.0, "op": "submit", "key": "k-plain"}
    _before_end(lines, request, {"record": "answer", "n": 999, "at": 2.1, **ack("job-plain-2")})


def _event(lines: list[Line], job_id: str, event: str) -> Line:
    return _one(lines, "event", job_id=job_id, event=event)


def _after_lease_expired(lines: list[Line]) -> None:
    claimed = _event(lines, "job-plain", "claimed")
    _event(lines, "job-plain", "succeeded")["seq"] += 1000
    expired = claimed | {"event": "lease_expired", "seq": claimed["seq"] + 500, "at": 10.5}
    lines.insert(lines.index(claimed) + 1, expired)


def _after_later_claim(lines: list[Line]) -> None:
    succeeded = _event(lines, "job-plain", "succeeded")
    claim = succeeded | {"event": "claimed", "attempt": 2, "at": 10.5}
    succeeded["seq"] += 1000
    _before_end(lines, claim | {"seq": succeeded["seq"] - 1})


def _result_of_another_attempt(lines: list[Line]) -> None:
    _one(lines, "result", job_id="job-plain")["attempt"] = 2


def _over_the_limit(lines: list[Line]) -> None:
    _event(lines, "job-lim-3", "claimed")["at"] = 21.5  # while 1 and 2 still run


def _oversized(lines: list[Line]) -> None:
    for call in _rows_of(lines, "effect", effect="batch_call"):
        call["size"] = 21


def _overlapping(lines: list[Line]) -> None:
    # job 2 claimed while job 1 still ran: out of order as well
    _event(lines, "job-seq-2", "claimed")["at"] = 30.5


def _claimed_before_its_predecessor_succeeded(lines: list[Line]) -> None:
    # job 1's first attempt failed, 2 and 3 ran (one at a time), then job 1 succeeded
    _event(lines, "job-seq-1", "succeeded").update(event="retry_scheduled", at=30.5)
    claim = _event(lines, "job-seq-1", "claimed") | {"seq": 2001, "attempt": 2, "at": 35.0}
    done = claim | {"seq": 2002, "event": "succeeded", "at": 35.5}
    _one(lines, "result", job_id="job-seq-1")["attempt"] = 2
    _before_end(lines, claim, done)


def _step_run(attempt: int) -> Callable[[list[Line]], None]:
    def doctor(lines: list[Line]) -> None:
        run = _one(lines, "effect", effect="step_run", step="first")
        lines.insert(lines.index(run) + 1, run | {"attempt": attempt})

    return doctor


def _batch_written_twice(lines: list[Line]) -> None:
    call = _one(lines, "effect", effect="batch_call", tag="t1")
    lines.insert(lines.index(call) + 1, call | {"call": "call-2", "size": 1})


def _report_written_twice(lines: list[Line]) -> None:
    report = _one(lines, "effect", effect="report")
    lines.insert(lines.index(report) + 1, dict(report))


def _orphan(lines: list[Line]) -> None:
    _one(lines, "job", id="job-child")["parent_job_id"] = "job-nowhere"


def _workflow_of_another_key(lines: list[Line]) -> None:
    _one(lines, "workflow", id="wf-1")["key"] = "k-never"  # both its jobs: unexpected


def _result_of_a_quarantined_job(lines: list[Line]) -> None:
    _before_end(lines, {"record": "result", "job_id": "job-quarantined", "attempt": 1})


def _workflow_job_left_waiting(lines: list[Line]) -> None:
    job = _one(lines, "job", id="job-wf-b")
    job["state"] = "waiting"
    lines.remove(_one(lines, "result", job_id="job-wf-b"))


DOCTORED: dict[str, tuple[Callable[[list[Line]], None], set[str]]] = {
    "a job line dropped": (_drop_job, {"lost"}),
    "an ended job made running": (_running, {"lost"}),
    "a quarantined job's message dropped": (_no_message, {"lost"}),
    "a job of an unsubmitted key": (_unsubmitted, {"unexpected"}),
    "a second result line": (_second_result, {"duplicate_results", "duplicated"}),
    "a second job of one key": (_second_job, {"keys_with_two_jobs"}),
    "a key acknowledged with two ids": (_two_ids, {"keys_with_two_jobs", "lost"}),
    "an outcome after its lease expired": (_after_lease_expired, {"stale_writes"}),
    "an outcome after a later claim": (_after_later_claim, {"stale_writes"}),
    "a result of another attempt": (_result_of_another_attempt, {"stale_writes"}),
    "three of a limited key at once": (_over_the_limit, {"limit_exceeded"}),
    "a batch call of 21": (_oversized, {"batch_oversized"}),
    "two jobs of a sequence at once": (_overlapping, {"sequence_overlaps", "sequence_order"}),
    "a job claimed before its predecessor succeeded": (
        _claimed_before_its_predecessor_succeeded,
        {"sequence_order"},
    ),
    "a step run in a later attempt": (_step_run(2), {"step_run_again"}),
    "a step run twice in its attempt": (_step_run(1), {"step_run_again"}),
    "a batch effect written twice": (_batch_written_twice, {"duplicated"}),
    "a report written twice": (_report_written_twice, {"duplicated"}),
    "a child of no job": (_orphan, {"unexpected"}),
    "a workflow whose key was never submitted": (_workflow_of_another_key, {"unexpected"}),
    "a result of a quarantined job": (_result_of_a_quarantined_job, {"duplicate_results"}),
    "a workflow's job left waiting": (_workflow_job_left_waiting, {"lost"}),
}


@pytest.mark.parametrize("doctoring", list(DOCTORED), ids=list(DOCTORED))
def test_each_doctored_history_fails_its_count_and_only_it(doctoring: str) -> None:
    doctor, expected = DOCTORED[doctoring]
    lines = clean_lines()
    doctor(lines)
    report = run_check(lines)
    assert failing(report) == expected, report.violations
    assert not report.passed


def test_every_failing_count_is_shown_failing_by_some_doctored_history() -> None:
    assert set().union(*(expected for _, expected in DOCTORED.values())) == set(COUNTS)


def test_a_key_never_acknowledged_and_never_made_is_neither_lost_nor_recovered() -> None:
    # Jepsen's reading: an indeterminate request may not have committed; a refusal did not
    story = Story()
    story.submit("k-maybe", {"status": 502, "id": None}, None)
    story.submit("k-refused", {"status": 409, "id": None})
    report = run_check(story.lines())
    assert report.passed
    assert (report.figures["indeterminate_keys"], report.figures["recovered"]) == (1, 0)
    assert report.figures["refused_keys"] == 1


def test_an_attempt_the_journal_never_ends_runs_to_the_jobs_last_event() -> None:
    lines = clean_lines()
    lines.remove(_event(lines, "job-lim-1", "succeeded"))  # 1 now runs to its last event
    _event(lines, "job-lim-1", "claimed")["at"] = 21.0
    _before_end(lines, _event(lines, "job-lim-1", "claimed") | {"event": "x", "seq": 99, "at": 23})
    report = run_check(lines)
    assert report.figures["open_attempts"] == 1
    assert failing(report) == {"limit_exceeded"}  # 1, 2 and 3 all ran at 22.5


def test_a_blocked_job_is_lost_once_its_blocker_succeeded() -> None:
    lines = clean_lines()
    _one(lines, "job", id="job-seq2-1")["state"] = "succeeded"
    _event(lines, "job-seq2-1", "quarantined")["event"] = "succeeded"
    _before_end(lines, {"record": "result", "job_id": "job-seq2-1", "attempt": 1})
    report = run_check(lines)
    assert failing(report) == {"lost"}
    assert report.figures["blocked"] == 0


def test_the_summary_line_starts_with_the_four_counts() -> None:
    line = summary_line(run_check(clean_lines()))
    assert line.startswith("checker: lost=0 recovered=1 unexpected=0 duplicated=0 ")
    assert " violations=0 " in line and " blocked=1 " in line and " jobs=18 " in line


def test_unknown_fields_and_records_are_ignored() -> None:
    lines = clean_lines()
    lines.insert(1, {"record": "weather", "sky": "grey"})
    lines.insert(1, {"record": "effect", "effect": "telegram", "to": "nobody"})
    _one(lines, "job", id="job-plain")["colour"] = "blue"
    assert run_check(lines).passed


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "the file is empty"),
        ('{"record": "run", "format": 1}\n{"record": "job"', "line 2 is not JSON"),
        ('{"record": "run", "format": 1}\n[1]\n', "line 2 is not a JSON object"),
        ('{"record": "run", "format": 2}\n{"record": "end"}\n', "format 2"),
        ('{"record": "end"}\n', "line 1 is not a 'run' line"),
        ('{"record": "run", "format": 1}\n', "no 'end' line"),
        ('{"record": "run", "format": 1}\n{"record": "job", "id": 3}\n', "line 2: 'id' of a job"),
    ],
)
def test_what_is_not_a_whole_history_is_refused_with_its_reason(text: str, why: str) -> None:
    with pytest.raises(HistoryError, match=why):
        parse_history(text.splitlines())


# --- the command --------------------------------------------------------------------------------


def _command(*arguments: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "checker", *map(str, arguments)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _write(path: Path, lines: list[Line]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_the_command_exits_0_on_a_clean_history(tmp_path: Path) -> None:
    done = _command(_write(tmp_path / "history.jsonl", clean_lines()))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("checker: lost=0 recovered=1 ")
    assert done.stdout.count("\n") == 1 and done.stderr == ""


def test_the_command_exits_1_and_explains_a_violation(tmp_path: Path) -> None:
    lines = clean_lines()
    _second_result(lines)
    done = _command(_write(tmp_path / "history.jsonl", lines))
    assert done.returncode == 1
    assert " duplicate_results=1 " in done.stdout
    assert "checker: duplicate_results: job job-plain has 2 results" in done.stderr


def test_the_command_prints_a_document_with_json(tmp_path: Path) -> None:
    lines = clean_lines()
    _drop_job(lines)
    done = _command(_write(tmp_path / "history.jsonl", lines), "--json")
    assert done.returncode == 1
    document = json.loads(done.stdout)
    assert document["counts"]["lost"] == 1 and document["figures"]["recovered"] == 1
    assert document["violations"][0]["count"] == "lost"
    assert "job-plain" in document["violations"][0]["message"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "no such file"),
        ("not json\n", "line 1 is not JSON"),
        ('{"record": "run", "format": 9}\n{"record": "end"}\n', "format 9"),
        ('{"record": "run", "format": 1}\n', "no 'end' line"),
    ],
)
def test_the_command_exits_2_with_one_line_on_what_is_no_history(
    tmp_path: Path, content: str | None, why: str
) -> None:
    path = tmp_path / "history.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    done = _command(path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("checker: ") and why in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


# --- independence -------------------------------------------------------------------------------


def foreign_imports(modules: Mapping[str, str]) -> list[str]:
    """``module imports name`` for each import (anywhere in a module, relative ones resolved)
    of neither the standard library nor checker itself."""
    return [
        f"{module} imports {name}"
        for module, source in modules.items()
        for name in sorted(imported_names(module, source, is_package=module == "checker"))
        if name.split(".")[0] not in sys.stdlib_module_names | {"checker"}
    ]


def test_the_checker_imports_only_the_standard_library_and_itself() -> None:
    modules = sources(CHECKER)
    assert {"checker", "checker.history", "checker.__main__"} <= set(modules)
    assert foreign_imports(modules) == []


def test_an_import_of_the_runner_or_jobrelay_is_caught() -> None:
    made_up = {
        "checker.queue": "import json\nfrom collections import Counter\nfrom . import history\n"
        "from checker.leases import check_leases\nimport chaos.checks\n",
        "checker.steps": "def f():\n    from jobrelay.core import states\n",
    }
    assert foreign_imports(made_up) == [
        "checker.queue imports chaos.checks",
        "checker.steps imports jobrelay.core",
        "checker.steps imports jobrelay.core.states",
    ]


def test_every_module_of_the_checker_has_its_row_in_the_architecture_doc() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    rows = table_rows(text, "## The independent checker (`checker/`)")
    assert rows, "the checker's table was not found"
    assert missing_paths(rows, CHECKER) == []
    assert files_no_row_names(rows, CHECKER) == []


def _lease_lost_then_quarantined(lines: list[Line], detail: str) -> None:
    """job-quarantined's attempt loses its lease; then its quarantine, of ``detail``."""
    claimed = _event(lines, "job-quarantined", "claimed")
    expired = claimed | {"event": "lease_expired", "seq": claimed["seq"] + 1, "at": 50.5}
    lines.insert(lines.index(claimed) + 1, expired)
    quarantined = _event(lines, "job-quarantined", "quarantined")
    quarantined.update(seq=claimed["seq"] + 2, detail=detail)


def test_the_quarantine_of_attempts_exhausted_after_a_lost_lease_is_no_stale_write() -> None:
    # The last attempt allowed lost its lease (a crash); the redelivery found no attempt left
    # and quarantined the job: a verdict on the attempt, not a write under its lease.
    lines = clean_lines()
    _lease_lost_then_quarantined(lines, "attempts_exhausted")
    assert run_check(lines).passed


def test_a_handlers_quarantine_after_its_lease_expired_is_a_stale_write() -> None:
    lines = clean_lines()
    _lease_lost_then_quarantined(lines, "permanent_failure")
    assert failing(run_check(lines)) == {"stale_writes"}


def test_a_durable_attempt_ends_where_it_sleeps() -> None:
    # job-lim-1's attempt 1 sleeps (a durable sleep) instead of finishing: it ends there and
    # holds no slot while it sleeps; had it stayed open, 1, 2 and 3 would overlap at 22.5.
    lines = clean_lines()
    _event(lines, "job-lim-1", "succeeded")["event"] = "sleeping"
    _event(lines, "job-lim-1", "claimed")["at"] = 21.0
    _before_end(lines, _event(lines, "job-lim-1", "claimed") | {"event": "x", "seq": 99, "at": 23})
    report = run_check(lines)
    assert report.figures["open_attempts"] == 0
    assert "limit_exceeded" not in failing(report)
