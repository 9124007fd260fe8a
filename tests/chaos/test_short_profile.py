"""The short chaos profile, as CI runs it: the whole system under a fixed seed's faults must end
with nothing lost, doubled or wrongly quarantined, no key of ``chaos.limited`` over its
concurrency limit, no workflow job started before its parents succeeded or released twice, and
no durable step run again after it was recorded, signal returned to two waits or sleeper woken
before its time, no two jobs of a sequence at once nor one started before the ones ahead of it
were done, and each batch job's effect written once (``python -m chaos`` exits 0); its history
is whole (docs/history.md) and the independent checker agrees."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.chaos_run import history_of, require_servers_script, run_chaos_profile

SEED = 20240601


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_short_chaos_profile_loses_and_doubles_nothing(tmp_path: Path) -> None:
    require_servers_script("the chaos run")
    summary = run_chaos_profile("short", SEED, tmp_path / "chaos", timeout=400)
    assert " checker=agree " in summary
    records = [json.loads(line)["record"] for line in history_of(tmp_path / "chaos").open()]
    assert records[0] == "run" and records[-1] == "end"
    for record in ("request", "answer", "signal", "effect", "job", "result", "event", "queue"):
        assert record in records
    assert " limit_exceeded=0 " in summary
    assert " limited_attempts=0 " not in summary  # the limited share did run
    assert " child_started_before_parent_finished=0 " in summary
    assert " released_twice=0 " in summary
    assert " workflow_jobs=0 " not in summary  # the workflows' share did run
    assert " step_run_again=0 " in summary
    assert " signal_returned_twice=0 " in summary
    assert " woke_early=0 " in summary
    assert " duplicate_children=0 " in summary
    for share in ("durable_jobs", "sleeps", "signals_taken", "children"):
        assert f" {share}=0 " not in summary  # the durable share did run
    assert " sequence_overlaps=0 " in summary
    assert " sequence_order=0 " in summary
    assert " batch_oversized=0 " in summary
    for share in ("sequence_jobs", "sequence_attempts", "batch_jobs", "batch_calls"):
        assert f" {share}=0 " not in summary  # the sequences' and the batch jobs' shares ran
