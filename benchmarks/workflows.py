"""What a workflow's graph costs: a fan-out and a fan-in beside as many independent jobs.

    python scripts/servers.py run -- python -m benchmarks.workflows [--rounds 3] [--fan-out 999]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost); drops both at the end.

One real dispatcher and ``--consumers`` real consumers (``--concurrency`` each) run on that
database for the whole run, warmed up first; every measurement is then timed from the start of
its submission to its last job ``succeeded`` (the jobs table polled every 10 ms; the database
clock's ``max(finished_at) - min(created_at)`` beside it, free of the poll's grain):

- ``workflow``: ``--fan-out`` no-op jobs (``demo.sleep {"seconds": 0}``) and one fan-in job
  ``after`` all of them, submitted as one workflow through ``WorkflowStore.accept`` (the
  statement ``POST /v1/workflows`` runs). A workflow holds at most 1,000 jobs (SPEC §17), so the
  default is 999 + 1: the largest fan-out with its fan-in.
- ``independent``: as many no-op jobs (fan-out + 1) with no edge, in one ``Store.accept_jobs``
  call (the statement of ``POST /v1/jobs:batch``), one transaction as the workflow's is.

Each measurement has a client of its own, which is what the poll counts. The rounds alternate
which of the two goes first. The report: each one's median seconds, the ratio
workflow/independent, and the fan-in's release delay from the journal: the last parent's
``finished_at`` to the fan-in's ``parents_succeeded`` (the same transaction: 0), ``published``
(the relay) and ``claimed`` (the broker and the consumer).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg

from benchmarks import e2e
from benchmarks._common import create_client, median, scratch_run, sql as common_sql
from benchmarks._flow_preload import noop_requests
from benchmarks.flow import spread
from jobrelay.core.registry import Registry
from jobrelay.core.workflows import WORKFLOW_JOBS_MAX, OnFailure, WorkflowStep, workflow_step
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from jobrelay.db.workflow_store import WorkflowStore, WorkflowSubmission
from jobrelay.handlers.loading import load_registry

FAN_IN = "fan-in"
WORKFLOW, INDEPENDENT = "workflow", "independent"
POLL_SECONDS = 0.01
WARM_UP_JOBS = 20

# Submit (the accept's transaction start) -> the last result stored, on the database clock.
SPAN = """
SELECT EXTRACT(EPOCH FROM max(finished_at) - min(created_at))
FROM jobrelay.jobs WHERE client_id = %(client_id)s
"""

# The fan-in's journal against its parents: when the last of them finished, from the
# workflow's start; then each step of the fan-in after that moment.
RELEASE = """
SELECT EXTRACT(EPOCH FROM p.last - min(j.created_at)) AS fan_out,
       EXTRACT(EPOCH FROM min(e.at) FILTER (WHERE e.event = 'parents_succeeded') - p.last),
       EXTRACT(EPOCH FROM min(e.at) FILTER (WHERE e.event = 'published') - p.last),
       EXTRACT(EPOCH FROM min(e.at) FILTER (WHERE e.event = 'claimed') - p.last),
       EXTRACT(EPOCH FROM max(j.finished_at) - p.last)
