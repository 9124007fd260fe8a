"""compose.yaml's `ha` profile under Docker: the primary's container killed under load.

``make compose-test`` runs it beside the system test (opt-in as that one,
``JOBRELAY_COMPOSE_TEST=1``; never skipped where CI is set). PostgreSQL runs under Patroni
(etcd, ``postgres-ha-1`` and ``postgres-ha-2``: a primary and a synchronous standby), the
single ``postgres`` scaled to 0, and every service reaches the database through the
multi-host URL of ``JOBRELAY_DATABASE_HOSTS`` with ``target_session_attrs=read-write``. Under
a steady stream of submissions the leader's container is SIGKILLed (``docker kill``); a probe
submitted right after it is retried with the same Idempotency-Key until accepted, which
measures how long the system takes no writes. Then the standby must be the new leader, the
old primary (started again) its synchronous standby, and every accepted job must end where it
should with exactly one result (one row in ``job_results``, one ``succeeded`` event in its
journal). ``down -v`` always runs; the summary lists the faults with their times.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.containers.docker_kit import Compose, Container, compose_test_opt_in, docker

# The system test's client, load and project (its fixtures too): the same run, another topology.
from tests.containers.test_compose_system import (
    Api,
    Load,
    Record,
    Submitted,
    admin_token,
    api_port,
    dump_logs,
    ensure_images,
    project,
    record,
    say,
    wait_all_terminal,
)

__all__ = ["project", "record", "say"]  # fixtures, used by name

NODES = ("postgres-ha-1", "postgres-ha-2")
# Healthy before the load starts. The dispatcher's and consumers' health checks open a database
# and a broker connection each time, and time out (15 s) on a loaded 2-core machine: the jobs
# they run prove them instead (every accepted job must end succeeded or quarantined).
READY = ("etcd", *NODES, "rabbitmq", "api")
CONSUMERS = 2
FAILOVER_PATIENCE = 120  # Patroni's leader key lives 20 s (PATRONI_TTL); then the standby leads
REJOIN_PATIENCE = 240  # the old primary started again, until it is the synchronous standby
SETTLE_SECONDS = 180  # a job whose consumer lost the database retries, or its lease expires
PATRONI_CONFIG = "/etc/patroni/patroni.yml"

pytestmark = [pytest.mark.timeout(900), compose_test_opt_in]

# Per job: its state, its rows in job_results, its `succeeded` events (read on the primary).
RESULTS_SQL = """
SELECT j.id, j.state,
       (SELECT count(*) FROM jobrelay.job_results r WHERE r.job_id = j.id),
       (SELECT count(*) FROM jobrelay.job_journal e WHERE e.job_id = j.id AND e.event = 'succeeded')
