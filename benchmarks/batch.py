"""Accepted jobs per second in batches (``POST /v1/jobs/batch``), beside single submissions
and raw inserts measured in the same run.

    python scripts/servers.py run -- python -m benchmarks.batch [--jobs 20000] [--batch 100]

- Batches: ``--connections`` keep-alive connections, each posting batches of ``--batch`` jobs
  (each job its own idempotency key), one at a time.
- Single submissions: ``POST /v1/jobs`` over 32 keep-alive connections, as
  ``benchmarks.submit`` measures them.
- Raw inserts: the same rows (a job, its outbox row, its ``received`` event) through psycopg,
  one statement per job, 8 connections: the floor of a design that writes each job on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid

from benchmarks._common import (
    admin_database_url,
    create_client,
    drop_database,
    free_port,
    median,
    scratch_database,
    start_api,
)
from benchmarks.submit import http_submissions, raw_inserts

JOB = {"type": "catalog.export", "payload": {"course": "JavaScript"}}


async def batch_submissions(
    port: int, token: str, jobs: int, batch: int, connections: int
) -> float:
    """Accepted jobs/s over ``connections`` connections posting batches of ``batch``."""
    batches = jobs // batch // connections
    run = uuid.uuid4().hex[:8]

    async def poster(index: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for number in range(batches):
                items = [
                    {"idempotency_key": f"b-{run}-{index}-{number}-{n}", **JOB}
                    for n in range(batch)
                ]
                body = json.dumps({"jobs": items}).encode()
                writer.write(
                    (
                        "POST /v1/jobs/batch HTTP/1.1\r\nHost: bench\r\n"
                        f"Authorization: Bearer {token}\r\n"
                        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                    ).encode()
                    + body
                )
                status = int((await reader.readline()).split()[1])
                length = 0
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                answer = json.loads(await reader.readexactly(length))
                statuses = {item["status"] for item in answer.get("results", [])}
                if status != 200 or statuses != {202}:
                    raise SystemExit(f"unexpected answer to a batch: {status} {statuses}")
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(poster(i) for i in range(connections)))
    return batches * batch * connections / (time.perf_counter() - started)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=20000, help="jobs per measurement")
    parser.add_argument("--batch", type=int, default=100, help="jobs per batch")
    parser.add_argument("--connections", type=int, default=4, help="connections posting batches")
    parser.add_argument("--workers", type=int, default=2, help="API worker processes")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    admin_url = admin_database_url()
    url = scratch_database(admin_url)
    port = free_port()
    client_id, token = await create_client(url, "bench-batch")
    api = start_api(url, port, args.workers)
    batch_rates, single_rates, raw_rates = [], [], []
    try:
        await batch_submissions(port, token, 1000, args.batch, 2)  # warm up
        for _ in range(args.rounds):
            batch_rates.append(
                await batch_submissions(port, token, args.jobs, args.batch, args.connections)
            )
            rate, _, statuses = await http_submissions(port, token, args.jobs // 4, 32)
            if set(statuses) != {202}:
                raise SystemExit(f"unexpected statuses from the API: {statuses}")
            single_rates.append(rate)
            raw_rates.append(await raw_inserts(url, client_id, args.jobs // 4, 8))
    finally:
        api.terminate()
        api.wait(10)
        drop_database(admin_url, url)

    batch, single, raw = median(batch_rates), median(single_rates), median(raw_rates)
    print(
        f"batch benchmark: {args.rounds} rounds, {args.workers} API workers, "
        f"batches of {args.batch} over {args.connections} connections"
    )
    for name, rates in (
        (f"API POST /v1/jobs/batch ({args.batch} a batch)", batch_rates),
        ("API POST /v1/jobs, one job a request (32 conns)", single_rates),
        ("raw job+outbox+event inserts, one a statement", raw_rates),
    ):
        figure = median(rates)
        rounds = ", ".join(f"{rate:.0f}" for rate in rates)
        print(f"  {name:<50} {figure:8.0f} jobs/s  (rounds: {rounds})")
    print(f"  ratio batch / single: {batch / single:.2f}; batch / raw: {batch / raw:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
