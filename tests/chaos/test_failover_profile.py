"""The short failover profile, as CI runs it: PostgreSQL under Patroni (a primary and a
synchronous standby, started by the run itself in the servers dir of scripts/servers.py) has its
primary killed, stopped and switched over under load, one of each, beside process faults; the run
must end with nothing lost, doubled or wrongly quarantined, and pg_amcheck on the new primary
finding nothing (``python -m chaos`` exits 0)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.chaos_run import require_servers_script, run_chaos_profile

SEED = 20261202


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_failover_chaos_profile_loses_and_doubles_nothing(tmp_path: Path) -> None:
    require_servers_script("the failover chaos run")
    summary = run_chaos_profile("pg-failover-short", SEED, tmp_path / "chaos", timeout=400)
    assert " primary_faults=3 " in summary
    assert " standby=sync " in summary
    assert " violations=0 " in summary
    assert " amcheck=clean " in summary  # pg_amcheck on the new primary found nothing
    for kind in ("primary_kill", "primary_stop", "primary_switchover"):
        assert f"{kind}:1" in summary
