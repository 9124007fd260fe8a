"""Metrics that add up over the API's worker processes (``JOBRELAY_API_WORKERS`` > 1).

Each uvicorn worker is a process with counts of its own, and a scrape reaches one of them. In
prometheus_client's multiprocess mode every worker writes its samples to memory-mapped files
named by its pid in one directory, and whichever worker answers a scrape merges the files of
all of them (``MultiProcessCollector``): counters and histograms are summed, the in-flight
gauge too (``livesum``).

- ``jobrelay api`` makes a fresh, private, empty directory for each run
  (``worker_metrics_dir``), names it to the workers in ``PROMETHEUS_MULTIPROC_DIR`` and removes
  it when it exits. prometheus_client reads that variable once, when it is imported, to decide
  how every value is stored: uvicorn starts its workers as new interpreters (spawn) with the
  parent's environment, so they import it with the variable already set.
- A worker that dies (uvicorn starts another in its place) leaves its files: its counts stay in
  the sums, so counters never go backwards. Only its live gauges must go, and the next scrape
  removes them (``forget_dead_workers``, prometheus_client's ``mark_process_dead``).
- A worker that is starting makes its files empty and sizes them a moment later (prometheus_client's
  ``MmapedDict``): a scrape in between must not read one (``WorkerFilesCollector``).
- Process metrics (memory, CPU, open files) are per process: a sum says nothing, and the
  answering worker's own would jump from one worker to another between scrapes (a CPU counter
  going backwards). Every live worker's are exported with a ``pid`` label instead
  (``WorkerProcessCollector``). The garbage collector's counts can only be read from inside
  their process and are left out; ``python_info`` is the same for every worker and stays.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, values
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import Collector

from jobrelay.core.errors import ConfigurationError

DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"

# prometheus_client's file of one worker's live gauges: gauge_<livesum|liveall|…>_<pid>.db.
_LIVE_GAUGE_FILE = re.compile(r"gauge_live[a-z]+_(\d+)\.db")
_PROC = Path("/proc")


@contextlib.contextmanager
def worker_metrics_dir() -> Iterator[Path]:
    """A directory for the metric files of the workers started inside the ``with``: new (so
    empty: no count of an earlier run is added to this one), readable by this user alone,
    named in ``PROMETHEUS_MULTIPROC_DIR`` for them (whatever that variable said before) and
    removed afterwards."""
    previous = os.environ.get(DIRECTORY_VARIABLE)
    try:
        path = Path(tempfile.mkdtemp(prefix="jobrelay-api-metrics-"))
    except OSError as error:
        raise ConfigurationError(
            "cannot create a directory for the API workers' metrics in the temporary directory "
            f"{tempfile.gettempdir()} (set TMPDIR to a writable one): {error.strerror or error}"
        ) from None
    os.environ[DIRECTORY_VARIABLE] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(DIRECTORY_VARIABLE, None)
        else:
            os.environ[DIRECTORY_VARIABLE] = previous
        shutil.rmtree(path, ignore_errors=True)


def metrics_dir_from_env() -> Path | None:
    """The directory a worker shares with the others, when it was started with one."""
    value = os.environ.get(DIRECTORY_VARIABLE)
    return Path(value) if value else None


def served_registry(directory: Path) -> CollectorRegistry:
    """What a worker's ``/metrics`` serves: the merged files of every worker, each live
    worker's process metrics, and ``python_info``."""
    if not getattr(values.ValueClass, "_multiprocess", False):
        raise RuntimeError(
            f"{DIRECTORY_VARIABLE} was set after prometheus_client was imported: this "
            f"process's counts would not be written to {directory}"
        )
    registry = CollectorRegistry()
    WorkerFilesCollector(registry, path=str(directory))  # type: ignore[no-untyped-call]
    WorkerProcessCollector(directory, registry)
    PlatformCollector(registry=registry)
    return registry


# A metrics file starts with its used length (4 bytes) and 4 bytes of padding.
_FILE_HEADER_BYTES = 8


class WorkerFilesCollector(MultiProcessCollector):
    """prometheus_client's merge of every worker's files, less the files a starting worker has
    made but not sized yet: those are empty, hold no sample, and prometheus_client's reader
    fails on them (``struct.error``), which made the scrape that met one answer 500."""

    def collect(self) -> Iterable[Metric]:
        files = [str(path) for path in Path(self._path).glob("*.db") if _sized(path)]
        return self.merge(files, accumulate=True)  # type: ignore[no-untyped-call, no-any-return]


def _sized(path: Path) -> bool:
    try:
        return path.stat().st_size >= _FILE_HEADER_BYTES
    except FileNotFoundError:  # a dead worker's live gauge, removed since the glob
        return False


def forget_dead_workers(directory: Path) -> None:
    """Remove the live gauges of workers that are gone (their counters stay counted)."""
    for pid in live_worker_pids(directory):
        if not worker_alive(pid):
            # Two workers answering scrapes at once may both get here: one removes the file.
            with contextlib.suppress(FileNotFoundError):
                mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]


def live_worker_pids(directory: Path) -> set[int]:
    """The workers with live gauges in ``directory``: every worker makes its in-flight gauge,
    and so its file, when its app is built."""
    pids = set()
    for entry in os.scandir(directory):
        found = _LIVE_GAUGE_FILE.fullmatch(entry.name)
        if found:
            pids.add(int(found.group(1)))
    return pids


def worker_alive(pid: int) -> bool:
    """``pid`` runs and is a worker of the same supervisor as this process: not gone, not a
    zombie the supervisor has yet to reap, and not an unrelated process that took a dead
    worker's pid. Without ``/proc`` (not Linux) only the first can be told."""
    if not _PROC.is_dir():
        return _exists(pid)
    try:
        stat = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return False
    # "pid (command) state ppid …"; the command may hold spaces and parentheses.
    state, parent = stat.rsplit(b")", 1)[1].split()[:2]
    return state != b"Z" and int(parent) == os.getppid()


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class WorkerProcessCollector(Collector):
    """The process metrics of every live worker, with a ``pid`` label (read from ``/proc``,
    as prometheus_client's ``ProcessCollector`` reads its own process)."""

    def __init__(self, directory: Path, registry: CollectorRegistry | None = None) -> None:
        self.directory = directory
        if registry is not None:
            registry.register(self)

    def collect(self) -> Iterable[Metric]:
        families: dict[str, Metric] = {}
        for pid in sorted(live_worker_pids(self.directory)):
            for family in ProcessCollector(pid=_returning(pid), registry=None).collect():
                merged = families.setdefault(
                    family.name,
                    Metric(family.name, family.documentation, family.type, family.unit),
                )
                for sample in family.samples:
                    merged.add_sample(sample.name, sample.labels | {"pid": str(pid)}, sample.value)
        return list(families.values())

    def describe(self) -> Iterable[Metric]:
        return []  # the names of ProcessCollector, which this registry does not hold


def _returning(pid: int) -> Callable[[], int]:
    return lambda: pid
