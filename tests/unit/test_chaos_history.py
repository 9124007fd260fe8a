"""The chaos run's history writer (chaos/history.py, docs/history.md): every line one JSON
object with its ``record`` first, in the order written; the Submitter's tries and answers
paired by ``n`` (a 5xx and a broken connection recorded as such, a cancel by its job id), over
httpx's MockTransport (a unit test of the recorder, not of the API); and the rule that holds
the independent checker's counts against chaos/checks.py's verdict."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from chaos import workload
from chaos.checks import BatchRun, LogFacts, StepRun, Verdict
from chaos.history import (
    HISTORY_FILE,
    CheckerVerdict,
    History,
    compare,
    run_checker,
    summary_parts,
)
from chaos.workload import (
    Kind,
    Ledger,
    Planned,
    PlannedStep,
    PlannedWorkflow,
    Submission,
    Submitter,
)

JOB_ID = "0193aaaa-0000-7000-8000-000000000001"


def lines(history: History) -> list[dict[str, Any]]:
    history.close()
    return [json.loads(line) for line in history.path.read_text().splitlines()]


def test_every_line_is_one_object_with_its_record_first_in_the_order_written(
    tmp_path: Path,
) -> None:
    history = History(tmp_path / "run" / HISTORY_FILE)
    history.run("short", 7)
    n = history.request("submit", key="chaos-7-1", body={"type": "demo.sleep", "payload": {}})
    history.answer(n, 202, {"id": JOB_ID, "state": "queued", "payload": {"big": "x" * 100}})
    history.signal(JOB_ID, "go", "chaos-7-1:1", "sent")
    history.write_effects(
        [StepRun(JOB_ID, "first", 1, "nonce-1")],
        [BatchRun("chaos-7-2", "call-1", 3, "written")],
        LogFacts(reports_written=Counter({JOB_ID: 2}), reports_found=Counter({JOB_ID: 1})),
    )
    history.write_broker({"jobrelay.jobs.default": 0}, Counter({JOB_ID: 1}), malformed=1)
    history.write("end", at=1.0)

    written = lines(history)

    assert history.lines == len(written) == 13
    assert all(next(iter(line)) == "record" for line in written)
    assert [line["record"] for line in written] == [
        "run",
        "request",
        "answer",
        "signal",
        "effect",
        "effect",
        "effect",
        "effect",
        "effect",
        "queue",
        "quarantine_message",
        "quarantine_message",
        "end",
    ]
    run, request, answer = written[:3]
    assert run["format"] == 1 and run["profile"] == "short" and run["seed"] == 7
    assert run["limits"] == {"chaos.limited": 2} and run["batch_sizes"] == {"chaos.batch": 20}
    assert request["body"] == {"type": "demo.sleep", "payload": {}}
    assert answer == {
        "record": "answer",
        "n": request["n"],
        "at": answer["at"],
        "status": 202,
        "id": JOB_ID,
        "jobs": None,
        "error": None,
    }  # the answer's document (its payload) is not written again
    assert [(e["effect"], e.get("outcome")) for e in written[4:9]] == [
        ("step_run", None),
        ("batch_call", "written"),
        ("report", "written"),
        ("report", "written"),
        ("report", "found"),
    ]
    assert [line["job_id"] for line in written[10:12]] == [JOB_ID, None]


def test_a_history_is_truncated_when_its_run_starts(tmp_path: Path) -> None:
    path = tmp_path / HISTORY_FILE
    path.write_text('{"record": "end", "at": 0}\n')
    history = History(path)
    history.run("short", 1)
    assert [line["record"] for line in lines(history)] == ["run"]


def submitter(tmp_path: Path, answers: list[Any]) -> tuple[Submitter, History, list[str]]:
    """A Submitter whose requests get ``answers`` in turn (a status and document, or an
    exception to raise), recording into a history in ``tmp_path``; and the paths asked."""
    history = History(tmp_path / HISTORY_FILE)
    asked: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        given = answers.pop(0)
        if isinstance(given, Exception):
            raise given
        status, document = given
        return httpx.Response(status, json=document)

    sender = Submitter("http://api.test", "token", Ledger(), history=history)
    sender.client = httpx.AsyncClient(
        base_url="http://api.test", transport=httpx.MockTransport(answer)
    )
    return sender, history, asked


@pytest.fixture(autouse=True)
def no_retry_pause(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workload, "RETRY_PAUSE", (0.0, 0.0))


async def test_each_try_and_its_answer_are_paired_by_n(tmp_path: Path) -> None:
    job = Planned("chaos-7-1", Kind.SLEEP, "demo.sleep", {"seconds": 0.01}, cancel=True)
    sender, history, asked = submitter(
        tmp_path,
        [
            (503, {"title": "overloaded"}),
            httpx.ConnectError("refused"),
            (202, {"id": JOB_ID}),
            (200, {"id": JOB_ID, "state": "cancelled"}),
        ],
    )

    await sender.submit(Submission(job, duplicate=False))
    await sender.close()

    written = lines(history)
    requests = [line for line in written if line["record"] == "request"]
    answers = {line["n"]: line for line in written if line["record"] == "answer"}
    assert [r["n"] for r in requests] == [1, 2, 3, 4] and sorted(answers) == [1, 2, 3, 4]
    assert [r["op"] for r in requests] == ["submit"] * 3 + ["cancel"]
    assert {r["key"] for r in requests[:3]} == {"chaos-7-1"}
    assert all(r["body"] == job.body() for r in requests[:3])
    assert [(answers[n]["status"], answers[n]["error"]) for n in (1, 2, 3, 4)] == [
        (503, None),
        (None, "ConnectError"),
        (202, None),
        (200, None),
    ]
    assert answers[1]["id"] is None and answers[3]["id"] == JOB_ID
    cancel = requests[3]
    assert cancel["job_id"] == JOB_ID and "key" not in cancel and "body" not in cancel
    assert asked[-1] == f"/v1/jobs/{JOB_ID}/cancel"


async def test_a_workflow_answer_names_its_jobs_by_ref(tmp_path: Path) -> None:
    step = Planned("chaos-7-wf-1:a", Kind.SLEEP, "demo.sleep", {"seconds": 0.0})
    workflow = PlannedWorkflow("chaos-7-wf-1", (PlannedStep("a", (), step),))
    document = {"id": "wf-1", "jobs": {"a": {"id": JOB_ID, "state": "queued"}}}
    sender, history, _ = submitter(tmp_path, [(202, document)])

    await sender.submit(Submission(workflow, duplicate=False))
    await sender.close()

    request, answer = lines(history)
    assert request["op"] == "submit_workflow" and request["key"] == "chaos-7-wf-1"
    assert answer["id"] == "wf-1" and answer["jobs"] == {"a": JOB_ID}


async def test_a_submitter_without_a_history_records_nothing() -> None:
    sender = Submitter("http://api.test", "token", Ledger())
    sender.client = httpx.AsyncClient(
        base_url="http://api.test",
        transport=httpx.MockTransport(lambda _: httpx.Response(202, json={"id": JOB_ID})),
    )
    job = Planned("chaos-7-1", Kind.SLEEP, "demo.sleep", {"seconds": 0.01})
    await sender.submit(Submission(job, duplicate=False))
    await sender.close()
    assert sender.history is None
    assert sender.ledger.records["chaos-7-1"].ids == {JOB_ID}


# --- the agreement ------------------------------------------------------------------------------


def test_both_zero_or_both_not_is_agreement() -> None:
    verdict = Verdict()
    verdict.fail("lost", "job x still queued")
    checker = CheckerVerdict(
        {"lost": 3, "duplicated": 0},
        {"recovered": 2},
        [{"count": "lost", "message": "key k: job x did not end"}],
    )

    assert compare(verdict, checker) == "agree"
    assert "checkers_disagree" not in verdict.violations
    assert verdict.violations["checker_found"] == ["lost: key k: job x did not end"]
    assert summary_parts("agree", checker) == [
        "checker=agree",
        "checker_lost=3",
        "checker_recovered=2",
        "checker_unexpected=0",
        "checker_duplicated=0",
    ]


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [
        ("lost", "lost"),
        ("duplicate_effects", "duplicated"),
        ("duplicate_jobs", "keys_with_two_jobs"),
        ("step_run_again", "step_run_again"),
    ],
)
def test_a_count_one_checker_finds_and_the_other_does_not_fails_the_run(
    ours: str, theirs: str
) -> None:
    found_by_us = Verdict()
    found_by_us.fail(ours, "something")
    assert compare(found_by_us, CheckerVerdict()) == "disagree"
    assert found_by_us.violations["checkers_disagree"] == [
        f"{ours}=1 (chaos/checks.py), {theirs}=0 (checker)"
    ]

    found_by_it = Verdict()
    checker = CheckerVerdict({theirs: 2}, {}, [{"count": theirs, "message": "something"}])
    assert compare(found_by_it, checker) == "disagree"
    assert (
        f"{ours}=0 (chaos/checks.py), {theirs}=2 (checker)"
        in (found_by_it.violations["checkers_disagree"])
    )
    assert not found_by_it.ok


def test_a_checker_that_could_not_check_fails_the_run() -> None:
    verdict = Verdict()
    checker = CheckerVerdict(failure="exit 2: not a history")
    assert compare(verdict, checker) == "failed"
    assert verdict.violations["checker_failed"] == ["exit 2: not a history"]
    assert summary_parts("failed", checker)[:2] == ["checker=failed", "checker_lost=-"]


def fake_checker(root: Path, body: str) -> Path:
    """A package ``checker`` under ``root`` whose ``python -m checker`` runs ``body``."""
    package = root / "checker"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "__main__.py").write_text("import json, sys\n" + textwrap.dedent(body))
    return root


@pytest.mark.parametrize(
    ("body", "failure"),
    [
        ("print('not a history', file=sys.stderr); sys.exit(2)", "exit 2: not a history"),
        ("raise RuntimeError('boom')", "exit 1, unreadable output"),
        ("print('counts: none'); sys.exit(0)", "exit 0, unreadable output"),
        (
            "print(json.dumps({'counts': {'lost': 1}, 'violations': []})); sys.exit(1)",
            "exit 1 with 0 violations",
        ),
    ],
)
def test_a_checker_that_crashes_or_answers_nonsense_is_a_failure(
    tmp_path: Path, body: str, failure: str
) -> None:
    verdict = run_checker(tmp_path / HISTORY_FILE, fake_checker(tmp_path, body))
    assert verdict.failure is not None and verdict.failure.startswith(failure)


def test_the_checker_is_given_the_history_and_its_document_read(tmp_path: Path) -> None:
    body = """
    assert sys.argv[1:] == [sys.argv[1], "--json"] and sys.argv[1].endswith("history.jsonl")
    print(json.dumps({"counts": {"lost": 0, "duplicated": 1}, "figures": {"recovered": 4},
                      "violations": [{"count": "duplicated", "message": "twice"}]}))
    sys.exit(1)
    """
    verdict = run_checker(tmp_path / HISTORY_FILE, fake_checker(tmp_path, body))
    assert verdict.failure is None
    assert verdict.counts == {"lost": 0, "duplicated": 1} and verdict.count("recovered") == 4
    assert verdict.violations == [{"count": "duplicated", "message": "twice"}]
