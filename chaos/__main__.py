"""``python -m chaos --profile short|long|cluster|pg-failover|… [--seed N] [--jobs N]
[--faults N] [--workdir DIR] [--history PATH] [--keep] [--async-standby] [--no-sequences]
[--no-batches]``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import sys
from pathlib import Path

from chaos.runner import PROFILES, Options, run
from chaos.workload import Shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description="Load jobrelay while injecting faults; check that nothing is lost or doubled.",
    )
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short")
    parser.add_argument(
        "--seed", type=int, help="the fault schedule and workload (default: random)"
    )
    parser.add_argument("--jobs", type=int, help="override the profile's number of jobs")
    parser.add_argument("--faults", type=int, help="override the profile's number of faults")
    parser.add_argument(
        "--primary-faults", type=int, help="override the profile's number of primary faults"
    )
    parser.add_argument("--workdir", type=Path, help="logs and results (default: .local/chaos/…)")
    parser.add_argument(
        "--history",
        type=Path,
        help="copy a passing run's history (history.jsonl, docs/history.md) to this path",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch database, vhost and workdir"
    )
    parser.add_argument(
        "--async-standby",
        action="store_true",
        help="profiles with primary faults: a Patroni cluster whose standby is asynchronous "
        "(synchronous_mode: false), to measure what a failover loses (docs/failover.md)",
    )
    parser.add_argument(
        "--no-sequences",
        action="store_true",
        help="submit no job with a sequence key (the plan's share of them, ~15%%, is left out)",
    )
    parser.add_argument(
        "--no-batches",
        action="store_true",
        help="submit no job of the batch type chaos.batch (its ~10%% share is left out)",
    )
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.jobs is not None:
        profile = dataclasses.replace(profile, jobs=args.jobs)
    if args.faults is not None:
        profile = dataclasses.replace(profile, faults=args.faults)
    if args.primary_faults is not None:
        profile = dataclasses.replace(profile, primary_faults=args.primary_faults)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    synchronous = False if args.async_standby else None
    shares = Shares(sequences=not args.no_sequences, batches=not args.no_batches)
    options = Options(profile, seed, args.workdir, args.keep, synchronous, shares, args.history)
    return asyncio.run(run(options))


if __name__ == "__main__":
    sys.exit(main())
