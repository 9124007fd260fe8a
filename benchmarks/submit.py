"""Accepted jobs per second over HTTP, beside two baselines measured in the same run.

    python scripts/servers.py run -- python -m benchmarks.submit [--jobs 6000] [--clients 32]

- Raw job+outbox inserts: the same rows (a job, its outbox row, its `received` event) into the
  same PostgreSQL with psycopg; the API also authenticates, validates, checks idempotency and
  answers over HTTP.
- Celery's ``apply_async`` with publisher confirms (``confirm_publish``): what "accepted" costs
  a Celery producer that wants to know the broker has the message, from as many threads as the
  API has connections, on the benchmark's RabbitMQ.

The load generator speaks minimal HTTP/1.1 over keep-alive sockets so that it costs little CPU
beside the API on a 2-core machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Sequence

import psycopg

from benchmarks._common import (
    admin_database_url,
    create_client,
    drop_database,
    free_port,
    median,
    percentile,
    scratch_database,
    start_api,
    submission,
)
from jobrelay.core.fingerprint import request_hash
from jobrelay.core.ids import new_id
from jobrelay.db.engine import libpq_url

RAW_INSERT = """
WITH j AS (
    INSERT INTO jobrelay.jobs (id, client_id, idempotency_key, request_hash, type, payload,
        max_attempts)
    VALUES (%s, %s, %s, %s, 'catalog.export', %s, 3)
    ON CONFLICT (client_id, idempotency_key) DO NOTHING
    RETURNING id, available_at
)
INSERT INTO jobrelay.outbox (job_id, available_at) SELECT id, available_at FROM j
"""


async def raw_inserts(url: str, client_id: uuid.UUID, jobs: int, connections: int) -> float:
    payload = json.dumps({"course": "JavaScript"})
    fingerprint = request_hash("catalog.export", {"course": "JavaScript"})
    per_connection = jobs // connections
    run = uuid.uuid4().hex[:8]

    async def worker(index: int) -> None:
        async with await psycopg.AsyncConnection.connect(libpq_url(url), autocommit=True) as conn:
            for number in range(per_connection):
                await conn.execute(
                    RAW_INSERT,
                    (new_id(), client_id, f"raw-{run}-{index}-{number}", fingerprint, payload),
                )

    started = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(connections)))
    return per_connection * connections / (time.perf_counter() - started)


def celery_confirmed_publishes(amqp_url: str, jobs: int, threads: int) -> float:
    """Jobs/s of Celery ``apply_async`` with publisher confirms, ``threads`` producers at once
    (each waits for its publish's confirm, as an accepted submission waits for its COMMIT)."""
    from benchmarks import celery_app

    app = celery_app.app
    app.conf.broker_url = amqp_url
    app.conf.broker_transport_options = {"confirm_publish": True}
    app.conf.broker_pool_limit = threads
    per_thread = jobs // threads
    start = threading.Barrier(threads + 1)

    def producer() -> None:
        with app.producer_or_acquire() as pooled:
            start.wait()
            for _ in range(per_thread):
                celery_app.noop.apply_async((0.0,), producer=pooled)

    workers = [threading.Thread(target=producer) for _ in range(threads)]
    for worker in workers:
        worker.start()
    start.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    with app.connection_for_write() as connection:
        connection.default_channel.queue_purge(celery_app.QUEUE)
    return per_thread * threads / elapsed


CATALOG_EXPORT = json.dumps({"type": "catalog.export", "payload": {"course": "JavaScript"}})


async def http_submissions(
    port: int,
    token: str,
    jobs: int,
    clients: int,
    bodies: Sequence[bytes] = (CATALOG_EXPORT.encode(),),
) -> tuple[float, list[float], dict[int, int]]:
    """``jobs`` submissions over ``clients`` keep-alive connections at once: the rate, each
    one's latency and the statuses answered. The n-th submission's body is
    ``bodies[n % len(bodies)]``, n counted across the connections in the order they take
    turns (connection i sends i, i + clients, ...), so that the bodies interleave as sent."""
    per_client = jobs // clients
    run = uuid.uuid4().hex[:8]
    latencies: list[float] = []
    statuses: dict[int, int] = {}

    async def client(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for number in range(per_client):
                key = f"http-{run}-{index}-{number}"
                request = submission(token, key, bodies[(number * clients + index) % len(bodies)])
                sent = time.perf_counter()
                writer.write(request)
                status_line = await reader.readline()
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                latencies.append(time.perf_counter() - sent)
                status = int(status_line.split()[1])
                statuses[status] = statuses.get(status, 0) + 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(client(i) for i in range(clients)))
    return per_client * clients / (time.perf_counter() - started), latencies, statuses


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=6000)
    parser.add_argument("--clients", type=int, default=32, help="concurrent HTTP connections")
    parser.add_argument("--connections", type=int, default=8, help="raw insert connections")
    parser.add_argument("--workers", type=int, default=2, help="API worker processes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--celery-threads", type=int, default=32, help="apply_async producers")
    args = parser.parse_args()
    amqp_url = os.environ.get("JOBRELAY_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")

    admin_url = admin_database_url()
    url = scratch_database(admin_url)
    port = free_port()
    client_id, token = await create_client(url, "bench")
    api = start_api(url, port, args.workers)
    try:
        await http_submissions(port, token, 400, 8)  # warm up
        api_rates, raw_rates, celery_rates, all_latencies = [], [], [], []
        for _ in range(args.rounds):
            raw_rates.append(await raw_inserts(url, client_id, args.jobs, args.connections))
            celery_rates.append(
                await asyncio.to_thread(
                    celery_confirmed_publishes, amqp_url, args.jobs, args.celery_threads
                )
            )
            rate, latencies, statuses = await http_submissions(port, token, args.jobs, args.clients)
            if set(statuses) != {202}:
                raise SystemExit(f"unexpected statuses from the API: {statuses}")
            api_rates.append(rate)
            all_latencies += latencies
    finally:
        api.terminate()
        api.wait(10)
        drop_database(admin_url, url)

    api_rate, raw_rate, celery_rate = median(api_rates), median(raw_rates), median(celery_rates)
    print(
        f"submit benchmark: {args.jobs} jobs x {args.rounds} rounds, "
        f"{args.clients} HTTP connections, {args.workers} API workers"
    )
    print(
        f"  raw job+outbox+event inserts ({args.connections} psycopg connections): "
        f"{raw_rate:8.0f} jobs/s  (rounds: {', '.join(f'{r:.0f}' for r in raw_rates)})"
    )
    print(
        f"  Celery apply_async, confirmed ({args.celery_threads} threads):      "
        f"{celery_rate:8.0f} jobs/s  (rounds: {', '.join(f'{r:.0f}' for r in celery_rates)})"
    )
    print(
        f"  API POST /v1/jobs accepted (202):                 "
        f"{api_rate:8.0f} jobs/s  (rounds: {', '.join(f'{r:.0f}' for r in api_rates)})"
    )
    print(
        f"  API latency: p50 {percentile(all_latencies, 0.5) * 1000:.1f} ms, "
        f"p99 {percentile(all_latencies, 0.99) * 1000:.1f} ms"
    )
    print(f"  ratio API / raw: {api_rate / raw_rate:.2f}")
    print(f"  ratio API / Celery apply_async (confirmed): {api_rate / celery_rate:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
