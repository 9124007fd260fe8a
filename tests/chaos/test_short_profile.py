"""The short chaos profile, as CI runs it: the whole system under a fixed seed's faults must end
with nothing lost, doubled or wrongly quarantined (``python -m chaos`` exits 0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import NoServers, from_environment

ROOT = Path(__file__).resolve().parents[2]
SEED = 20240601


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_short_chaos_profile_loses_and_doubles_nothing(tmp_path: Path) -> None:
    servers = from_environment()
    if servers is None or not servers.servers_dir:
        # Fail, never skip: the runner needs the servers of scripts/servers.py (fault helpers).
        pytest.fail(
            f"{NoServers.__name__}: the chaos run needs servers from scripts/servers.py "
            "(run `make test`)",
            pytrace=False,
        )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos",
            "--profile",
            "short",
            "--seed",
            str(SEED),
            "--workdir",
            str(tmp_path / "chaos"),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=400,
    )
    summary = [line for line in done.stdout.splitlines() if line.startswith("chaos: seed=")]
    print(done.stdout)
    print(done.stderr[-20000:], file=sys.stderr)
    assert done.returncode == 0, f"chaos run failed (seed {SEED}):\n{done.stderr[-8000:]}"
    assert len(summary) == 1
    assert " lost=0 " in summary[0] and " duplicate_results=0 " in summary[0]
