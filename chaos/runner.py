"""One chaos run: set the system up, load it while injecting faults, wait for quiescence,
check the invariants, print one summary line. Exit status 0 only when nothing was violated.

The run writes its history (``history.jsonl`` in its work directory, docs/history.md) and has
the independent checker (``python -m checker``) read it: the run passes only when that checker
finds nothing too and agrees with ``chaos/checks.py`` on every count they share."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos import checks, faults, integrity
from chaos.handlers import HANDLERS
from chaos.history import (
    HISTORY_FILE,
    History,
    checker_line,
    compare,
    run_checker,
    summary_parts,
)
from chaos.partitions import Partitioner
from chaos.proxy import Proxy
from chaos.system import (
    Scratch,
    Service,
    amqp_nodes,
    database_hosts,
    find_or_start_servers,
    host_port,
    patroni,
    run_name,
    with_hosts,
    with_netloc,
    with_patroni,
)
from chaos.workload import Kind, Ledger, Shares, Signaller, Submitter, plan
from tests.support.processes import ROOT, answers, free_port, jobrelay_env, run_cli, wait_for
from tests.support.servers import Servers

LEASE_SECONDS = 3.0
SHOWN_PER_KIND = 10
TRACED = 5
CLI_TIMEOUT = 120.0  # `jobrelay migrate` and friends, on a machine busy with the services


@dataclass(frozen=True)
class Profile:
    name: str
    jobs: int
    faults: int
    load_seconds: float  # submissions spread over this long; faults too
    consumers: int
    concurrency: int
    workers: int  # HTTP requests in flight at most
    quiescence_timeout: float
    node_faults: int = 0  # stop, kill or pause one RabbitMQ node at a time (a cluster)
    rabbitmq_nodes: int = 1  # the cluster this profile needs (docs/cluster.md)
    primary_faults: int = 0  # kill, stop or switch over a Patroni primary (docs/failover.md)
    partitions: int = 0  # between nodes in network namespaces (docs/cluster.md "Partitions")


PROFILES = {
    "short": Profile("short", 1500, 13, 50.0, 3, 4, 16, 120.0),
    "long": Profile("long", 10_000, 60, 330.0, 3, 4, 16, 300.0),
    # Node faults last longer (a killed node boots again): fewer per minute, a longer load.
    "cluster": Profile("cluster", 10_000, 20, 480.0, 3, 4, 16, 300.0, 36, 3),
    "cluster-short": Profile("cluster-short", 1500, 6, 90.0, 3, 4, 16, 150.0, 6, 3),
    # PostgreSQL under Patroni; a primary fault lasts 8-15 s until the cluster is whole again.
    "pg-failover": Profile("pg-failover", 10_000, 24, 420.0, 3, 4, 16, 300.0, primary_faults=12),
    "pg-failover-short": Profile(
        "pg-failover-short", 600, 4, 75.0, 3, 4, 16, 120.0, primary_faults=3
    ),
    # Jepsen's four partition scenarios, one at a time, 45 s apart: each of 10 s and 30 s twice.
    "partitions": Profile("partitions", 10_000, 0, 720.0, 3, 4, 16, 300.0, 0, 3, partitions=16),
    "partitions-short": Profile(
        "partitions-short", 1500, 0, 130.0, 3, 4, 16, 150.0, 0, 3, partitions=4
    ),
}


@dataclass(frozen=True)
class Options:
    profile: Profile
    seed: int
    workdir: Path | None = None
    keep: bool = False
    # The Patroni standby of a profile with primary faults (None: the environment's cluster
    # as it is; a synchronous one when the run starts its own).
    synchronous: bool | None = None
    shares: Shares = field(
        default_factory=Shares
    )  # the sequences' and the batch jobs' shares of the plan
    history: Path | None = None  # where a passing run's history.jsonl is copied to


def say(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


class Run:
    def __init__(self, options: Options, servers: Servers, cluster: Any = None) -> None:
        self.options = options
        self.cluster = cluster  # localservers.patroni.PatroniCluster, with primary faults
        self.profile = options.profile
        self.servers = servers
        self.name = run_name()
        self.workdir = options.workdir or ROOT / ".local" / "chaos" / self.name
        self.results_dir = self.workdir / "results"
        self.logs_dir = self.workdir / "logs"
        self.scratch: Scratch | None = None
        self.proxies: dict[str, Proxy] = {}
        self.services: list[Service] = []
        self.ledger = Ledger()
        self.history = History(self.workdir / HISTORY_FILE)
        self.history.run(self.profile.name, options.seed)
        self.started = time.monotonic()
        self.load_done = self.started
        self.amcheck = "not run"  # the summary's amcheck= (runs with primary faults)

    # --- setup and teardown -------------------------------------------------------------------

    def set_up(self) -> tuple[str, str]:
        """Scratch database and vhost, proxies, migrations, a client, and the services.
        Returns (API URL, client token)."""
        self.results_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.scratch = scratch = Scratch.create(self.servers, self.name)
        direct = jobrelay_env({"JOBRELAY_DATABASE_URL": scratch.database_url})
        for args in (["migrate"], ["clients", "create", "chaos", "--json"]):
            done = run_cli(direct, *args, timeout=CLI_TIMEOUT)
            if done.returncode != 0:
                raise RuntimeError(f"`services {' '.join(args)}` failed: {done.stderr.strip()}")
        token = str(json.loads(done.stdout)["token"])
        # A proxy per broker node: the AMQP faults cut one node's connections. A proxy per
        # database server too (db, or db1, db2 for a Patroni cluster): the database faults cut
        # them all.
        nodes = amqp_nodes(self.servers.amqp_url)
        databases = database_hosts(self.servers.database_url)
        db_names = faults.database_proxy_names(len(databases))
        self.proxies = {
            name: Proxy(name, *server) for name, server in zip(db_names, databases, strict=True)
        } | {
            f"amqp{n}": Proxy(f"amqp{n}", *host_port(url, 5672))
            for n, url in enumerate(nodes, start=1)
        }
        ports = {name: proxy.start() for name, proxy in self.proxies.items()}
        proxied_database = with_hosts(
            scratch.database_url, [("127.0.0.1", ports[name]) for name in db_names]
        )
        proxied_amqp = ",".join(
            with_netloc(url, "127.0.0.1", ports[f"amqp{n}"])
            for n, url in enumerate(amqp_nodes(scratch.amqp_url), start=1)
        )
        api_port = free_port()
        env = jobrelay_env(
            {
                "JOBRELAY_DATABASE_URL": proxied_database,
                "JOBRELAY_AMQP_URL": proxied_amqp,
                "JOBRELAY_LEASE_SECONDS": str(LEASE_SECONDS),
                "JOBRELAY_RETRY_BASE_SECONDS": "0.2",
                "JOBRELAY_RETRY_MAX_SECONDS": "1.0",
                "JOBRELAY_POLL_INTERVAL_SECONDS": "0.2",
                "JOBRELAY_PUBLISH_TIMEOUT_SECONDS": "5",
                "JOBRELAY_SHUTDOWN_GRACE_SECONDS": "5",
                "JOBRELAY_RESULTS_DIR": str(self.results_dir),
                "JOBRELAY_API_PORT": str(api_port),
                "JOBRELAY_LOG_LEVEL": "INFO",
                "JOBRELAY_HANDLERS": HANDLERS,  # chaos.limited, beside the built-in types
                "JOBRELAY_BUILTINS": "true",
            }
        )
        self.api = Service("api", ["api"], env, self.logs_dir / "api.log")
        self.dispatchers = [
            Service(f"dispatcher{n}", ["dispatcher"], env, self.logs_dir / f"dispatcher{n}.log")
            for n in range(2)
        ]
        self.consumers = [
            Service(
                f"consumer{n}",
                ["consumer", "--concurrency", str(self.profile.concurrency)],
                env,
                self.logs_dir / f"consumer{n}.log",
            )
            for n in range(self.profile.consumers)
        ]
        self.services = [self.api, *self.dispatchers, *self.consumers]
        for service in self.services:
            service.start()
        api_url = f"http://127.0.0.1:{api_port}"
        healthz = f"{api_url}/healthz"
        wait_for(lambda: answers(healthz), timeout=60, interval=0.2, what=healthz)
        return api_url, token

    def tear_down(self, keep_scratch: bool) -> None:
        for service in self.services:
            with contextlib.suppress(Exception):
                service.stop()
        for proxy in self.proxies.values():
            proxy.close()
        if self.scratch is not None and not keep_scratch:
            self.scratch.drop()

    # --- the run ------------------------------------------------------------------------------

    async def load_under_faults(self, api_url: str, token: str) -> faults.Injector:
        rng = random.Random(self.options.seed)
        submissions = plan(
            rng, self.profile.jobs, f"chaos-{self.options.seed}", self.options.shares
        )
        planned_faults = faults.schedule(
            rng,
            self.profile.faults,
            self.profile.load_seconds,
            node_faults=self.profile.node_faults,
            primary_faults=self.profile.primary_faults,
        )
        planned_faults += faults.partition_schedule(
            rng, self.profile.partitions, self.profile.load_seconds
        )
        planned_faults.sort(key=lambda planned: planned.at)
        injector = faults.Injector(
            self.consumers,
            self.dispatchers,
            self.proxies,
            LEASE_SECONDS,
            log=self.note,
            cluster=self.cluster,
            failed_requests=lambda: self.ledger.ambiguous,
            partitioner=Partitioner(self.profile.rabbitmq_nodes, self.note)
            if self.profile.partitions
            else None,
        )
        assert self.scratch is not None
        # chaos.durable's signals go straight to the database, past the proxies: the sender's
        # own transaction, as a service beside jobrelay would send them.
        signaller = Signaller(self.scratch.database_url, self.ledger, history=self.history)
        submitter = Submitter(
            api_url, token, self.ledger, on_accepted=signaller.accepted, history=self.history
        )
        supervising = asyncio.create_task(self.supervise())
        start = time.monotonic()
        try:
            await asyncio.gather(
                submitter.run(
                    submissions, seconds=self.profile.load_seconds, workers=self.profile.workers
                ),
                injector.run(planned_faults, start),
            )
            self.load_done = time.monotonic()
            self.note(f"load done: {len(submissions)} submissions in {self.load_done - start:.1f}s")
            await injector.heal()
            await signaller.wait()
        finally:
            supervising.cancel()
            await asyncio.gather(supervising, return_exceptions=True)
            await submitter.close()
        self.check_services()
        return injector

    async def supervise(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self.check_services()

    def check_services(self) -> None:
        """A process that ended without our doing is a finding; restart it so the run can
        still converge."""
        for service in self.services:
            if not service.check():
                self.note(
                    f"{service.name} exited by itself ({service.unexpected_exits[-1]}):\n"
                    + service.tail()
                )
                service.start()

    async def quiescence(self) -> float | None:
        """Seconds from the end of the load (the last submission and fault, before healing) until
        every job is terminal, the outbox is relayed and the work queues are empty; None on
        timeout."""
        assert self.scratch is not None
        began = self.load_done
        deadline = began + self.profile.quiescence_timeout
        last = ""
        while time.monotonic() < deadline:
            self.check_services()
            try:
                open_jobs, unpublished = await asyncio.to_thread(
                    checks.progress, self.scratch.database_url
                )
                ready = await checks.ready_messages(
                    self.scratch.amqp_url, checks.WORK_QUEUE_PREFIX + "default"
                )
                status = f"open jobs {open_jobs}, unpublished {unpublished}, ready {ready}"
                if open_jobs == unpublished == ready == 0:
                    depths = await asyncio.to_thread(
                        checks.work_queue_depths, self.scratch.api_url, self.scratch.vhost
                    )
                    if not any(depths.values()):
                        return time.monotonic() - began
                    status += f", queues {depths}"
            except Exception as error:  # a server still coming back
                status = f"not readable yet: {type(error).__name__}"
            if status != last:
                self.note(f"waiting for quiescence: {status}")
                last = status
            await asyncio.sleep(1.0)
        return None

    async def settle_quarantine(self, patience: float = 45.0) -> float | None:
        """Seconds until the quarantine queue holds exactly one message per quarantined job
        and nothing else; None on timeout. Races under faults can leave a second copy (a
        redelivery dead-lettered again) or a stale message (a nack that arrived after its job
        moved on): the dispatchers' maintenance removes them by itself (docs/invariants.md, 8),
        and this waits for it — it never tidies the queue on the dispatchers' behalf."""
        assert self.scratch is not None
        began = time.monotonic()
        last = ""
        while True:
            try:
                quarantined = await asyncio.to_thread(
                    checks.quarantined_ids, self.scratch.database_url
                )
                found, malformed = await checks.read_quarantine(
                    self.scratch.amqp_url, self.scratch.database_url
                )
                if checks.quarantine_consistent(quarantined, found, malformed):
                    return time.monotonic() - began
                extra = sum(n - 1 for n in found.values() if n > 1)
                stray = len(set(found) - quarantined)
                missing = len(quarantined - set(found))
                status = f"surplus {extra}, stray {stray}, missing {missing}, malformed {malformed}"
            except Exception as error:
                status = f"not readable yet: {type(error).__name__}"
            if status != last:
                self.note(f"waiting for a consistent quarantine: {status}")
                last = status
            if time.monotonic() - began > patience:
                return None
            self.check_services()
            await asyncio.sleep(1.0)

    async def snapshot(self) -> checks.Snapshot:
        assert self.scratch is not None
        snapshot = await asyncio.to_thread(checks.read_database, self.scratch.database_url)
        # The management API's counts lag: give them a moment to settle at zero.
        for _ in range(10):
            snapshot.work_queues = await asyncio.to_thread(
                checks.work_queue_depths, self.scratch.api_url, self.scratch.vhost
            )
            if not any(snapshot.work_queues.values()):
                break
            await asyncio.sleep(1.0)
        found, malformed = await checks.read_quarantine(
            self.scratch.amqp_url, self.scratch.database_url
        )
        snapshot.quarantine_messages, snapshot.malformed_quarantine = found, malformed
        return snapshot

    def note(self, message: str) -> None:
        say(f"+{time.monotonic() - self.started:6.1f}s {message}")

    # --- reporting ----------------------------------------------------------------------------

    def report(
        self,
        verdict: checks.Verdict,
        injector: faults.Injector,
        quiescence: float | None,
        checker: list[str],
    ) -> str:
        figures = verdict.figures
        ledger = self.ledger
        keys = [*ledger.records.values(), *ledger.workflows.values()]
        duplicates = sum(max(0, len(record.answers) - 1) for record in keys)
        permanent = sum(
            1
            for record in ledger.records.values()
            if record.accepted and record.job.kind is Kind.PERMANENT
        ) + sum(
            1
            for record in ledger.workflows.values()
            if record.accepted
            for step in record.workflow.steps
            if step.job.kind is Kind.PERMANENT
        )
        fault_counts = ",".join(f"{kind}:{n}" for kind, n in sorted(injector.injected.items()))
        count = Counter({kind: len(items) for kind, items in verdict.violations.items()})
        parts = [
            f"seed={self.options.seed}",
            f"profile={self.profile.name}",
            f"jobs={len(keys)}",
            f"accepted={figures['accepted']}",
            f"requests={ledger.requests}",
            f"ambiguous={ledger.ambiguous}",
            f"ambiguous_commits={ledger.ambiguous_commits}",
            f"duplicate_submissions={duplicates}",
            f"succeeded={figures['succeeded']}",
            f"quarantined={figures['quarantined']}",
            f"permanent={permanent}",
            f"cancelled={figures['cancelled']}",
            f"exhausted_by_faults={figures['exhausted_by_faults']}",
            f"quarantine_messages={figures['quarantine_messages']}",
            f"faults={fault_counts or 'none'}",
            f"faults_total={sum(injector.injected.values())}",
            f"node_faults={sum(injector.injected[kind] for kind in faults.NODE_FAULTS)}",
            f"rabbitmq_nodes={injector.nodes}",
            *self.failover_figures(injector),
            *(injector.partitioner.figures() if injector.partitioner else []),
            f"lost={count['lost']}",
            f"duplicate_results={count['duplicate_results']}",
            f"duplicate_effects={count['duplicate_effects']}",
            f"wrongly_quarantined={count['wrongly_quarantined']}",
            f"workflows={figures['workflows']}",
            f"workflow_jobs={figures['workflow_jobs']}",
            f"released={figures['released']}",
            f"dependency_cancelled={figures['dependency_cancelled']}",
            f"child_started_before_parent_finished={count['child_started_before_parent_finished']}",
            f"released_twice={count['released_twice']}",
            f"limited_attempts={figures['limited_attempts']}",
            f"limited_peak={figures['limited_peak']}",
            f"held={figures['held']}",
            f"open_attempts={figures['open_attempts']}",
            f"limit_exceeded={count['limit_exceeded']}",
            f"sequence_jobs={figures['sequence_jobs']}",
            f"sequence_keys={figures['sequence_keys']}",
            f"sequence_attempts={figures['sequence_attempts']}",
            f"sequence_blocked={figures['sequence_blocked']}",
            f"sequence_overlaps={count['sequence_overlaps']}",
            f"sequence_order={count['sequence_order']}",
            f"batch_jobs={figures['batch_jobs']}",
            f"batch_calls={figures['batch_calls']}",
            f"batch_largest={figures['batch_largest']}",
            f"batch_failed_elements={figures['batch_failed_elements']}",
            f"batch_oversized={count['batch_oversized']}",
            f"durable_jobs={figures['durable_jobs']}",
            f"steps_recorded={figures['steps_recorded']}",
            f"step_runs={figures['step_runs']}",
            f"step_runs_before_recorded={figures['step_runs_before_recorded']}",
            f"step_run_again={count['step_run_again']}",
            f"sleeps={figures['sleeps']}",
            f"median_wake_delay={figures['median_wake_delay_ms'] / 1000:.1f}s",
            f"max_wake_delay={figures['max_wake_delay_ms'] / 1000:.1f}s",
            f"woke_early={count['woke_early']}",
            f"signals_sent={figures['signals_sent']}",
            f"signals_taken={figures['signals_taken']}",
            f"signal_returned_twice={count['signal_returned_twice']}",
            f"children={figures['children']}",
            f"duplicate_children={count['duplicate_children']}",
            f"durable_mismatch={count['durable_mismatch']}",
            *checker,
            f"violations={sum(count.values())}",
            f"quiescence={f'{quiescence:.1f}s' if quiescence is not None else 'timeout'}",
            f"elapsed={time.monotonic() - self.started:.0f}s",
        ]
        return "chaos: " + " ".join(parts)

    def failover_figures(self, injector: faults.Injector) -> list[str]:
        """With primary faults: their number, the standby's mode, the longest time without a
        writable server and the submissions that failed meanwhile (retried)."""
        if self.cluster is None:
            return []
        recoveries = injector.recoveries
        return [
            f"primary_faults={len(recoveries)}",
            f"standby={'sync' if self.cluster.synchronous else 'async'}",
            f"max_unwritable={max((r.unwritable for r in recoveries), default=0):.1f}s",
            f"failover_failed_requests={sum(r.failed_requests for r in recoveries)}",
            f"amcheck={self.amcheck}",
        ]

    def check_integrity(self, verdict: checks.Verdict) -> None:
        """pg_amcheck on the primary Patroni names now, once the services stopped
        (chaos/integrity.py): a finding, or a check that could not run, fails the run."""
        assert self.scratch is not None
        module = patroni()
        primary = module.leader(self.cluster)
        try:
            if primary is None:
                raise integrity.AmcheckError("no Patroni leader to run pg_amcheck on")
            found = integrity.check(
                module.pg_bindir(), self.scratch.database_url, "127.0.0.1", primary.pg_port
            )
        except integrity.AmcheckError as error:
            self.amcheck = "error"
            verdict.fail("amcheck", str(error))
            return
        self.amcheck = found.field
        say(found.line(primary.name))
        if found.findings:
            say(f"pg_amcheck's report:\n{found.output}")
        for finding in found.findings:
            verdict.fail("amcheck", finding)

    def explain_failovers(self, injector: faults.Injector) -> None:
        """Each kind of primary fault: how often, and what it cost (docs/failover.md)."""
        for kind in faults.PRIMARY_FAULTS:
            done = [r for r in injector.recoveries if r.fault is kind]
            if done:
                gaps = [r.unwritable for r in done]
                whole = [r.healthy_after for r in done]
                say(
                    f"failover {kind}: {len(done)} times, no write for {min(gaps):.1f}-"
                    f"{max(gaps):.1f}s (mean {sum(gaps) / len(done):.1f}s), whole after "
                    f"{min(whole):.1f}-{max(whole):.1f}s, failed requests "
                    f"{sum(r.failed_requests for r in done)}, new primary "
                    f"{sum(r.new_primary != r.old_primary for r in done)} of {len(done)} times"
                )

    def explain_partitions(self, injector: faults.Injector) -> None:
        """Each scenario and duration of partition: what it cost in delay (docs/cluster.md)."""
        if injector.partitioner is None or self.scratch is None:
            return
        injector.partitioner.measure(self.scratch.database_url)
        for line in injector.partitioner.lines():
            say(line)

    def explain(self, verdict: checks.Verdict) -> None:
        for kind, items in verdict.violations.items():
            for item in items[:SHOWN_PER_KIND]:
                say(f"VIOLATION {kind}: {item}")
            if len(items) > SHOWN_PER_KIND:
                say(f"VIOLATION {kind}: ... and {len(items) - SHOWN_PER_KIND} more")
        for remark in verdict.remarks[:SHOWN_PER_KIND]:
            say(f"REMARK: {remark}")
        assert self.scratch is not None
        direct = jobrelay_env({"JOBRELAY_DATABASE_URL": self.scratch.database_url})
        for job_id in verdict.suspects[:TRACED]:
            done = run_cli(direct, "jobs", "trace", job_id, "--json", timeout=CLI_TIMEOUT)
            say(f"trace of {job_id}:\n{done.stdout or done.stderr}")


