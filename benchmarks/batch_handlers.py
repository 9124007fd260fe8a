"""What a batch handler buys: the same work done one job per call and a hundred jobs per call,
alternated per round in the same run, through the real services.

    python scripts/servers.py run -- python -m benchmarks.batch_handlers \\
        [--jobs 5000] [--rounds 1] [--concurrency 100] [--api-connections 4]

Reads JOBRELAY_DATABASE_URL (admin: creates scratch databases), JOBRELAY_AMQP_URL and
JOBRELAY_RABBITMQ_API_URL (a scratch vhost); drops them at the end. ``make
bench-batch-handlers`` runs it.

The work (``benchmarks/batch_handler_types.py``): a call to an external API that costs 5 ms per
call plus 0.05 ms per item, of which one consumer process makes ``--api-connections`` at a time.
Variants, each on ``--jobs`` jobs written before its services start (as the API's accept
writes them), timed until all finished, as ``benchmarks/e2e.py`` measures the no-op: a
dispatcher and one consumer of ``--concurrency`` (by default 100, the batch type's
``batch_size``, to which a batch consumer raises its prefetch anyway: both variants hold as
many deliveries at once):
- ``one``: ``bench.mail_one``, one call per job;
- ``batch``: ``bench.mail_batch``, ``batch_size=100``, ``batch_wait=0.05``: one call per batch.

Per variant: jobs/s "steady" (completions between the first and the last, startup excluded) and
CPU ms per 1,000 jobs of the processes measured; the summary gives both medians and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import durable, e2e
from benchmarks._common import median, scratch_run
from benchmarks.batch_handler_types import (
    BATCH,
    CALL_MS_VARIABLE,
    CONNECTIONS_VARIABLE,
    HANDLERS,
    ONE,
)

VARIANTS = {"one": ONE, "batch": BATCH}


async def run(ctx: e2e.Context) -> dict[str, list[e2e.Throughput]]:
    args = ctx.args
    print(
        f"{args.jobs:,} jobs per run, {args.rounds} round(s); 1 dispatcher + 1 consumer x "
        f"concurrency {args.concurrency}; the API: {args.call_ms:g} ms per call + 0.05 ms per "
        "item, "
        f"{args.api_connections} calls at a time per process; {os.cpu_count()} CPUs"
    )
    runs: dict[str, list[e2e.Throughput]] = {variant: [] for variant in VARIANTS}
    for round_number in range(1, args.rounds + 1):
        print(f"round {round_number}:")
        order = list(VARIANTS) if round_number % 2 else list(reversed(VARIANTS))
        for variant in order:
            result = await durable.jobrelay_run(ctx, variant, args.jobs, VARIANTS[variant])
            runs[variant].append(result)
            print(f"  {result.line()}")
    report(runs)
    return runs


def report(runs: dict[str, list[e2e.Throughput]]) -> None:
    steady = {variant: median([run.steady for run in found]) for variant, found in runs.items()}
    cpu = {
        variant: median([sum(run.cpu.values()) for run in found]) for variant, found in runs.items()
    }
    print("\nmedians:")
    for variant in VARIANTS:
        print(
            f"  {variant:<6} {steady[variant]:>7,.0f} jobs/s, "
            f"CPU {cpu[variant]:>6,.0f} ms per 1,000 jobs (all processes measured)"
        )
    print(
        f"  batch/one: jobs/s x{steady['batch'] / steady['one']:.2f}, "
        f"CPU per job x{cpu['batch'] / cpu['one']:.2f}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=100, help="of the consumer")
    parser.add_argument(
        "--api-connections", type=int, default=4, help="the API's calls at a time per process"
    )
    parser.add_argument(
        "--call-ms", type=float, default=5.0, help="what one call of the API costs, ms"
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="per run")
    args = parser.parse_args(argv)
    args.consumers = 1  # what e2e.start_jobrelay reads
    return args


def main() -> int:
    args = parse_args()
    with scratch_run("batch_handlers") as scratch:
        ctx = e2e.Context(
            admin_url=scratch.admin_url,
            database_url=scratch.database_url,
            amqp_url=scratch.amqp_url,
            celery_url="",
            workdir=scratch.workdir,
            args=args,
            extra_env={
                "JOBRELAY_HANDLERS": HANDLERS,
                CONNECTIONS_VARIABLE: str(args.api_connections),
                CALL_MS_VARIABLE: str(args.call_ms),
            },
        )
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(run(ctx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
