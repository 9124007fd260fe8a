"""One chaos run as the test tiers make it (``python -m chaos`` as a process), checked the
same way: it must exit 0 and print one summary line with nothing lost or doubled, on which the
independent checker agrees; its history (docs/history.md) is kept beside its work directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.servers import NoServers, from_environment

ROOT = Path(__file__).resolve().parents[2]


def require_servers_script(what: str) -> None:
    """Fail, never skip, unless the servers are scripts/servers.py's: the chaos runner needs
    its fault helpers (and its servers dir, where a failover run starts its Patroni cluster)."""
    servers = from_environment()
    if servers is None or not servers.servers_dir:
        pytest.fail(
            f"{NoServers.__name__}: {what} needs servers from scripts/servers.py (run `make test`)",
            pytrace=False,
        )


def history_of(workdir: Path) -> Path:
    """Where ``run_chaos_profile`` has a passing run's history copied: beside its workdir."""
    return workdir.parent / f"{workdir.name}-history.jsonl"


def run_chaos_profile(
    profile: str, seed: int, workdir: Path, *, env: dict[str, str] | None = None, timeout: float
) -> str:
    """Run ``profile`` with ``seed``; returns its summary line, having asserted that the run
    passed and that the line says ``lost=0``, ``duplicate_results=0`` and ``checker=agree``.
    The run's history is copied to ``history_of(workdir)``."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "chaos",
            "--profile",
            profile,
            "--seed",
            str(seed),
            "--workdir",
            str(workdir),
            "--history",
            str(history_of(workdir)),
        ],
        cwd=ROOT,
        env={**(env if env is not None else os.environ), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    summary = [line for line in done.stdout.splitlines() if line.startswith("chaos: seed=")]
    print(done.stdout)
    print(done.stderr[-20000:], file=sys.stderr)
    assert done.returncode == 0, f"chaos run failed (seed {seed}):\n{done.stderr[-8000:]}"
    assert len(summary) == 1
    assert " lost=0 " in summary[0] and " duplicate_results=0 " in summary[0]
    assert " checker=agree " in summary[0]
    return summary[0]
