"""What a sequence costs: plain no-op jobs beside the same number spread over 1,000 sequence
keys, submitted over HTTP and run end to end, alternated per round in the same run.

    python scripts/servers.py run -- python -m benchmarks.sequences \\
        [--jobs 5000] [--keys 1000] [--rounds 2] [--clients 32] [--variants plain,sequenced]

Reads JOBRELAY_DATABASE_URL (admin: creates a scratch database), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost); drops them at the end. ``make bench-sequences``
runs it; ``make bench`` runs it with ``--jobs 5000 --rounds 1``.

Each variant, per round, on an emptied database:

1. the accept: an API of ``--workers`` processes started and warmed up, then ``--jobs``
   ``demo.sleep {"seconds": 0}`` jobs (the no-op) submitted through ``POST /v1/jobs`` over
   ``--clients`` keep-alive connections, no other service running, then the API stopped:
   accepted jobs/s, and CPU ms per 1,000 jobs of the API's processes and PostgreSQL. A plain
   submission is the plain accept (one statement, group committed); a sequenced one is the
   policed accept (``services/jobrelay/db/policed_accept.py``: a transaction taking the key's
   advisory lock, then its place in the sequence), and only the first job of each key gets an
   outbox row: the others wait behind it (``jobs.sequence_waits``);
2. the run: a dispatcher and ``--consumers`` consumers (``--concurrency``) started on those
   jobs, timed until every one succeeded, as ``benchmarks/durable.py`` (``run_loaded``) runs
   them: jobs/s "steady" (first to last completion) and CPU ms per 1,000 jobs of the
   dispatcher, the consumers, PostgreSQL and RabbitMQ over that window. For a sequence the
   finish of each job releases the next of its key in the same transaction, which the
   dispatcher then relays: ``--keys`` keys give ``--jobs / --keys`` jobs a key, one at a time.

Variants: ``plain`` (no policy) and ``sequenced`` (``"sequence_key": "k<n mod --keys>"``, n the
submission's number, so the keys interleave as they are sent). The summary gives the medians
and the ratios sequenced/plain of both phases: what a sequence costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import e2e
from benchmarks._common import (
    chosen_variants,
    create_client,
    free_port,
    in_turn,
    median,
    scratch_run,
    start_api,
)
from benchmarks.durable import print_run, run_loaded
from benchmarks.submit import http_submissions

VARIANTS = ("plain", "sequenced")


@dataclass
class Accept:
    """The accept phase of one variant: accepted jobs/s and CPU ms per 1,000 jobs."""

    rate: float
    cpu: dict[str, float]

    def line(self, variant: str) -> str:
        cpu = ", ".join(f"{name} {value:.0f}" for name, value in self.cpu.items())
        return f"{variant:<9} accept {self.rate:>7,.0f} jobs/s over HTTP; CPU ms/1000 jobs: {cpu}"


@dataclass
class Figures:
    accepts: dict[str, list[Accept]] = field(
        default_factory=lambda: {variant: [] for variant in VARIANTS}
    )
    runs: dict[str, list[e2e.Throughput]] = field(
        default_factory=lambda: {variant: [] for variant in VARIANTS}
    )

    def accept_rate(self, variant: str) -> float:
        return median([accept.rate for accept in self.accepts[variant]])

    def accept_cpu(self, variant: str) -> float:
        return median([sum(accept.cpu.values()) for accept in self.accepts[variant]])

    def steady(self, variant: str) -> float:
        return median([run.steady for run in self.runs[variant]])

    def run_cpu(self, variant: str) -> float:
        return median([sum(run.cpu.values()) for run in self.runs[variant]])


def bodies(variant: str, keys: int) -> list[bytes]:
    """The bodies of a variant's submissions, taken in turn (submission n sends the one at n
    modulo their number): a plain variant's one no-op, a sequenced one's a key each."""
    plain = {"type": e2e.NOOP_TYPE, "payload": e2e.NOOP_PAYLOAD}
    if variant == "plain":
        return [json.dumps(plain).encode()]
    return [json.dumps(plain | {"sequence_key": f"k{key}"}).encode() for key in range(keys)]


def submitted(args: argparse.Namespace) -> int:
    """How many jobs a variant submits: as many per connection."""
    return args.jobs - args.jobs % args.clients


async def accept(ctx: e2e.Context, token: str, variant: str) -> Accept:
    """The variant's jobs submitted over HTTP into an emptied database, nothing else running,
    by an API of its own: warmed up (its pool's connections, its caches), and stopped at the
    end, so that its backends' statistics (the commits the run counts) are flushed before the
    run starts."""
    args = ctx.args
    port = free_port()
    # A pooled connection per HTTP connection, and shedding off: a sequenced accept holds its
    # connection for a transaction of several statements (a plain one shares a group commit),
    # so with the default pool (16, 8 a worker) half the clients wait for one, and on a busy
    # machine some past the pool's 2 s: 503 database_unavailable. This measures the accept's
    # cost, not the pool's queue.
    api = start_api(
        ctx.database_url,
        port,
        args.workers,
        pool_size=args.clients,
        JOBRELAY_API_MAX_CONCURRENCY="0",
    )
    try:
        await http_submissions(port, token, 400, 8, bodies(variant, 8))
        await e2e.reset_jobs(ctx)
        meter = e2e.CpuMeter({"api": [api.pid]})
        meter.groups.pop("rabbitmq", None)  # the accept does not touch the broker
        meter.start()
        rate, _, statuses = await http_submissions(
            port, token, args.jobs, args.clients, bodies(variant, args.keys)
        )
        meter.stop()
    finally:
        e2e.stop_process(api)
    if set(statuses) != {202}:
        raise SystemExit(f"{variant}: unexpected statuses from the API: {statuses}")
    return Accept(rate, meter.per_thousand(submitted(args)))


async def run(ctx: e2e.Context, token: str) -> Figures:
    args = ctx.args
    per_key = args.jobs / args.keys
    print(
        f"{args.jobs:,} no-op jobs per variant, {args.rounds} round(s); accept: {args.workers} API "
        f"workers x {args.clients} connections; run: 1 dispatcher + {args.consumers} "
        f"consumer(s) x concurrency {args.concurrency}; sequenced: {args.keys:,} keys "
        f"({per_key:g} jobs a key); {os.cpu_count()} CPUs"
    )
    figures = Figures()
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}:")
        for variant in in_turn(args.variants, round_number):
            accepted = await accept(ctx, token, variant)
            figures.accepts[variant].append(accepted)
            print(f"  {accepted.line(variant)}")
            result = await run_loaded(ctx, variant, submitted(args))
            figures.runs[variant].append(result)
            print_run(result)
    report(figures)
    return figures


def report(figures: Figures) -> None:
    print("\nmedians:")
    measured = [variant for variant in VARIANTS if figures.runs[variant]]
    for variant in measured:
        print(
            f"  {variant:<9} run {figures.steady(variant):>7,.0f} jobs/s, CPU "
            f"{figures.run_cpu(variant):>6,.0f} ms per 1,000 jobs; accept "
            f"{figures.accept_rate(variant):>7,.0f} jobs/s, CPU "
            f"{figures.accept_cpu(variant):>6,.0f} ms per 1,000 jobs"
        )
    if len(measured) < len(VARIANTS):
        return
    print(
        f"  what a sequence costs, sequenced/plain: run jobs/s x"
        f"{figures.steady('sequenced') / figures.steady('plain'):.2f}, CPU per job x"
        f"{figures.run_cpu('sequenced') / figures.run_cpu('plain'):.2f}; accept jobs/s x"
        f"{figures.accept_rate('sequenced') / figures.accept_rate('plain'):.2f}, CPU per job x"
        f"{figures.accept_cpu('sequenced') / figures.accept_cpu('plain'):.2f}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--keys", type=int, default=1000, help="sequence keys")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=32, help="concurrent HTTP connections")
    parser.add_argument("--workers", type=int, default=2, help="API worker processes")
    parser.add_argument("--consumers", type=int, default=1, help="consumer processes")
    parser.add_argument("--concurrency", type=int, default=32, help="per consumer")
    parser.add_argument("--timeout", type=float, default=300.0, help="per run")
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"some of {','.join(VARIANTS)}"
    )
    args = parser.parse_args(argv)
    args.variants = chosen_variants(parser, args.variants, VARIANTS)
    if args.jobs < args.clients or args.keys < 1:
        parser.error("--jobs must be at least --clients, and --keys at least 1")
    return args


async def measure(ctx: e2e.Context) -> Figures:
    client_id, token = await create_client(ctx.database_url, "bench-sequences")
    ctx.client_id = client_id  # the jobs e2e's queries count are this client's
    return await run(ctx, token)


def main() -> int:
    args = parse_args()
    with scratch_run("sequences") as scratch:
        ctx = e2e.Context(
            admin_url=scratch.admin_url,
            database_url=scratch.database_url,
            amqp_url=scratch.amqp_url,
            celery_url="",
            workdir=scratch.workdir,
            args=args,
        )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(measure(ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
