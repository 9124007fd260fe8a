"""scripts/correctness.py renders docs/correctness.md from chaos summary lines: every claim is
there, figures come from the lines (a missing one is "—", never invented), a failed run reads
FAILED, figures of profiles not re-run survive, and every test a claim names exists (its file
read with ``ast``, as tests/unit/test_architecture_doc.py reads a module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts import correctness
from scripts.correctness import CLAIMS, MISSING, recorded, records_from, render
from tests.unit.test_architecture_doc import has_name

ROOT = Path(__file__).resolve().parents[2]

SHORT = (
    "chaos: seed=20240601 profile=short jobs=1500 accepted=1500 faults=kill_consumer:4,"
    "pause_consumer:3 lost=0 duplicate_results=0 limit_exceeded=0 violations=0 elapsed=80s"
)
FAILOVER = (
    "chaos: seed=20261202 profile=pg-failover-short jobs=600 primary_faults=3 standby=sync "
    "amcheck=clean lost=0 duplicate_results=0 violations=0"
)
CHECKER = "checker: lost=0 recovered=7 unexpected=0 duplicated=0 stale_writes=0"


def runs_of(text: str) -> dict[str, dict[str, object]]:
    return {run["profile"]: run for run in records_from(text, source="test")}


def test_every_claim_is_rendered_with_its_tests_and_profiles() -> None:
    document = render(runs_of(SHORT))
    for number, claim in enumerate(CLAIMS, start=1):
        assert f"## {number}. {claim.title}" in document
        assert claim.conditions in document
        for test in claim.tests:
            assert f"- `{test}`" in document


def test_the_figures_come_from_the_summary_and_the_checker_line() -> None:
    document = render(runs_of(f"{CHECKER}\n{SHORT}\n{FAILOVER}"))
    row = next(line for line in document.splitlines() if line.startswith("| `short` |"))
    assert row.split(" | ")[1:9] == [
        "20240601",
        "passed",
        "1500",
        "kill_consumer 4, pause_consumer 3",
        "0",
        "7",
        "0",
        "0",
    ]
    assert "`pg-failover-short` (seed 20261202, passed): primary_faults=3 standby=sync" in document
    assert "amcheck=clean" in document


def test_a_figure_no_line_gave_is_a_dash() -> None:
    document = render(runs_of(SHORT))  # no checker line
    row = next(line for line in document.splitlines() if line.startswith("| `short` |"))
    assert row.split(" | ")[5:9] == [MISSING] * 4
    assert f"checker:stale_writes={MISSING}" in document
    assert "`long`: not recorded yet (`make chaos`)" in document


def test_a_failed_run_reads_failed_not_passed() -> None:
    failed = SHORT.replace("violations=0", "violations=2").replace("lost=0", "lost=2")
    document = render(runs_of(failed))
    assert "| `short` | 20240601 | **FAILED** |" in document
    assert "(seed 20240601, **FAILED**)" in document
    assert "(seed 20240601, passed)" not in document


def test_the_runs_first_line_is_not_its_summary() -> None:
    first = "chaos: seed=20240601 profile=short workdir=/tmp/chaos"
    runs = records_from(f"{first}\n{SHORT}\nchaos: checker: lost=0 recovered=2", source="test")
    assert len(runs) == 1 and runs[0]["passed"]
    assert runs[0]["checker"] == {"lost": "0", "recovered": "2"}


def test_a_run_that_exited_non_zero_or_whose_checker_counted_a_loss_failed() -> None:
    assert not records_from(SHORT, exit_code=1, source="test")[0]["passed"]
    lossy = CHECKER.replace("lost=0", "lost=1")
    assert not records_from(f"{lossy}\n{SHORT}", source="test")[0]["passed"]
    assert records_from(f"{CHECKER}\n{SHORT}", exit_code=0, source="test")[0]["passed"]


def test_a_checker_line_naming_its_run_goes_with_that_run() -> None:
    named = CHECKER + " seed=20261202 profile=pg-failover-short"
    runs = runs_of(f"{SHORT}\n{FAILOVER}\n{named}".replace("recovered=7", "recovered=3"))
    assert runs["pg-failover-short"]["checker"]["recovered"] == "3"  # type: ignore[index]
    assert runs["short"]["checker"] is None


def test_the_figures_of_profiles_not_run_again_are_kept(tmp_path: Path) -> None:
    output = tmp_path / "correctness.md"
    long_lines = tmp_path / "long.txt"
    long_lines.write_text(SHORT.replace("profile=short", "profile=long").replace("1500", "10000"))
    assert correctness.main(["--from", str(long_lines), "--output", str(output)]) == 0
    short_lines = tmp_path / "short.txt"
    short_lines.write_text(SHORT)
    assert correctness.main(["--from", str(short_lines), "--output", str(output)]) == 0
    runs = recorded(output.read_text())
    assert set(runs) == {"long", "short"}
    assert runs["long"]["summary"]["jobs"] == "10000"


def test_a_file_without_a_summary_line_is_one_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = tmp_path / "empty.txt"
    lines.write_text("nothing here\n")
    assert correctness.main(["--from", str(lines), "--output", str(tmp_path / "c.md")]) == 2
    assert "no `chaos: seed=` line" in capsys.readouterr().err
    assert not (tmp_path / "c.md").exists()


def test_an_unknown_profile_is_refused_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert correctness.main(["--profiles", "short,nope", "--output", str(tmp_path / "c.md")]) == 2
    assert "no chaos profile nope" in capsys.readouterr().err


def missing_tests(names: list[str]) -> list[str]:
    """The ``file::function`` names whose file or function does not exist."""
    missing = []
    for name in names:
        file, _, function = name.partition("::")
        path = ROOT / file
        if not path.is_file() or not has_name(path.read_text(encoding="utf-8"), function):
            missing.append(name)
    return missing


def test_every_test_a_claim_names_exists() -> None:
    named = [test for claim in CLAIMS for test in claim.tests]
    assert named
    assert missing_tests(named) == []


def test_a_claim_naming_a_test_that_does_not_exist_is_caught() -> None:
    assert missing_tests(
        [
            "tests/unit/test_correctness_report.py::test_no_such_test",
            "tests/unit/no_such_file.py::test_every_test_a_claim_names_exists",
            "tests/unit/test_correctness_report.py::test_every_test_a_claim_names_exists",
        ]
    ) == [
        "tests/unit/test_correctness_report.py::test_no_such_test",
        "tests/unit/no_such_file.py::test_every_test_a_claim_names_exists",
    ]


def test_the_runners_checker_line_is_read_as_its_runs() -> None:
    # The line chaos/runner.py prints before its summary (chaos/history.py's checker_line),
    # whatever comes after it: the report takes the four counts from it.
    from chaos.history import CheckerVerdict, checker_line

    checker = CheckerVerdict({"lost": 0, "unexpected": 0, "duplicated": 0}, {"recovered": 4})
    line = checker_line(checker, 20261202, "pg-failover-short")
    assert line is not None
    runs = runs_of(f"{SHORT}\n{line}\n{FAILOVER}")
    assert runs["pg-failover-short"]["checker"] == {
        "seed": "20261202",
        "profile": "pg-failover-short",
        "lost": "0",
        "unexpected": "0",
        "duplicated": "0",
        "recovered": "4",
    }
    assert runs["short"]["checker"] is None
    assert checker_line(CheckerVerdict(failure="exit 2"), 1, "short") is None


def test_the_committed_page_is_what_the_script_makes_of_its_recorded_runs() -> None:
    # A claim changed in scripts/correctness.py (or the page edited by hand) without running
    # `make correctness` (or `--from` with the runs' lines) leaves a stale page: this fails.
    page = (ROOT / "docs" / "correctness.md").read_text()
    assert render(recorded(page)) == page