FROM jobrelay.jobs j JOIN jobrelay.job_journal e ON e.job_id = j.id
CROSS JOIN LATERAL (
    SELECT max(parent.finished_at) AS last FROM jobrelay.job_dependencies d
    JOIN jobrelay.jobs parent ON parent.id = d.parent_id WHERE d.job_id = j.id
) p
WHERE j.workflow_id = %(workflow_id)s AND j.workflow_ref = %(ref)s
GROUP BY p.last
"""
RELEASE_STEPS = ("fan-out done", "queued", "published", "claimed", "succeeded")


@dataclass
class Measurement:
    seconds: float  # submit start -> the poll saw every job succeeded
    span: float  # the same on the database clock
    release: dict[str, float] = field(default_factory=dict)  # RELEASE_STEPS, seconds

    def line(self, name: str) -> str:
        text = f"  {name:<12} {self.seconds:7.3f}s (database clock {self.span:.3f}s)"
        if self.release:
            fan_out, *steps = RELEASE_STEPS
            after = ", ".join(f"{step} +{self.release[step] * 1000:.1f}" for step in steps)
            text += f"; {fan_out} at {self.release[fan_out]:.3f}s, then fan-in {after} ms"
        return text


@dataclass
class Bench:
    database_url: str
    args: argparse.Namespace
    store: Store
    registry: Registry

    @property
    def jobs(self) -> int:
        return int(self.args.fan_out) + 1

    async def measure(self, name: str) -> Measurement:
        tag = uuid.uuid4().hex[:8]
        client_id, _ = await create_client(self.database_url, f"bench-workflows-{name}-{tag}")
        workflow_id: uuid.UUID | None = None
        if name == WORKFLOW:
            submission = self.workflow(tag, self.args.fan_out)

            async def submit() -> None:
                nonlocal workflow_id
                accepted = await WorkflowStore(self.store).accept(client_id, submission)
                workflow_id = accepted.workflow_id
        else:
            requests = noop_requests(self.jobs, f"independent-{tag}-")

            async def submit() -> None:
                await self.store.accept_jobs(client_id, requests)

        seconds = await self.timed(submit, client_id, self.jobs)
        [(span,)] = await common_sql(self.database_url, SPAN, {"client_id": client_id})
        result = Measurement(seconds, float(span))
        if workflow_id is not None:
            result.release = await self.release(workflow_id)
        return result

    def workflow(self, tag: str, fan_out: int) -> WorkflowSubmission:
        """``fan_out`` parallel no-op jobs and one after all of them (built before the clock
        starts, as the independent jobs' requests are: a client's work, not jobrelay's)."""

        def step(ref: str, after: list[str]) -> WorkflowStep:
            return workflow_step(
                self.registry,
                ref=ref,
                type=e2e.NOOP_TYPE,
                payload=e2e.NOOP_PAYLOAD,
                after=after,
                default_max_attempts=3,
            )

        parents = [f"p{i}" for i in range(fan_out)]
        steps = [step(ref, []) for ref in parents] + [step(FAN_IN, parents)]
        return WorkflowSubmission(f"bench-{tag}", OnFailure.CANCEL_DEPENDENTS, tuple(steps))

    async def timed(
        self, submit: Callable[[], Awaitable[None]], client_id: uuid.UUID, jobs: int
    ) -> float:
        """Seconds from the start of ``submit`` until the client's ``jobs`` all succeeded."""
        async with await psycopg.AsyncConnection.connect(
            libpq_url(self.database_url), autocommit=True
        ) as conn:
            started = time.perf_counter()
            await submit()
            while True:
                cursor = await conn.execute(e2e.COUNT_DONE, {"client_id": client_id})
                done, failed = await cursor.fetchone()  # type: ignore[misc]
                if failed:
                    raise SystemExit(f"{failed} jobs failed: a no-op must not fail")
                if done >= jobs:
                    return time.perf_counter() - started
                if time.perf_counter() > started + self.args.timeout:
                    raise SystemExit(f"only {done}/{jobs} done after {self.args.timeout}s")
                await asyncio.sleep(POLL_SECONDS)

    async def release(self, workflow_id: uuid.UUID) -> dict[str, float]:
        [row] = await common_sql(
            self.database_url, RELEASE, {"workflow_id": workflow_id, "ref": FAN_IN}
        )
        return {step: float(value) for step, value in zip(RELEASE_STEPS, row, strict=True)}

    async def warm_up(self) -> None:
        """Every process connected and every path run once (a small workflow included)."""
        client_id, _ = await create_client(self.database_url, "bench-workflows-warm-up")
        tag = uuid.uuid4().hex[:8]
        requests = noop_requests(WARM_UP_JOBS, f"warm-{tag}-")
        await self.store.accept_jobs(client_id, requests)
        await WorkflowStore(self.store).accept(client_id, self.workflow(tag, 2))
        await self.timed(lambda: asyncio.sleep(0), client_id, WARM_UP_JOBS + 3)


# --- the report ----------------------------------------------------------------------------


def report(figures: dict[str, list[Measurement]], args: argparse.Namespace) -> None:
    rounds = len(figures[WORKFLOW])
    header = "".join(f"{f'round {i + 1}':>10}" for i in range(rounds))
    print(
        f"\nsubmit -> last result, {args.fan_out + 1:,} no-op jobs, 1 dispatcher + "
        f"{args.consumers} consumer(s) x {args.concurrency}, seconds:"
    )
    print(f"{'':<14}{header}{'median':>10}{'spread':>8}")
    for name, runs in figures.items():
        values = [run.seconds for run in runs]
        cells = "".join(f"{value:>10.3f}" for value in values)
        print(f"{name:<14}{cells}{median(values):>10.3f}{spread(values):>8}")
    ours = [run.seconds for run in figures[WORKFLOW]]
    theirs = [run.seconds for run in figures[INDEPENDENT]]
    per_round = ", ".join(f"{a / b:.2f}" for a, b in zip(ours, theirs, strict=True))
    print(
        f"ratio workflow/independent: {median(ours) / median(theirs):.3f} (per round {per_round})"
    )
    spans = {name: median([run.span for run in runs]) for name, runs in figures.items()}
    print(
        f"database clock (first created_at -> last finished_at), median: workflow "
        f"{spans[WORKFLOW]:.3f}s, independent {spans[INDEPENDENT]:.3f}s, "
        f"ratio {spans[WORKFLOW] / spans[INDEPENDENT]:.3f}"
    )
    steps = {
        step: median([run.release[step] * 1000 for run in figures[WORKFLOW]])
        for step in RELEASE_STEPS[1:]
    }
    print(
        f"fan-in release delay (its last parent's finished_at -> its claim), median: "
        f"{steps['claimed']:.1f} ms (queued +{steps['queued']:.1f}, published "
        f"+{steps['published']:.1f}, claimed +{steps['claimed']:.1f}, succeeded "
        f"+{steps['succeeded']:.1f} ms)"
    )


# --- main ----------------------------------------------------------------------------------


async def run(bench: Bench, ctx: e2e.Context) -> dict[str, list[Measurement]]:
    figures: dict[str, list[Measurement]] = {WORKFLOW: [], INDEPENDENT: []}
    groups = e2e.start_jobrelay(ctx)
    try:
        await bench.warm_up()
        for number in range(bench.args.rounds):
            order = [WORKFLOW, INDEPENDENT] if number % 2 == 0 else [INDEPENDENT, WORKFLOW]
            print(f"round {number + 1}: {', '.join(order)}", flush=True)
            for name in order:
                e2e.check_alive(groups)
                result = await bench.measure(name)
                figures[name].append(result)
                print(result.line(name), flush=True)
    finally:
        e2e.stop_all(groups)
    return figures


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--fan-out",
        type=int,
        default=WORKFLOW_JOBS_MAX - 1,
        help=f"parallel jobs before the fan-in (at most {WORKFLOW_JOBS_MAX - 1})",
    )
    parser.add_argument("--consumers", type=int, default=1, help="consumer processes")
    parser.add_argument("--concurrency", type=int, default=32, help="per consumer")
    parser.add_argument("--timeout", type=float, default=120.0, help="per measurement")
    args = parser.parse_args(argv)
    if not 1 <= args.fan_out < WORKFLOW_JOBS_MAX:
        parser.error(f"--fan-out is 1 to {WORKFLOW_JOBS_MAX - 1}: a workflow holds its fan-in too")
    return args


async def main_async(args: argparse.Namespace, ctx: e2e.Context) -> None:
    store = Store.connect(ctx.database_url, pool_size=2)
    try:
        bench = Bench(ctx.database_url, args, store, load_registry(builtins=True))
        report(await run(bench, ctx), args)
    finally:
        await store.close()


def main() -> int:
    args = parse_args()
    print(
        f"{os.cpu_count()} CPUs; load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
        flush=True,
    )
    with scratch_run("workflows") as run:
        ctx = e2e.Context(run.admin_url, run.database_url, run.amqp_url, "", run.workdir, args)
        asyncio.run(main_async(args, ctx))
        print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
