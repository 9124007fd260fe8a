"""A three-node RabbitMQ cluster for the session (docs/cluster.md), beside the suite's own
servers: the jobs live in the suite's PostgreSQL (a fresh database per test, as everywhere), the
messages on the cluster (a fresh vhost per test).

The cluster is the one of the environment when ``scripts/servers.py`` runs one there
(``JOBRELAY_RABBITMQ_NODES=3 make test``); otherwise ``scripts/servers.py up --rabbitmq-nodes 3``
starts one in its own servers directory (``JOBRELAY_CLUSTER_SERVERS_DIR``, else a temporary
one) and ``down --delete-data`` removes it at the end. A cluster that does not start fails the
session: these tests never skip.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobrelay.core.settings import Settings
from tests.cluster.cluster_kit import NODES, Cluster, ClusterError
from tests.conftest import FAST_TIMINGS
from tests.support.servers import create_vhost, delete_vhost


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    reused = Cluster.from_environment()
    if reused is not None:
        yield reused
        return
    configured = os.environ.get("JOBRELAY_CLUSTER_SERVERS_DIR")
    if configured:
        base = Path(configured)
    else:
        base = Path(tempfile.mkdtemp(prefix="jobrelay-cluster-"))
        base.chmod(0o755)  # PostgreSQL runs as the postgres user, and must reach its data dir
    try:
        started = Cluster.start(base, NODES)
    except ClusterError as error:
        pytest.fail(f"the RabbitMQ cluster did not start: {error} (logs: {base})", pytrace=False)
    try:
        yield started
    finally:
        started.delete()  # its data; the logs stay in the servers directory


@pytest.fixture(autouse=True)
def whole_cluster(cluster: Cluster) -> Iterator[None]:
    """Every test starts, and leaves, with every node serving (a test that failed half-way
    through a fault does not break the next one)."""
    cluster.heal()
    yield
    cluster.heal()


@pytest.fixture
def cluster_vhost(cluster: Cluster) -> Iterator[str]:
    vhost = f"jobrelay-cluster-{os.urandom(5).hex()}"
    create_vhost(cluster.api_url(), vhost)
    yield vhost
    delete_vhost(cluster.api_url(), vhost)


@pytest.fixture
def cluster_settings(settings: Settings, cluster: Cluster, cluster_vhost: str) -> Settings:
    """The test's settings (its own database) on its own vhost of the cluster, every node
    listed, node 1 first, with the fast timings and a replica of each queue on every node."""
    return settings.model_copy(
        update={
            "amqp_url": cluster.amqp_url(cluster_vhost),
            "quorum_group_size": NODES,
            **FAST_TIMINGS,
        }
    )
