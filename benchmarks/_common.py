"""Shared pieces of the benchmarks: a scratch database, the API as a process, percentiles."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg

from jobrelay.core.fingerprint import token_hash
from jobrelay.db.engine import libpq_url
from tests.support import databases
from tests.support.processes import free_port

__all__ = ["free_port"]  # the benchmarks import it from here


def admin_database_url() -> str:
    url = os.environ.get("JOBRELAY_DATABASE_URL")
    if not url:
        sys.exit(
            "benchmarks need servers: run `make bench`, or "
            "`python scripts/servers.py run -- python benchmarks/<name>.py`"
        )
    return url


def server_urls(module: str) -> tuple[str, str, str]:
    """JOBRELAY_DATABASE_URL (admin), JOBRELAY_AMQP_URL and JOBRELAY_RABBITMQ_API_URL, as
    ``servers.py run`` sets them for ``python -m benchmarks.<module>``; else an exit saying so."""
    admin_url = admin_database_url()
    amqp_base = os.environ.get("JOBRELAY_AMQP_URL")
    api_url = os.environ.get("JOBRELAY_RABBITMQ_API_URL")
    if not (amqp_base and api_url):
        sys.exit(f"run under `python scripts/servers.py run -- python -m benchmarks.{module}`")
    return admin_url, amqp_base, api_url


def first_node(amqp_url: str) -> str:
    """The first URL of ``JOBRELAY_AMQP_URL``, which lists a cluster's nodes separated by commas
    (node 1 first, where jobrelay's services connect first and its queues get their leader): for
    a client that takes one URL, as aio-pika's ``connect`` and Celery do."""
    return amqp_url.split(",")[0].strip()


def scratch_database(admin_url: str) -> str:
    name = f"jobrelay_bench_{uuid.uuid4().hex[:8]}"
    databases.admin_execute(admin_url, f'CREATE DATABASE "{name}"')
    url = databases.with_database(admin_url, name)
    databases.migrate(url)
    return url


async def sql(url: str, statement: str, params: Any = None) -> list[Any]:
    """One statement on its own autocommit connection; its rows, if it returns any."""
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        cursor = await conn.execute(statement, params)
        return await cursor.fetchall() if cursor.description else []


async def create_client(url: str, name: str) -> tuple[uuid.UUID, str]:
    """A client row with a fresh bearer token: its id and the token."""
    token = f"jr_bench_{uuid.uuid4().hex}"
    client_id = uuid.uuid4()
    async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
        await conn.execute(
            "INSERT INTO jobrelay.clients (id, name, token_hash) VALUES (%s, %s, %s)",
            (client_id, name, token_hash(token)),
        )
    return client_id, token


def submission(token: str, key: str, body: bytes) -> bytes:
    """``POST /v1/jobs`` as minimal HTTP/1.1 on a keep-alive connection: the load generators
    write it to a socket themselves, which costs far less CPU than an HTTP client library."""
    return (
        f"POST /v1/jobs HTTP/1.1\r\nHost: bench\r\n"
        f"Authorization: Bearer {token}\r\n"
        f"Idempotency-Key: {key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def drop_database(admin_url: str, url: str) -> None:
    databases.drop_database(admin_url, url)


@dataclass(frozen=True)
class Scratch:
    admin_url: str
    database_url: str
    amqp_url: str
    workdir: Path


@contextlib.contextmanager
def scratch_run(module: str) -> Iterator[Scratch]:
    """A scratch database, RabbitMQ vhost and work directory of one benchmark run, all three
    removed at the end however it ends."""
    from tests.support.servers import create_vhost, delete_vhost, vhost_amqp_url

    admin_url, amqp_base, api_url = server_urls(module)
    vhost = f"jobrelay-{module}-{uuid.uuid4().hex[:8]}"
    database_url = scratch_database(admin_url)
    workdir = Path(tempfile.mkdtemp(prefix=f"jobrelay-{module}-"))
    try:
        create_vhost(api_url, vhost)
        yield Scratch(admin_url, database_url, vhost_amqp_url(amqp_base, vhost), workdir)
    finally:
        with contextlib.suppress(Exception):
            delete_vhost(api_url, vhost)
        drop_database(admin_url, database_url)
        shutil.rmtree(workdir, ignore_errors=True)


def start_api(
    url: str, port: int, workers: int, *, pool_size: int = 16, **env: str
) -> subprocess.Popen[bytes]:
    """``jobrelay api`` on ``url``'s database and ``port``, answering once its /healthz does;
    ``env``: more JOBRELAY_* settings."""
    api = start_service(
        ["api"],
        {
            "JOBRELAY_DATABASE_URL": url,
            "JOBRELAY_API_PORT": str(port),
            "JOBRELAY_API_WORKERS": str(workers),
            "JOBRELAY_DB_POOL_SIZE": str(pool_size),
            **env,
        },
    )
    wait_http(f"http://127.0.0.1:{port}/healthz")
    return api


def start_service(args: list[str], env_overrides: dict[str, str]) -> subprocess.Popen[bytes]:
    env = os.environ | env_overrides
    env["PYTHONPATH"] = str(ROOT)
    env.setdefault("JOBRELAY_LOG_LEVEL", "WARNING")
    env.setdefault("JOBRELAY_BUILTINS", "true")  # the benchmarks submit the demo types
    # JOBRELAY_BENCH_CPU_PROFILE=DIR: each service under a CPU-clock cProfile (_cpu_profile.py).
    module = "benchmarks._cpu_profile" if env.get("JOBRELAY_BENCH_CPU_PROFILE") else "jobrelay"
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        env=env,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


PEERS_VENV = ROOT / ".local" / "venv-peers"
PEERS_LOCK = ROOT / "requirements" / "bench-peers.txt"


def peers_python() -> Path:
    """The python of ``.local/venv-peers``: the peers jobrelay is measured beside (DBOS,
    procrastinate), exactly as ``requirements/bench-peers.txt`` locks them (hashes required),
    never installed beside jobrelay. Made once; made again when the lock is newer than it."""
    python = PEERS_VENV / "bin" / "python"
    stamp = PEERS_VENV / ".installed"
    if stamp.exists() and stamp.stat().st_mtime >= PEERS_LOCK.stat().st_mtime:
        return python
    print(f"installing {PEERS_LOCK.relative_to(ROOT)} into {PEERS_VENV.relative_to(ROOT)}")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(PEERS_VENV)], check=True)
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(PEERS_LOCK)],
        check=True,
    )
    stamp.touch()
    return python


