"""The three-node cluster of ``scripts/servers.py up --rabbitmq-nodes 3``, the quorum queues'
replicas on it, and a broker URL that lists its nodes (docs/cluster.md)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, AbstractConnection
from yarl import URL

from jobrelay.broker.connection import connect_broker, connect_broker_robust
from jobrelay.broker.topology import declare_topology
from jobrelay.core.settings import Settings
from jobrelay.core.topology import DEFAULT_QUEUE, GROUP_SIZE_ARGUMENT, QUARANTINE_QUEUE
from tests.cluster.cluster_kit import NODES, Cluster, servers_command
from tests.support.processes import jobrelay_env, run_cli
from tests.support.system import System, running_system
from tests.support.waiting import eventually


@asynccontextmanager
async def topology(settings: Settings, group_size: int | None) -> AsyncIterator[AbstractChannel]:
    """A channel on which jobrelay's topology was just declared, as a service declares it."""
    connection = await connect_broker(settings.amqp_url, name="jobrelay-test")
    try:
        channel = await connection.channel()
        await declare_topology(channel, delivery_limit=50, group_size=group_size)
        yield channel
    finally:
        await connection.close()


def node_port(connection: AbstractConnection) -> int | None:
    """The port of the node the connection is on (aio-pika's connections keep their URL)."""
    url: URL = getattr(connection, "url")  # noqa: B009 - not in aio-pika's abstract class
    return url.port


# --- the cluster and its queues -----------------------------------------------------------------


def test_the_cluster_forms_with_every_node_running(cluster: Cluster) -> None:
    everyone = {node.name for node in cluster.nodes}
    assert len(everyone) == NODES
    for node in cluster.nodes:  # each node sees the same cluster
        assert cluster.running_nodes(node.number) == everyone
    assert all(state.startswith("running") for state in cluster.status().values())


async def test_the_work_and_quarantine_queues_have_a_replica_on_every_node(
    cluster: Cluster, cluster_settings: Settings, cluster_vhost: str
) -> None:
    async with topology(cluster_settings, group_size=NODES):
        pass
    everyone = {node.name for node in cluster.nodes}
    for queue in (DEFAULT_QUEUE, QUARANTINE_QUEUE):
        seen = cluster.queue(cluster_vhost, queue, via=2)
        assert seen["type"] == "quorum"
        assert set(seen["members"]) == everyone
        assert seen["arguments"][GROUP_SIZE_ARGUMENT] == NODES


async def test_without_a_group_size_the_broker_still_puts_a_replica_on_every_node(
    cluster: Cluster, cluster_settings: Settings, cluster_vhost: str
) -> None:
    async with topology(cluster_settings, group_size=None):
        pass
    seen = cluster.queue(cluster_vhost, DEFAULT_QUEUE, via=3)
    assert set(seen["members"]) == {node.name for node in cluster.nodes}
    assert GROUP_SIZE_ARGUMENT not in seen["arguments"]


@pytest.mark.parametrize(("made_with", "declared_with"), [(None, 3), (3, None), (1, 3)])
async def test_a_queue_made_with_another_group_size_is_taken_as_it_is(
    cluster: Cluster,
    cluster_settings: Settings,
    cluster_vhost: str,
    caplog: pytest.LogCaptureFixture,
    made_with: int | None,
    declared_with: int | None,
) -> None:
    # RabbitMQ 3.10 refuses to redeclare a quorum queue with another group size (one where it
    # had none, none where it had one, or another number): an upgrade that sets
    # JOBRELAY_QUORUM_GROUP_SIZE, or a service deployed without it, must not fail every start.
    async with topology(cluster_settings, group_size=made_with):
        pass
    members_before = cluster.queue(cluster_vhost, DEFAULT_QUEUE, via=1)["members"]

    with caplog.at_level(logging.WARNING, logger="jobrelay.broker.topology"):
        async with topology(cluster_settings, group_size=declared_with) as channel:
            exchange = await channel.get_exchange("jobrelay.jobs")
            await exchange.publish(aio_pika.Message(b"{}"), routing_key="any.type")
            queue = await channel.get_queue(DEFAULT_QUEUE)
            message = await eventually(lambda: queue.get(fail=False), what="the message")
            await message.ack()

    assert cluster.queue(cluster_vhost, DEFAULT_QUEUE, via=1)["members"] == members_before
    warned = [r for r in caplog.records if getattr(r, "event", "") == "quorum_group_size_differs"]
    assert {getattr(record, "queue", "") for record in warned} == {DEFAULT_QUEUE, QUARANTINE_QUEUE}