async def run(options: Options) -> int:
    netns = options.profile.partitions > 0
    servers = find_or_start_servers(rabbitmq_nodes=options.profile.rabbitmq_nodes, netns=netns)
    if netns and os.environ.get("JOBRELAY_RABBITMQ_NETNS") != "1":
        say(
            f"profile {options.profile.name} needs a RabbitMQ cluster in network namespaces; "
            "the servers in the environment are not: make chaos-partitions"
        )
        servers.close()
        return 2
    if len(amqp_nodes(servers.amqp_url)) < options.profile.rabbitmq_nodes:
        say(
            f"profile {options.profile.name} needs a cluster of {options.profile.rabbitmq_nodes} "
            "RabbitMQ nodes; the servers in the environment have fewer: "
            f"JOBRELAY_RABBITMQ_NODES={options.profile.rabbitmq_nodes} make chaos "
            f"CHAOS_ARGS='--profile {options.profile.name}'"
        )
        servers.close()
        return 2
    cluster = None
    if options.profile.primary_faults:
        try:
            servers, cluster = await asyncio.to_thread(
                with_patroni, servers, synchronous=options.synchronous
            )
        except Exception as error:
            say(f"no Patroni cluster for profile {options.profile.name}: {error}")
            servers.close()
            return 2
    chaos = Run(options, servers, cluster)
    say(f"seed={options.seed} profile={options.profile.name} workdir={chaos.workdir}")
    ok = False
    try:
        api_url, token = await asyncio.to_thread(chaos.set_up)
        chaos.note(f"system up: {len(chaos.services)} processes behind the proxies")
        injector = await chaos.load_under_faults(api_url, token)
        quiescence = await chaos.quiescence()
        if quiescence is None:
            chaos.note(f"no quiescence within {options.profile.quiescence_timeout:.0f}s")
        settled = await chaos.settle_quarantine()
        if settled is None:
            chaos.note("the quarantine queue did not become consistent: checking anyway")
        else:
            chaos.note(f"quarantine consistent after {settled:.1f}s")
        snapshot = await chaos.snapshot()
        assert chaos.scratch is not None
        await asyncio.to_thread(
            chaos.history.write_final_state,
            chaos.scratch.database_url,
            snapshot,
            chaos.results_dir,
            [service.log_path for service in chaos.services],
        )
        chaos.history.close()
        chaos.note(
            f"history: {chaos.history.lines} lines, {chaos.history.path.stat().st_size} bytes"
        )
        for service in chaos.services:
            await asyncio.to_thread(service.stop)
        logs = checks.read_logs([service.log_path for service in chaos.services])
        verdict = checks.verify(chaos.ledger, snapshot, logs, chaos.results_dir)
        for service in chaos.services:
            for code in service.unexpected_exits:
                verdict.fail("service_exit", f"{service.name} exited by itself with {code}")
        for failure in injector.failures:
            verdict.fail("fault_failed", failure)
        if quiescence is None:
            verdict.fail("no_quiescence", "the system did not settle in time")
        if cluster is not None:
            await asyncio.to_thread(chaos.check_integrity, verdict)
        independent = await asyncio.to_thread(run_checker, chaos.history.path, ROOT)
        agreement = compare(verdict, independent)
        chaos.explain(verdict)
        chaos.explain_failovers(injector)
        chaos.explain_partitions(injector)
        ok = verdict.ok
        summary = chaos.report(verdict, injector, quiescence, summary_parts(agreement, independent))
        counted = checker_line(independent, options.seed, options.profile.name)
        if counted is not None:
            print(counted, flush=True)
        print(summary, flush=True)
        if not ok:
            say(f"logs, results and {HISTORY_FILE} kept in {chaos.workdir}")
        elif options.history is not None:
            options.history.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(chaos.history.path, options.history)
        return 0 if ok else 1
    finally:
        chaos.history.close()
        chaos.tear_down(keep_scratch=options.keep or not ok)
        if ok and not options.keep and options.workdir is None:
            shutil.rmtree(chaos.workdir, ignore_errors=True)
        servers.close()  # stops the servers only if they were started for this run
