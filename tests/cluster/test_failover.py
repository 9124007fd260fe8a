"""A dispatcher and a consumer (real processes) on a three-node cluster keep jobs flowing while
the node they are connected to is stopped (``stop_app``), killed (SIGKILL) or frozen (SIGSTOP):
they move to another node, every job succeeds, none is lost and none has its result stored
twice or its effect done twice (docs/cluster.md). With a node stopped — the one holding the
queues' leaders — publishing, consuming, quarantining, replaying, ``/readyz`` and the
healthcheck all work."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos import checks
from jobrelay.core.settings import Settings
from jobrelay.core.topology import DEFAULT_QUEUE, QUARANTINE_QUEUE, type_queue_name
from tests.cluster.cluster_kit import Cluster
from tests.conftest import api_client
from tests.support.processes import Service
from tests.support.queues import depth_is
from tests.support.system import System, cli, cli_json, running_system
from tests.support.waiting import eventually

EXPORT = "catalog.export"
WARM_UP, DURING, AFTER = 5, 20, 5
# Long enough for the services to leave a frozen node (three heartbeats: cluster_kit), find
# another and drain what waited.
FLOW_SECONDS = 120.0


@dataclass(frozen=True)
class Fault:
    name: str
    inject: str
    heal: str


# Stopped (stop_app): the last test, which also quarantines and replays meanwhile.
FAULTS = [
    Fault("killed", "rabbit-kill", "rabbit-start"),
    Fault("frozen", "rabbit-pause", "rabbit-resume"),
]


async def submit_exports(system: System, count: int, tag: str) -> list[str]:
    return [
        await system.submit({"type": EXPORT, "payload": {"course": f"{tag}-{n}"}})
        for n in range(count)
    ]


async def services_node(cluster: Cluster, vhost: str, via: int) -> int | None:
    """The one node the dispatcher and the consumer are both connected to; None while the
    management API (its figures lag by seconds) shows them elsewhere or nowhere."""
    dispatcher = cluster.connected_to(vhost, "jobrelay-dispatcher", via)
    consumer = cluster.connected_to(vhost, "jobrelay-consumer", via)
    if len(dispatcher) != 1 or dispatcher != consumer:
        return None
    return cluster.number_of(dispatcher.pop())


async def all_succeeded(system: System, ids: list[str]) -> bool:
    return all([await system.state_of(job_id) == "succeeded" for job_id in ids])


def assert_each_ran_once(settings: Settings, ids: list[str], services: list[Service]) -> None:
    """Every job succeeded with one result and one report, as chaos/checks.py counts them."""
    snapshot = checks.read_database(settings.database_url)
    logs = checks.read_logs([service.log_path for service in services])
    assert Counter(snapshot.jobs[job_id].state for job_id in ids) == {"succeeded": len(ids)}
    assert {job_id: snapshot.result_counts[job_id] for job_id in ids} == dict.fromkeys(ids, 1)
    assert all(logs.reports_written[job_id] <= 1 for job_id in ids), logs.reports_written
    for job_id in ids:
        assert logs.reports_written[job_id] + logs.reports_found[job_id] >= 1, job_id
        assert (settings.results_dir / snapshot.results[job_id]["key"]).exists(), job_id
    assert snapshot.unpublished == 0
    assert not logs.bugs, logs.bugs


async def warmed_up(system: System, cluster: Cluster, vhost: str) -> tuple[list[str], int]:
    """The first jobs run (the services are connected and consuming), and the node the
    services are on."""
    ids = await submit_exports(system, WARM_UP, "warm-up")
    await system.wait_for("succeeded", *ids, what="the first jobs")
    target = await eventually(
        lambda: services_node(cluster, vhost, via=2), what="the services' node"
    )
    return ids, target


@pytest.mark.parametrize("fault", FAULTS, ids=[fault.name for fault in FAULTS])
async def test_jobs_keep_flowing_while_the_services_node_is(
    cluster: Cluster,
    cluster_settings: Settings,
    cluster_vhost: str,
    system: System,
    tmp_path: Path,
    fault: Fault,
) -> None:
    with running_system(cluster_settings, tmp_path / "logs") as services:
        ids, target = await warmed_up(system, cluster, cluster_vhost)
        assert target == 1  # the first node of the list that answers

        cluster.fault(fault.inject, target)
        during = await submit_exports(system, DURING, fault.name)
        await eventually(
            lambda: all_succeeded(system, during),
            within=FLOW_SECONDS,
            what=f"the jobs submitted while the node is {fault.name}",
        )
        cluster.fault(fault.heal, target)

        after = await submit_exports(system, AFTER, "after")
        await system.wait_for("succeeded", *after, what="the jobs after the node is back")
        ids += during + after
        moved_to = await eventually(
            lambda: services_node(cluster, cluster_vhost, via=3 if target != 3 else 2),
            what="the services on one node again",
        )
        assert moved_to != target
        # A publish the frozen node took in without confirming it may arrive now: a duplicate
        # message, which the consumer must settle without running the job again.
        await eventually(
            lambda: depth_is(node_url(cluster_settings, 2), 0, type_queue_name(EXPORT)),
            what="the exports' queue drained",
        )
        assert all(service.alive() for service in services)
    for service in services:
        assert service.process.returncode == 0, service.output()[-2000:]

    assert_each_ran_once(cluster_settings, ids, services)


async def test_with_their_node_stopped_jobs_publish_run_quarantine_and_replay(
    cluster: Cluster,
    cluster_settings: Settings,
    cluster_vhost: str,
    system: System,
    tmp_path: Path,
) -> None:
    with running_system(cluster_settings, tmp_path / "logs") as services:
        warm_up, target = await warmed_up(system, cluster, cluster_vhost)
        leader = cluster.queue(cluster_vhost, DEFAULT_QUEUE, via=2)["leader"]
        assert target == cluster.number_of(leader) == 1  # the queues were declared through it

        cluster.fault("rabbit-stop-app", 1)
        fails_once = {"type": "demo.fail", "payload": {"mode": "permanent", "times": 1}}
        poisoned = await system.submit(fails_once)
        exports = await submit_exports(system, DURING, "stopped")
        await system.wait_for("quarantined", poisoned, what="the quarantine, node 1 stopped")
        await eventually(
            lambda: all_succeeded(system, exports), within=FLOW_SECONDS, what="the exports"
        )
        listed = cli_json(cluster_settings, "quarantine", "list")
        assert [entry["job_id"] for entry in listed["jobs"]] == [poisoned]
        assert [len(entry["messages"]) for entry in listed["jobs"]] == [1]

        replayed = cli(cluster_settings, "quarantine", "replay", poisoned)
        assert replayed.returncode == 0, replayed.stderr
        await system.wait_for("succeeded", poisoned, what="the replayed job (attempt 2)")
        await eventually(
            lambda: depth_is(node_url(cluster_settings, 2), 0, QUARANTINE_QUEUE),
            what="its quarantine message gone",
        )
        async with api_client(cluster_settings, system.store) as api:
            ready = await api.get("/readyz")
        assert ready.status_code == 200, ready.text
        health = cli(cluster_settings, "healthcheck", "--queue", "default")
        assert health.returncode == 0, health.stdout + health.stderr
        moved_to = await eventually(
            lambda: services_node(cluster, cluster_vhost, via=3), what="the services' new node"
        )
        assert moved_to in (2, 3)
        assert all(service.alive() for service in services)

    assert_each_ran_once(cluster_settings, [*warm_up, *exports], services)


def node_url(settings: Settings, number: int) -> str:
    """Node ``number``'s URL alone, from the list of the settings."""
    return settings.amqp_url.split(",")[number - 1]
