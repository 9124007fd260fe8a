"""Run one jobrelay service under cProfile timed by the process's CPU clock, not the wall clock.

    JOBRELAY_BENCH_CPU_PROFILE=DIR python -m benchmarks.e2e ...

makes ``_common.start_service`` start each service through this module, which writes
``DIR/<command>-<pid>.prof`` when the service exits (read it with ``python -m pstats``).

Why the CPU clock: on 2 cores shared with PostgreSQL and RabbitMQ, a sampling profiler's wall
samples land wherever the scheduler happened to preempt a process (a socket write that wakes the
server is the usual place), which reads as CPU spent there. ``time.process_time`` counts only
what the process itself ran, so the cumulative times add up to its ``CPU ms per 1000 jobs``.
cProfile's own cost inflates Python-heavy code; compare shares within one profile, and use the
benchmark's CPU figures (not the profile's) for before/after.
"""

from __future__ import annotations

import cProfile
import os
import sys
import time
from pathlib import Path


def main() -> int:
    from jobrelay.cli import main as jobrelay_main

    out = Path(os.environ["JOBRELAY_BENCH_CPU_PROFILE"])
    out.mkdir(parents=True, exist_ok=True)
    profile = cProfile.Profile(time.process_time)
    profile.enable()
    try:
        return jobrelay_main(sys.argv[1:])
    finally:
        profile.disable()
        profile.dump_stats(out / f"{sys.argv[1]}-{os.getpid()}.prof")


if __name__ == "__main__":
    sys.exit(main())