FROM jobrelay.jobs j
"""


def test_compose_ha_survives_the_primary_killed(
    project: Compose, record: Record, say: Callable[[str], None]
) -> None:
    try:
        run_ha(project, record, say)
        record.outcome = "ha profile: passed"
    except BaseException:
        record.outcome = "ha profile: FAILED"
        dump_logs(project, say)
        raise


def run_ha(compose: Compose, record: Record, say: Callable[[str], None]) -> None:
    ensure_images(say)
    add_ha_settings(compose)
    record.phase("images")
    # The jobrelay image only: the Patroni image is scripts/images.sh's (or the registry's).
    compose.run("build", "migrate", timeout=900)
    record.phase("build")
    compose.run(
        "up", "-d", "--scale", "postgres=0", "--scale", f"consumer={CONSUMERS}", timeout=600
    )
    compose.wait_healthy(READY, 300, "the ha nodes, the broker and the API healthy")
    running = [c for c in compose.containers() if c.service in ("dispatcher", "consumer")]
    assert len(running) == 1 + CONSUMERS and all(c.running for c in running), running
    assert not compose.containers("postgres"), "the single postgres runs beside the ha nodes"
    (migrate,) = compose.containers("migrate")
    assert migrate.exit_code == 0
    leader, standby = wait_roles(compose, 90)
    say(f"leader {leader.service}, synchronous standby {standby.service}")
    record.phase("up+healthy")

    api = Api(f"http://127.0.0.1:{api_port(compose)}", admin_token(compose))
    with Load(api, record) as load:
        load.wait_progress(30, 90, "before the failover")
        docker("kill", "--signal", "KILL", leader.id)
        killed_at = time.monotonic()
        record.fault(f"docker kill -s KILL {leader.name} (the leader)")
        say(record.faults[-1])
        probe = api.submit_until_accepted("demo.sleep", {"seconds": 0.05}, FAILOVER_PATIENCE)
        assert probe is not None, f"no job accepted within {FAILOVER_PATIENCE}s of the kill"
        outage = time.monotonic() - killed_at
        record.jobs.append(Submitted(probe, "demo.sleep (probe)", "succeeded"))
        record.fault(f"first job accepted {outage:.1f}s after the kill")
        say(record.faults[-1])
        new_leader = leader_of(compose, standby)
        assert new_leader == standby.service, (new_leader, "is not the former standby")
        load.wait_progress(30, 120, "after the failover")

        docker("start", leader.id)
        started_at = time.monotonic()
        record.fault(f"docker start {leader.name}")
        # Long on a loaded machine: Patroni rewinds (or copies) it, and the leader's loop must
        # then name it the synchronous standby (110 s measured at a load average of 35).
        again_leader, again_standby = wait_roles(compose, REJOIN_PATIENCE)
        assert (again_leader.service, again_standby.service) == (standby.service, leader.service)
        record.fault(
            f"{leader.service} the synchronous standby again "
            f"{time.monotonic() - started_at:.1f}s after its start"
        )
        say(record.faults[-1])
        load.wait_progress(10, 60, "with the old primary back")
    assert load.error is None, f"the load failed: {load.error!r}"
    record.phase("load+failover")

    say(f"{len(record.jobs)} jobs accepted; waiting until every one is terminal")
    final = wait_all_terminal(api, record, SETTLE_SECONDS)
    wrong = [
        (job.job_id, job.type, final[job.job_id]["state"], job.expected)
        for job in record.jobs
        if final[job.job_id]["state"] != job.expected
    ]
    assert not wrong, f"{len(wrong)} jobs did not end where they should: {wrong[:10]}"
    assert_one_result_each(compose, again_leader, record)
    record.phase("settle")
    say("every accepted job ended where it should, each succeeded one with exactly one result")


def add_ha_settings(compose: Compose) -> None:
    """The ha block of .env.example, with passwords of this run, appended to the env file."""
    values = {
        "COMPOSE_PROFILES": "ha",
        "POSTGRES_SUPERUSER_PASSWORD": secrets.token_hex(16),
        "POSTGRES_REPLICATION_PASSWORD": secrets.token_hex(16),
        "JOBRELAY_DATABASE_HOSTS": ",".join(f"{node}:5432" for node in NODES),
        "JOBRELAY_DATABASE_OPTIONS": "?target_session_attrs=read-write",
        "JOBRELAY_PATRONI_IMAGE": "jobrelay-patroni:latest",
    }
    with compose.env_file.open("a") as out:
        out.write("".join(f"{key}={value}\n" for key, value in values.items()))


def members(compose: Compose, node: Container) -> list[dict[str, Any]]:
    """`patronictl list` as the node sees it (an empty list while it cannot tell)."""
    listing = docker(
        "exec", node.id, "patronictl", "-c", PATRONI_CONFIG, "list", "-f", "json", check=False
    )
    try:
        return list(json.loads(listing))
    except ValueError:
        return []


def wait_roles(compose: Compose, within: float) -> tuple[Container, Container]:
    """The leader and its synchronous standby, both running (replication streaming)."""
    deadline = time.monotonic() + within
    while True:
        nodes = {c.service: c for c in compose.containers() if c.service in NODES}
        seen: list[dict[str, Any]] = []
        for node in nodes.values():
            if node.running:
                seen = members(compose, node)
                break
        roles = {m["Member"]: m["Role"] for m in seen if m.get("State") in ("running", "streaming")}
        leaders = [name for name, role in roles.items() if role == "Leader"]
        standbys = [name for name, role in roles.items() if role == "Sync Standby"]
        if len(leaders) == 1 and len(standbys) == 1:
            return nodes[leaders[0]], nodes[standbys[0]]
        assert time.monotonic() < deadline, f"no leader with a synchronous standby: {seen}"
        time.sleep(1)


def leader_of(compose: Compose, node: Container) -> str | None:
    leaders = [m["Member"] for m in members(compose, node) if m["Role"] == "Leader"]
    return leaders[0] if len(leaders) == 1 else None


def assert_one_result_each(compose: Compose, primary: Container, record: Record) -> None:
    """On the primary: a succeeded job has one result and one success, any other job none."""
    rows = docker(
        "exec", primary.id, "psql", "-U", "postgres", "-d", "jobrelay", "-X", "-A", "-t",
        "-F", ",", "-v", "ON_ERROR_STOP=1", "-c", RESULTS_SQL,
    )  # fmt: skip
    counts: dict[str, tuple[str, int, int]] = {}
    for line in rows.splitlines():
        job_id, state, results, successes = line.split(",")
        counts[job_id] = (state, int(results), int(successes))
    bad = {}
    for job in record.jobs:
        final, result_rows, success_events = counts[job.job_id]
        once = 1 if final == "succeeded" else 0
        if (result_rows, success_events) != (once, once):
            bad[job.job_id] = (job.type, final, result_rows, success_events)
    assert not bad, f"{len(bad)} jobs without exactly one result: {list(bad.items())[:10]}"
