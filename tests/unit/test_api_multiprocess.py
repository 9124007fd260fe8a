"""The bookkeeping of the API workers' shared metrics directory (``api/multiprocess.py``);
the counts themselves are checked with real workers in
``tests/acceptance/test_metrics_multiprocess.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from prometheus_client.mmap_dict import MmapedDict

from jobrelay.api.multiprocess import (
    DIRECTORY_VARIABLE,
    WorkerFilesCollector,
    WorkerProcessCollector,
    forget_dead_workers,
    live_worker_pids,
    worker_alive,
    worker_metrics_dir,
)
from jobrelay.core.errors import ConfigurationError


def a_dead_pid() -> int:
    """The pid of a process that ran, ended and was reaped."""
    process = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    return int(process.stdout)


def test_each_run_gets_a_new_private_empty_directory_named_to_its_workers_and_removed_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(DIRECTORY_VARIABLE, "/somewhere/else")
    with worker_metrics_dir() as first:
        assert os.environ[DIRECTORY_VARIABLE] == str(first)
        assert list(first.iterdir()) == []
        assert first.stat().st_mode & 0o777 == 0o700
        (first / "counter_1.db").write_bytes(b"x")
    with worker_metrics_dir() as second:
        assert second != first and list(second.iterdir()) == []
    assert not first.exists() and not second.exists()
    assert os.environ[DIRECTORY_VARIABLE] == "/somewhere/else"


def test_the_variable_is_gone_after_a_run_when_it_was_not_set_before(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(DIRECTORY_VARIABLE, raising=False)
    with worker_metrics_dir():
        pass
    assert DIRECTORY_VARIABLE not in os.environ


def test_a_temporary_directory_that_takes_no_directory_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", "/proc")  # nobody, root included, makes one there
    with (
        pytest.raises(ConfigurationError, match="set TMPDIR to a writable one"),
        worker_metrics_dir(),
    ):
        pass


def test_a_worker_is_alive_while_it_runs_beside_this_process_and_dead_once_gone() -> None:
    assert worker_alive(os.getpid())  # its parent is this process's parent: a sibling
    assert not worker_alive(a_dead_pid())
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as child:
        try:
            # Running, but not started by this process's parent: not one of the workers (a
            # dead worker's pid taken by another process).
            assert not worker_alive(child.pid)
        finally:
            child.kill()


def test_a_dead_worker_loses_its_live_gauges_and_keeps_its_counts(tmp_path: Path) -> None:
    dead, alive = a_dead_pid(), os.getpid()
    for pid in (dead, alive):
        for kind in ("counter", "histogram", "gauge_livesum", "gauge_all"):
            (tmp_path / f"{kind}_{pid}.db").write_bytes(b"")
    assert live_worker_pids(tmp_path) == {dead, alive}

    forget_dead_workers(tmp_path)

    assert live_worker_pids(tmp_path) == {alive}
    left = {path.name for path in tmp_path.iterdir()}
    assert f"gauge_livesum_{dead}.db" not in left
    assert {f"counter_{dead}.db", f"histogram_{dead}.db", f"gauge_all_{dead}.db"} <= left


def test_every_live_worker_s_process_metrics_carry_its_pid(tmp_path: Path) -> None:
    (tmp_path / f"gauge_livesum_{os.getpid()}.db").write_bytes(b"")
    (tmp_path / f"gauge_livesum_{a_dead_pid()}.db").write_bytes(b"")  # no /proc entry
    if not Path("/proc/self/stat").exists():
        pytest.fail("these tests run on Linux: /proc is needed for process metrics")
    families = {family.name: family for family in WorkerProcessCollector(tmp_path).collect()}
    [start] = families["process_start_time_seconds"].samples
    assert start.labels == {"pid": str(os.getpid())}
    [cpu] = families["process_cpu_seconds"].samples
    assert cpu.name == "process_cpu_seconds_total" and cpu.labels == {"pid": str(os.getpid())}


def test_a_scrape_skips_the_empty_files_of_a_worker_that_is_starting(tmp_path: Path) -> None:
    """A starting worker's files exist, empty, for a moment before they are sized: the scrape
    then sums the other workers' counts instead of failing."""
    written = MmapedDict(str(tmp_path / "counter_101.db"))
    key = '["jobs_total", "jobs_total", {}, "Jobs"]'
    written.write_value(key, 3.0, 0.0)
    written.close()
    (tmp_path / "counter_102.db").write_bytes(b"")  # made, not sized yet
    (tmp_path / "histogram_102.db").write_bytes(b"\0\0")

    [family] = WorkerFilesCollector(None, path=str(tmp_path)).collect()

    assert [(sample.name, sample.value) for sample in family.samples] == [("jobs_total", 3.0)]
