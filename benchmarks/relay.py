"""Relay throughput and latency, beside the raw publish rate measured in the same run.

    python scripts/servers.py run -- python benchmarks/relay.py [--rows 20000] [--rate 200]

Reads JOBRELAY_DATABASE_URL / JOBRELAY_AMQP_URL / JOBRELAY_RABBITMQ_API_URL (``servers.py run``
sets them), creates a scratch database and vhost, and prints:
1. raw: pipelined, confirmed aio-pika publishes of the same messages to the same queue
   (``--in-flight`` at a time), messages/s;
2. relay: one dispatcher draining a preloaded outbox of ``--rows`` rows, messages/s from its
   first lease (as raw is timed from its first publish: neither counts connecting), and the
   ratio to raw;
3. latency at a steady light load (``--rate`` jobs/s): from the commit of the job's outbox row to
   ``published_at`` (written right after the broker's confirm), p50 and p99.

On a RabbitMQ cluster (JOBRELAY_AMQP_URL lists its nodes) raw publishes through the first node,
where the dispatcher connects first too, to the same quorum queue (replicated on every node);
``benchmarks/cluster.py`` runs this beside a single node. ``measure`` returns the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import aio_pika
from sqlalchemy import text

from benchmarks._common import first_node
from jobrelay import eventloop
from jobrelay.broker.publisher import build_message
from jobrelay.broker.topology import declare_topology
from jobrelay.core import topology as names
from jobrelay.core.relay import OutboxRow
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from jobrelay.dispatcher.service import Dispatcher
from tests.support import databases
from tests.support.outbox import insert_jobs
from tests.support.servers import create_vhost, delete_vhost, vhost_amqp_url


async def purge(amqp_url: str) -> None:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        queue = await channel.declare_queue(names.DEFAULT_QUEUE, passive=True)
        await queue.purge()


async def raw_publish_rate(amqp_url: str, rows: list[OutboxRow], in_flight: int) -> float:
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel(publisher_confirms=True, on_return_raises=True)
        exchange = await declare_topology(channel, delivery_limit=50)
        started = time.perf_counter()
        for start in range(0, len(rows), in_flight):
            chunk = rows[start : start + in_flight]
            await asyncio.gather(
                *(
                    exchange.publish(build_message(row), routing_key=row.type, mandatory=True)
                    for row in chunk
                )
            )
        elapsed = time.perf_counter() - started
    return len(rows) / elapsed


async def wait_published(store: Store, total: int, poll: float = 0.01) -> None:
    while True:
        row = await store.fetch_one(
            text("SELECT count(*) AS n FROM jobrelay.outbox WHERE published_at IS NOT NULL")
        )
        if row is not None and row.n >= total:
            return
        await asyncio.sleep(poll)


async def wait_counted(
    dispatcher: Dispatcher, total: int, *, name: str, poll: float = 0.001
) -> None:
    """Until one of the dispatcher's own counters reaches ``total``: free to read, where a
    ``count(*)`` every few ms would take database CPU from the relay it measures."""
    registry = dispatcher.metrics.registry
    while True:
        if (registry.get_sample_value(name) or 0) >= total:
            return
        await asyncio.sleep(poll)


# Rows per insert while preloading: one multi-row INSERT binds every column of every row, and
# PostgreSQL takes at most 65,535 parameters in one statement.
PRELOAD_CHUNK = 5_000


async def relay_rate(settings: Settings, store: Store, n: int) -> float:
    for start in range(0, n, PRELOAD_CHUNK):
        await insert_jobs(store, min(PRELOAD_CHUNK, n - start))
    dispatcher = Dispatcher(settings)
    task = asyncio.create_task(dispatcher.run())
    # With a relay window (--window), a consumer acks as fast as it can: the window refills.
    consumer = asyncio.create_task(consume(settings.amqp_url)) if settings.relay_window else None
    # Timed from the first lease, as the raw rate is timed from its first publish: neither
    # counts connecting to the broker and declaring the topology.
    await wait_counted(dispatcher, 1, name="jobrelay_dispatcher_batch_size_count")
    started = time.perf_counter()
    await wait_counted(dispatcher, n, name="jobrelay_dispatcher_messages_published_total")
    elapsed = time.perf_counter() - started
    await wait_published(store, n)  # the counter agrees with the table
    dispatcher.stop()
    await task
    if consumer is not None:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
    return n / elapsed


async def consume(amqp_url: str) -> None:
    """Ack every message of the default queue as it comes (until cancelled)."""
    connection = await aio_pika.connect(first_node(amqp_url))
    async with connection:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=500)
        while True:
            try:
                queue = await channel.declare_queue(names.DEFAULT_QUEUE, passive=True)
                break
            except aio_pika.exceptions.ChannelNotFoundEntity:
                await asyncio.sleep(0.05)  # the dispatcher declares it when it connects
                channel = await connection.channel()
                await channel.set_qos(prefetch_count=500)
        async with queue.iterator() as messages:
            async for message in messages:
                await message.ack()


async def latency(settings: Settings, store: Store, rate: float, seconds: float) -> list[float]:
    """Commit → confirm latencies (ms) at ``rate`` single-row commits per second."""
    dispatcher = Dispatcher(settings)
    task = asyncio.create_task(dispatcher.run())
    consumer = asyncio.create_task(consume(settings.amqp_url)) if settings.relay_window else None
    await asyncio.sleep(1.0)  # connected and listening
    commits: dict[int, float] = {}
    interval = 1.0 / rate
    next_at = time.time()
    deadline = next_at + seconds
    while next_at < deadline:
        [(outbox_id, _)] = await insert_jobs(store, 1)
        commits[outbox_id] = time.time()  # the commit has returned
        next_at += interval
        await asyncio.sleep(max(0.0, next_at - time.time()))
    await wait_published(store, len(commits) + await _published_before(store, commits))
    dispatcher.stop()
    await task
    if consumer is not None:
        consumer.cancel()
        await asyncio.gather(consumer, return_exceptions=True)
    rows = await store.fetch_all(
        text(
            "SELECT id, EXTRACT(EPOCH FROM published_at) AS at FROM jobrelay.outbox WHERE id = "
            "ANY(:ids)"
        ),
        ids=list(commits),
    )
    return [max(0.0, (float(row.at) - commits[row.id]) * 1000) for row in rows]


async def _published_before(store: Store, commits: dict[int, float]) -> int:
    row = await store.fetch_one(
        text("SELECT count(*) AS n FROM jobrelay.outbox WHERE NOT (id = ANY(:ids))"),
        ids=list(commits),
    )
    return int(row.n) if row is not None else 0


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


@dataclass(frozen=True)
class RelayFigures:
    raw: float  # msgs/s, before the relay
    raw_after: float  # msgs/s, after it
    relay: float  # msgs/s
    latencies: list[float]  # commit -> confirm, ms

    @property
    def raw_mean(self) -> float:
        return (self.raw + self.raw_after) / 2


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--in-flight", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    # The relay window (JOBRELAY_RELAY_WINDOW); 0: none, the relay as before flow control. With
    # one, a consumer drains the queue while the relay runs.
    parser.add_argument("--window", type=int, default=0)
    return parser.parse_args(argv)


async def main() -> int:
    args = parse_args()
    admin_url = os.environ.get("JOBRELAY_DATABASE_URL")
    amqp_base = os.environ.get("JOBRELAY_AMQP_URL")
    api_url = os.environ.get("JOBRELAY_RABBITMQ_API_URL")
    if not (admin_url and amqp_base and api_url):
        print("run under `python scripts/servers.py run -- python benchmarks/relay.py`")
        return 2
    await measure(args, admin_url, amqp_base, api_url)
    return 0


async def measure(
    args: argparse.Namespace, admin_url: str, amqp_base: str, api_url: str
) -> RelayFigures:
    """The three phases on scratch copies (database, vhost) of these servers, printed as they
    finish; ``amqp_base`` may list a cluster's nodes."""
    template = databases.create_template(admin_url)
    database_url = databases.copy_template(admin_url, template)
    vhost = f"jobrelay-bench-{uuid.uuid4().hex[:8]}"
    create_vhost(api_url, vhost)
    amqp_url = vhost_amqp_url(amqp_base, vhost)
    raw_url = first_node(amqp_url)  # aio-pika's connect takes one URL
    settings = Settings(
        database_url=database_url,
        amqp_url=amqp_url,
        dispatch_batch_size=args.batch,
        relay_window=args.window,
    )
    store = Store.connect(database_url)
    try:
        sample = [
            OutboxRow(id=i, job_id=uuid.uuid4(), type="demo.sleep", publish_attempts=1)
            for i in range(1, args.rows + 1)
        ]
        raw = await raw_publish_rate(raw_url, sample, args.in_flight)
        await purge(raw_url)
        relay = await relay_rate(settings, store, args.rows)
        await purge(raw_url)
        raw_after = await raw_publish_rate(raw_url, sample, args.in_flight)
        await purge(raw_url)
        raw_mean = (raw + raw_after) / 2
        print(
            f"raw confirmed publish ({args.in_flight} in flight): {raw:,.0f} and "
            f"{raw_after:,.0f} msgs/s (before/after the relay; mean {raw_mean:,.0f})"
        )
        print(
            f"relay from a preloaded outbox of {args.rows:,} rows (batch {args.batch}, "
            f"window {args.window or 'off'}): "
            f"{relay:,.0f} msgs/s = {relay / raw_mean:.0%} of raw"
        )
        latencies = await latency(settings, store, args.rate, args.seconds)
        print(
            f"commit -> confirm latency at {args.rate:.0f} jobs/s over {args.seconds:.0f}s "
            f"({len(latencies)} jobs): p50 {percentile(latencies, 50):.1f} ms, "
            f"p99 {percentile(latencies, 99):.1f} ms, max {max(latencies):.1f} ms"
        )
        return RelayFigures(raw, raw_after, relay, latencies)
    finally:
        await store.close()
        databases.drop_database(admin_url, database_url)
        databases.admin_execute(admin_url, f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
        delete_vhost(api_url, vhost)


if __name__ == "__main__":
    # The dispatcher's own event loop (uvloop), for the raw baseline as for the relay.
    sys.exit(eventloop.run(main()))
