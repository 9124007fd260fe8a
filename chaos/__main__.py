"""``python -m chaos --profile short|long [--seed N] [--workdir DIR] [--keep]``."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
import sys
from pathlib import Path

from chaos.runner import PROFILES, Options, run


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
    parser.add_argument("--workdir", type=Path, help="logs and results (default: .local/chaos/…)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the scratch database, vhost and workdir"
    )
    args = parser.parse_args(argv)
    profile = PROFILES[args.profile]
    if args.jobs is not None:
        profile = dataclasses.replace(profile, jobs=args.jobs)
    if args.faults is not None:
        profile = dataclasses.replace(profile, faults=args.faults)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1_000_000)
    return asyncio.run(run(Options(profile, seed, args.workdir, args.keep)))


if __name__ == "__main__":
    sys.exit(main())
