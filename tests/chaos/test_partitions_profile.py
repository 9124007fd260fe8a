"""The short partitions profile, as CI runs it (``make test-partitions``): a three-node RabbitMQ
cluster whose nodes live in network namespaces is cut apart by each of Jepsen's four scenarios
once, for 10 s, under load; the run must end with nothing lost, doubled or violated.

The servers are the environment's when they are such a cluster (``scripts/servers.py run
--rabbitmq-nodes 3 --rabbitmq-netns``); else the run starts its own in ``tmp_path``. It needs
root (network namespaces, nftables): without it the test fails, never skips."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.support.chaos_run import run_chaos_profile

SEED = 20261205


def partition_environment(tmp_path: Path) -> dict[str, str]:
    """The environment's cluster in namespaces, else one the run starts (and deletes)."""
    if os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None:
        pytest.fail(
            "the partitions profile needs root, iproute2 and nftables (network namespaces)",
            pytrace=False,
        )
    if os.environ.get("JOBRELAY_RABBITMQ_NETNS") == "1":
        return dict(os.environ)
    # None of the environment's servers: the run starts its own (python -m chaos does so when
    # it finds no JOBRELAY_* URLs) in a servers dir of the test's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    return {**env, "JOBRELAY_SERVERS_DIR": str(tmp_path / "servers")}


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_partitions_chaos_profile_loses_and_doubles_nothing(tmp_path: Path) -> None:
    env = partition_environment(tmp_path)
    summary = run_chaos_profile("partitions-short", SEED, tmp_path / "chaos", env=env, timeout=580)
    assert " violations=0 " in summary
    assert " partitions=4 " in summary
    for scenario in ("halves", "random_halves", "majorities_ring", "random_node"):
        assert f"partition_{scenario}_10s:1" in summary
