"""The chaos profile ``cluster-short``, as CI runs it: the whole system on the three-node cluster,
under a fixed seed's node faults (stop, kill, pause one node at a time) and process faults, must
end with nothing lost, doubled or wrongly quarantined (``python -m chaos`` exits 0). The long
profile (``make chaos-cluster``) is the same with 10,000 jobs and 36 node faults."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cluster.cluster_kit import Cluster
from tests.support.chaos_run import run_chaos_profile

SEED = 20261201


def cluster_environment(cluster: Cluster) -> dict[str, str]:
    """This process's environment with the cluster's servers as the only JOBRELAY_* variables
    (the chaos runner takes its database, its nodes and its fault helpers from them)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    return environment | cluster.environment()


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_cluster_short_chaos_profile_loses_and_doubles_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    summary = run_chaos_profile(
        "cluster-short", SEED, tmp_path / "chaos", env=cluster_environment(cluster), timeout=450
    )
    assert " rabbitmq_nodes=3 " in summary and " node_faults=6 " in summary
