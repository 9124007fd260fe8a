"""What ``benchmarks/peers.py`` reads from ``benchmarks/e2e.py --json`` and prints beside the
peers: the medians e2e writes, and the ratios jobrelay/peer taken on them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import e2e, peers


def run(system: str, steady: float, cpu: dict[str, float]) -> e2e.Throughput:
    """A run of ``steady`` jobs/s: 1,001 completions one ``1/steady`` second apart."""
    result = e2e.Throughput(system, 1001, 10.0, 0.0, 1000 / steady)
    result.cpu = cpu
    return result


def test_e2e_json_holds_the_median_rate_and_cpu_of_each_process_per_system() -> None:
    results = e2e.Results(
        jobrelay=[
            run("jobrelay", 1000, {"dispatcher": 200, "postgres": 500}),
            run("jobrelay", 1200, {"dispatcher": 300, "postgres": 400}),
            run("jobrelay", 1400, {"dispatcher": 250, "postgres": 450}),
        ],
        celery=[run("celery", 2000, {"celery": 500})],
    )

    summary = json.loads(json.dumps(results.summary()))

    assert summary["jobrelay"]["steady"] == pytest.approx(1200)
    assert summary["jobrelay"]["cpu"] == {"dispatcher": 250, "postgres": 450}
    assert summary["celery"] == {"steady": pytest.approx(2000), "cpu": {"celery": 500}}


def test_the_ratios_are_jobrelay_over_each_peer_on_the_total_cpu_per_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ours = {
        "jobrelay": {"steady": 1000.0, "cpu": {"consumers": 600.0, "postgres": 400.0}},
        "celery": {"steady": 2000.0, "cpu": {"celery": 500.0}},
    }
    path = tmp_path / "e2e.json"
    path.write_text(json.dumps(ours))
    measured = {"procrastinate": [run("procrastinate", 500, {"worker": 1200, "postgres": 800})]}

    peers.report(measured, str(path))

    lines = capsys.readouterr().out.splitlines()
    [procrastinate] = [line for line in lines if "procrastinate" in line and "jobs/s x" in line]
    assert "jobs/s x2.00" in procrastinate
    assert "CPU per job x0.50" in procrastinate  # 1,000 ms beside 2,000 ms
    [celery] = [line for line in lines if "celery (no results)" in line and "jobs/s x" in line]
    assert "jobs/s x0.50" in celery
    assert "CPU per job x2.00" in celery


def test_celerys_result_backend_url_names_the_psycopg_3_driver() -> None:
    url = "postgresql+psycopg://user:secret@127.0.0.1:5432/bench"

    assert (
        peers.celery_backend_url(url) == "db+postgresql+psycopg://user:secret@127.0.0.1:5432/bench"
    )