async def until_all_done(
    conn: psycopg.AsyncConnection[Any],
    done_sql: str,
    *,
    name: str,
    jobs: int,
    worker: subprocess.Popen[bytes],
    meter: Any,
    deadline: float,
) -> tuple[int, tuple[Any, ...]]:
    """Poll ``done_sql`` (its first columns: how many done, how many failed) every 50 ms until
    ``jobs`` are done, ``meter`` running from the first completion seen to the last. Returns how
    many were done at that first completion, and the last row read. A failure, the worker's
    exit or the ``deadline`` (``time.perf_counter``) ends the benchmark, saying which."""
    seen = 0
    while True:
        row = await (await conn.execute(done_sql)).fetchone()
        assert row is not None
        done, failed = row[0], row[1]
        if failed:
            raise SystemExit(f"{name}: {failed} no-op jobs failed")
        if done and not seen:
            seen = done
            meter.start()
        if done >= jobs:
            meter.stop()
            return seen, tuple(row)
        if worker.poll() is not None:
            raise SystemExit(f"{name} worker exited with {worker.returncode}")
        if time.perf_counter() > deadline:
            raise SystemExit(f"{name}: only {done}/{jobs} done in time")
        await asyncio.sleep(0.05)


def chosen_variants(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> list[str]:
    """The variants ``--variants`` names (comma-separated), in ``known``'s order; an unknown
    one ends the program with the parser's error."""
    named = {name.strip() for name in text.split(",")}
    if unknown := named - set(known):
        parser.error(f"unknown variants {sorted(unknown)}: choose from {', '.join(known)}")
    return [variant for variant in known if variant in named]


def in_turn(variants: Sequence[str], round_number: int) -> list[str]:
    """``variants`` in the order of round ``round_number`` (from 1): the order turns each
    round, so that the machine's drift hits every variant alike."""
    turn = (round_number - 1) % len(variants)
    return [*variants[turn:], *variants[:turn]]


def wait_http(url: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout}s")


def percentile(values: list[float], fraction: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))
    return ordered[index]


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