async def test_services_with_a_group_size_run_jobs_on_queues_made_without_one(
    cluster_settings: Settings, system: System, tmp_path: Path
) -> None:
    async with topology(cluster_settings, group_size=None):  # as an older jobrelay made them
        pass
    job_id = await system.submit({"type": "demo.sleep", "payload": {"seconds": 0}})

    with running_system(cluster_settings, tmp_path / "logs") as services:  # group size 3
        await system.wait_for("succeeded", job_id, what="the job, through the old queues")
        assert all(service.alive() for service in services)
        logs = "".join(service.output() for service in services)
    assert "quorum_group_size_differs" in logs


# --- a list of broker URLs ----------------------------------------------------------------------


async def test_with_the_first_node_stopped_connections_go_to_the_second_and_move_there(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    moving = await connect_broker_robust(cluster_settings.amqp_url, seconds=5)
    try:
        channel = await moving.channel()
        queue = await channel.declare_queue(  # replicated, as jobrelay's queues are
            "jobrelay.test.moves", durable=True, arguments={"x-queue-type": "quorum"}
        )
        assert node_port(moving) == cluster.node(1).amqp_port

        cluster.fault("rabbit-stop-app", 1)

        plain = await connect_broker(cluster_settings.amqp_url, seconds=5)
        robust = await connect_broker_robust(cluster_settings.amqp_url, seconds=5)
        assert node_port(plain) == cluster.node(2).amqp_port
        assert node_port(robust) == cluster.node(2).amqp_port
        await plain.close()
        await robust.close()

        async def moved() -> bool:
            return moving.connected.is_set() and node_port(moving) != cluster.node(1).amqp_port

        await eventually(moved, within=60, what="the robust connection on another node")

        async def purged() -> bool:  # its channel and queue, restored on the new node, work
            try:
                await queue.purge()
            except Exception:  # the queue was still electing its leader: the broker closed
                return False  # the connection, which moved on again
            return True

        await eventually(purged, within=60, what="the queue purged through the moved connection")
        await queue.delete(if_unused=False, if_empty=False)
    finally:
        await moving.close()


async def test_a_url_list_whose_first_node_is_frozen_connects_to_the_second(
    cluster: Cluster, cluster_settings: Settings
) -> None:
    cluster.fault("rabbit-pause", 1)  # its port accepts, nothing answers: the timeout decides
    try:
        plain = await connect_broker(cluster_settings.amqp_url, seconds=2)
        assert node_port(plain) == cluster.node(2).amqp_port
        await plain.close()
    finally:
        cluster.fault("rabbit-resume", 1)


@pytest.mark.parametrize(
    ("urls", "expected"),
    [  # the other malformed lists: tests/unit/test_amqp_urls.py
        ("amqp://u:sentinel-pw@h1:5672/,http://h2/", "entry 2 of 2 is not an AMQP URL"),
        ("amqp://u:sentinel-pw@h1/a,amqp://u:sentinel-pw@h2/b", "different vhosts"),
    ],
)
def test_a_malformed_url_list_is_one_clear_line_without_the_password(
    urls: str, expected: str
) -> None:
    result = run_cli(jobrelay_env({"JOBRELAY_AMQP_URL": urls}), "consumer")

    assert result.returncode != 0
    (line,) = result.stderr.strip().splitlines()
    assert "JOBRELAY_AMQP_URL" in line and expected in line
    assert "sentinel-pw" not in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_a_node_the_servers_do_not_have_is_one_clear_line(cluster: Cluster) -> None:
    result = servers_command(cluster.base, "rabbit-kill", str(NODES + 1))

    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"servers: error: no RabbitMQ node {NODES + 1}: the servers in {cluster.base} have "
        f"{NODES} nodes (1 to {NODES})"
    )
    assert all(state.startswith("running") for state in cluster.status().values())


def test_a_malformed_number_of_nodes_is_refused_before_anything_starts(tmp_path: Path) -> None:
    result = servers_command(tmp_path, "up", env={"JOBRELAY_RABBITMQ_NODES": "three"})

    assert result.returncode == 1
    assert "JOBRELAY_RABBITMQ_NODES must be a number of nodes" in result.stderr
    assert not (tmp_path / "state.json").exists()
