"""``jobrelay api`` with two worker processes: whichever worker answers a scrape reports the
sum over both, counters never go backwards, also when a worker is SIGKILLed and uvicorn starts
another, and the alerting gauges come from the database (``api/multiprocess.py``,
``api/stats_metrics.py``)."""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path

from prometheus_client.multiprocess import MultiProcessCollector

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import make_client
from tests.support.metrics import (
    Samples,
    arrange_alerts,
    assert_arranged,
    monotonic_samples,
    samples,
    value,
)
from tests.support.processes import answers, free_port, running, service_env, wait_for

HEALTHZ = 200  # requests before the kill
MORE_HEALTHZ = 50  # and after it
SUBMITTED = 5
MOST_SCRAPES = 500  # to see both workers answer; each answer is a coin toss of the kernel


class Scraper:
    """``/metrics`` on a new connection each time (so either worker may answer); at every
    scrape, no counter or histogram sample may go backwards or vanish since the one before,
    and the requests to ``/healthz`` must be ``healthz`` exactly once they reached it."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.healthz = 0
        self.scrapes = 0
        self._previous: Samples = {}

    def scrape(self) -> Samples:
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as response:
            text = response.read().decode()
        self.scrapes += 1
        current = monotonic_samples(text)
        for key, before in self._previous.items():
            if key not in current and key[0].startswith("process_"):
                continue  # a dead worker's own process metrics (its pid label) go with it
            assert key in current, f"scrape {self.scrapes}: {key} vanished"
            assert current[key] >= before, f"scrape {self.scrapes}: {key} went back"
        self._previous = current
        scraped = samples(text)
        counted = healthz_requests(scraped)
        assert counted <= self.healthz, f"scrape {self.scrapes}: {counted} /healthz"
        return scraped

    def request_healthz(self, times: int) -> None:
        for _ in range(times):
            get(self.base + "/healthz")
            self.healthz += 1

    def until_healthz_counted(self) -> Samples:
        """Scrapes until every ``/healthz`` answered is counted (a worker records a request
        just after its answer went out), then one that must say exactly as much."""
        wait_for(lambda: healthz_requests(self.scrape()) == self.healthz, what="the count")
        scraped = self.scrape()
        assert healthz_requests(scraped) == self.healthz
        return scraped


def healthz_requests(scraped: Samples) -> float:
    counted = value(
        scraped, "jobrelay_api_request_seconds_count", route="/healthz", method="GET", status="200"
    )
    return counted or 0


def get(url: str) -> None:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200


def submit(base: str, token: str, key: str) -> None:
    request = urllib.request.Request(
        base + "/v1/jobs",
        data=json.dumps({"type": "catalog.export", "payload": {"course": key}}).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 202


def workers_of(parent: int) -> set[int]:
    """The uvicorn workers of ``parent``: its children started by multiprocessing's spawn (not
    its resource tracker)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_bytes()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # gone meanwhile
        state, ppid = stat.rsplit(b")", 1)[1].split()[:2]
        if int(ppid) == parent and state != b"Z" and b"spawn_main" in command:
            found.add(int(entry.name))
    return found


def workers_with_apps(directory: Path) -> set[int]:
    """The workers whose app is built: each makes its in-flight gauge's file then."""
    return {int(path.stem.rsplit("_", 1)[1]) for path in directory.glob("gauge_live*_*.db")}


def pids_with_process_metrics(scraped: Samples) -> set[int]:
    return {
        int(dict(labels)["pid"]) for name, labels in scraped if name == "process_start_time_seconds"
    }


def scrapes_answered(directory: Path) -> dict[int, float]:
    """How many ``/metrics`` requests each worker answered, from the files it wrote."""
    answered: dict[int, float] = {}
    for path in directory.glob("histogram_*.db"):
        pid = int(path.stem.split("_")[1])
        for family in MultiProcessCollector.merge([str(path)]):
            for sample in family.samples:
                if sample.name.endswith("_count") and sample.labels.get("route") == "/metrics":
                    answered[pid] = answered.get(pid, 0) + sample.value
    return {pid: n for pid, n in answered.items() if n > 0}


async def test_two_workers_report_the_sum_of_both_on_every_scrape_even_after_one_is_killed(
    settings: Settings, store: Store, tmp_path: Path
) -> None:
    await arrange_alerts(store)
    token = await make_client(store, "shop")
    temp = tmp_path / "temp"  # where `jobrelay api` makes its workers' metrics directory
    temp.mkdir()
    port = free_port()
    env = service_env(
        settings.model_copy(update={"api_workers": 2}),
        JOBRELAY_API_PORT=str(port),
        TMPDIR=str(temp),
    )
    base = f"http://127.0.0.1:{port}"

    with running(["api"], env, tmp_path / "api.log") as api:
        # Probed elsewhere than /healthz, whose requests are counted below.
        wait_for(lambda: answers(base + "/openapi.json") or not api.alive(), what="the API")
        assert api.alive(), api.output()
        workers = wait_for(lambda: len(found := workers_of(api.pid)) == 2 and found, what="2")
        [directory] = temp.iterdir()
        # A worker on a busy machine may still be importing: until its app is built (and its
        # gauge file made) every request goes to the other one.
        wait_for(lambda: workers_with_apps(directory) == workers, what="both workers' apps")

        scraper = Scraper(base)
        scraper.request_healthz(HEALTHZ)
        for n in range(SUBMITTED):
            submit(base, token, f"export-{n}")
        scraped = scraper.until_healthz_counted()
        created = value(
            scraped, "jobrelay_api_submissions_total", type="catalog.export", outcome="created"
        )
        assert created == SUBMITTED
        assert_arranged(scraped, submitted=SUBMITTED)
        assert pids_with_process_metrics(scraped) == workers

        # Both workers answer scrapes, and each answers with the sum of both.
        while set(scrapes_answered(directory)) != workers and scraper.scrapes < MOST_SCRAPES:
            assert healthz_requests(scraper.scrape()) == HEALTHZ
        assert set(scrapes_answered(directory)) == workers, scrapes_answered(directory)

        victim = min(workers)
        os.kill(victim, signal.SIGKILL)
        # uvicorn's supervisor sees the dead worker and starts another in its place.
        replaced = wait_for(
            lambda: len(found := workers_of(api.pid)) == 2 and victim not in found and found,
            what="a new worker",
        )
        # The dead worker's counts stay in every scrape; its process metrics and its live
        # gauges (requests in flight) go once it is gone.
        wait_for(
            lambda: pids_with_process_metrics(scraper.until_healthz_counted()) == replaced,
            what="the new worker's metrics",
        )
        assert not list(directory.glob(f"gauge_live*_{victim}.db"))
        scraped = scraper.until_healthz_counted()
        assert value(scraped, "jobrelay_api_requests_in_flight") == 0
        assert (
            value(
                scraped, "jobrelay_api_submissions_total", type="catalog.export", outcome="created"
            )
            == SUBMITTED
        )

        scraper.request_healthz(MORE_HEALTHZ)
        for _ in range(20):
            scraped = scraper.until_healthz_counted()
        assert healthz_requests(scraped) == HEALTHZ + MORE_HEALTHZ
        assert api.terminate() == 0, api.output()

    assert not directory.exists()  # removed by `jobrelay api` as it exits
