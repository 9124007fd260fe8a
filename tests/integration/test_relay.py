"""The relay against real PostgreSQL and RabbitMQ (docs/life-of-a-job.md), dispatchers running
in-process."""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import uuid
from datetime import timedelta

import aio_pika
from sqlalchemy import func, text
from sqlalchemy.ext.asyncio import AsyncConnection

from chaos.proxy import Mode, Proxy
from jobrelay.broker.publisher import Publisher
from jobrelay.core import topology as names
from jobrelay.core.relay import TIMEOUT, OutboxRow
from jobrelay.core.states import JobState
from jobrelay.db import tables
from jobrelay.db.listener import APPLICATION_NAME
from jobrelay.db.relay_store import RelayStore
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.support import factories
from tests.support.outbox import (
    count_published,
    count_unpublished,
    drain,
    eventually,
    insert_jobs,
    running_dispatcher,
)
from tests.support.queues import queue_depth
from tests.support.relay import store_maintenance

# A poll interval no test waits out: a row published within a test's wait was woken otherwise.
HOUR = 3600.0
# A short publish deadline, so that a publish that fails is retried within the test.
PUBLISH_TIMEOUT = 2.0
# A relay window wider than a test's rows, for those that publish thousands with no consumer
# (the flow pick still leases every batch).
WIDE_WINDOW = 1_000_000
# insert_jobs' type, and the queue the dispatcher routes it to.
SLEEP_QUEUE = names.type_queue_name("demo.sleep")


async def all_published(store: Store) -> bool:
    return await count_unpublished(store) == 0


async def test_rows_become_persistent_messages_with_the_exact_body_and_properties(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(publish_timeout_seconds=PUBLISH_TIMEOUT)
    due = await insert_jobs(store, 3, job_type="catalog.export")
    later = await insert_jobs(store, 2, job_type="catalog.export", delay=3600)

    async with running_dispatcher(settings) as dispatcher:
        await eventually(lambda: count_published(store), what="a published row")
        await eventually(lambda: _published_count_is(store, 3), what="the three due rows published")
        await asyncio.sleep(3 * settings.poll_interval_seconds)
    assert dispatcher.metrics.published._value.get() == 3

    messages = await drain(settings.amqp_url, names.type_queue_name("catalog.export"))
    assert len(messages) == 3
    by_outbox_id = {int(m.message_id or 0): m for m in messages}
    assert set(by_outbox_id) == {outbox_id for outbox_id, _ in due}
    for outbox_id, job_id in due:
        message = by_outbox_id[outbox_id]
        assert (
            message.body
            == json.dumps(
                {"job_id": str(job_id), "type": "catalog.export", "version": 1},
                separators=(",", ":"),
            ).encode()
        )
        assert message.document == {"job_id": str(job_id), "type": "catalog.export", "version": 1}
        assert message.delivery_mode == 2  # persistent
        assert message.content_type == "application/json"
        assert message.message_id == str(outbox_id)
        assert message.correlation_id == str(job_id)
        assert message.routing_key == "catalog.export"
        assert message.exchange == names.JOBS_EXCHANGE

    rows = await store.fetch_all(
        text(
            "SELECT id, published_at, publish_attempts, last_error FROM jobrelay.outbox ORDER BY id"
        )
    )
    state = {row.id: row for row in rows}
    for outbox_id, _ in due:
        assert state[outbox_id].published_at is not None
        assert state[outbox_id].publish_attempts == 1
    for outbox_id, _ in later:
        assert state[outbox_id].published_at is None
        assert state[outbox_id].publish_attempts == 0
    events = await store.fetch_all(
        text("SELECT job_id, detail FROM jobrelay.job_journal WHERE event = 'published'")
    )
    assert sorted((e.job_id, e.detail) for e in events) == sorted(
        (job_id, f"outbox {outbox_id}") for outbox_id, job_id in due
    )


async def _published_count_is(store: Store, n: int) -> bool:
    return await count_published(store) == n


async def test_unroutable_rows_stay_unpublished_with_the_error_and_drain_after_rebinding(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(publish_timeout_seconds=PUBLISH_TIMEOUT)
    await insert_jobs(store, 1)
    async with running_dispatcher(settings) as dispatcher:
        await eventually(lambda: all_published(store), what="the first row (topology declared)")
        await _bind_sleep_queues(settings.amqp_url, bound=False)

        rows = await insert_jobs(store, 20)
        await eventually(
            lambda: _all_failed_with(store, [r[0] for r in rows], "unroutable"),
            what="every new row to record an unroutable error",
        )
        assert await count_unpublished(store) == 20
        assert await queue_depth(settings.amqp_url, SLEEP_QUEUE) == 1  # only the first message
        assert dispatcher.metrics.failures.labels(reason="unroutable")._value.get() >= 20

        await _bind_sleep_queues(settings.amqp_url, bound=True)
        await eventually(lambda: all_published(store), within=15, what="the rows to drain")

    published = await store.fetch_all(
        text("SELECT publish_attempts, last_error FROM jobrelay.outbox WHERE id = ANY(:ids)"),
        ids=[r[0] for r in rows],
    )
    assert all(row.publish_attempts >= 2 and row.last_error is None for row in published)
    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    assert {m.message_id for m in messages} >= {str(outbox_id) for outbox_id, _ in rows}


async def _all_failed_with(store: Store, ids: list[int], reason: str) -> bool:
    rows = await store.fetch_all(
        text("SELECT last_error, published_at FROM jobrelay.outbox WHERE id = ANY(:ids)"), ids=ids
    )
    return all(
        row.published_at is None and (row.last_error or "").startswith(reason) for row in rows
    )


async def _bind_sleep_queues(amqp_url: str, *, bound: bool) -> None:
    """Bind or unbind both queues a demo.sleep message may go to: its own and, through the
    alternate exchange, the default queue."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        default = await channel.declare_queue(names.DEFAULT_QUEUE, passive=True)
        own = await channel.declare_queue(SLEEP_QUEUE, passive=True)
        if bound:
            await default.bind(names.UNROUTED_EXCHANGE)
            await own.bind(names.JOBS_EXCHANGE, routing_key="demo.sleep")
        else:
            await default.unbind(names.UNROUTED_EXCHANGE)
            await own.unbind(names.JOBS_EXCHANGE, routing_key="demo.sleep")


async def test_two_dispatchers_publish_every_row_exactly_once(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(
        publish_timeout_seconds=PUBLISH_TIMEOUT, dispatch_batch_size=25, relay_window=WIDE_WINDOW
    )
    rows = await insert_jobs(store, 2000)
    async with running_dispatcher(settings) as first, running_dispatcher(settings) as second:
        await eventually(lambda: all_published(store), within=60, what="every row published")

    first_count = first.metrics.published._value.get()
    second_count = second.metrics.published._value.get()
    assert first_count + second_count == 2000
    assert first_count > 0 and second_count > 0, "both dispatchers must have taken part"
    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    ids = [m.message_id for m in messages]
    assert len(ids) == 2000
    assert set(ids) == {str(outbox_id) for outbox_id, _ in rows}
    attempts = await store.fetch_one(text("SELECT max(publish_attempts) AS n FROM jobrelay.outbox"))
    assert attempts is not None and attempts.n == 1


async def test_a_lower_outbox_id_committing_after_a_higher_one_is_published_too(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(publish_timeout_seconds=PUBLISH_TIMEOUT)
    client_id = (await factories.client(store)).id

    async def job_and_outbox_row(connection: AsyncConnection) -> int:
        made = await factories.job(connection, client_id=client_id, payload={})
        [row] = await factories.outbox(connection, [made])
        return int(row.id)

    async with running_dispatcher(settings):
        async with store.transaction() as slow:
            low_id = await job_and_outbox_row(slow)
            async with store.transaction() as fast:
                high_id = await job_and_outbox_row(fast)
            assert low_id < high_id
            await eventually(
                lambda: _is_published(store, high_id), what="the higher id to be published"
            )
            await asyncio.sleep(0.5)  # the relay has moved on past the higher id
        await eventually(lambda: _is_published(store, low_id), what="the lower id to be published")
    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    assert sorted(int(m.message_id or 0) for m in messages) == [low_id, high_id]


async def _is_published(store: Store, outbox_id: int) -> bool:
    return (await factories.outbox_row(store, outbox_id)).published_at is not None


async def test_a_killed_listener_reconnects_and_its_reconnection_wakes_the_relay(
    make_settings: MakeSettings, store: Store, direct_database_url: str
) -> None:
    """The poll is an hour away, so only the listener can wake the relay within the waits
    below (each far under the hour): a logical bound, not a measure of speed. Its loss and its
    reconnection wake the relay (rows committed meanwhile sent no NOTIFY it heard), and once
    back a NOTIFY does."""
    # The LISTEN connection is what this test kills: behind PgBouncer it takes
    # JOBRELAY_LISTEN_DATABASE_URL, the server itself (docs/pgbouncer.md).
    settings = make_settings(
        publish_timeout_seconds=PUBLISH_TIMEOUT,
        poll_interval_seconds=HOUR,
        listen_database_url=direct_database_url,
    )
    async with running_dispatcher(settings) as dispatcher:
        await eventually(
            lambda: _listener_backends(store), what="the dispatcher's LISTEN connection"
        )
        await insert_jobs(store, 1)
        await eventually(lambda: all_published(store), what="a row before the kill")

        killed = await store.fetch_all(
            text(
                "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
                "WHERE application_name = :name AND datname = current_database()"
            ),
            name=APPLICATION_NAME,
        )
        assert killed and all(row.ok for row in killed)
        await insert_jobs(store, 5)
        await eventually(lambda: all_published(store), within=60, what="rows after the kill")
        # The listener comes back, and wakes the relay at once again.
        await eventually(lambda: _listener_backends(store), what="the listener to reconnect")
        assert dispatcher.metrics.listener_connected._value.get() == 1
        await insert_jobs(store, 1)
        await eventually(lambda: all_published(store), within=60, what="a notified row")


async def _listener_backends(store: Store) -> int:
    row = await store.fetch_one(
        text(
            "SELECT count(*) AS n FROM pg_stat_activity "
            "WHERE application_name = :name AND datname = current_database() "
            "AND query ILIKE 'LISTEN%'"
        ),
        name=APPLICATION_NAME,
    )
    return int(row.n) if row is not None else 0


# --- rescue -----------------------------------------------------------------------------------


async def test_an_expired_lease_is_rescued_exactly_once_with_two_dispatchers_running(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(publish_timeout_seconds=PUBLISH_TIMEOUT, relay_window=WIDE_WINDOW)
    jobs = await insert_jobs(store, 300)
    job_ids = [job_id for _, job_id in jobs]
    async with running_dispatcher(settings) as first:
        await eventually(lambda: all_published(store), what="the original rows published")
        async with running_dispatcher(settings) as second:
            a_second_ago = func.now() - timedelta(seconds=1)
            await factories.set_job(
                store,
                job_ids,
                state=JobState.RUNNING,
                lease_until=a_second_ago,
                updated_at=func.now(),
            )
            # Concurrent rescuers on top of the two dispatchers' own sweeps.
            relay_store = RelayStore(store)
            extra = await asyncio.gather(*(relay_store.rescue_expired_leases(7) for _ in range(8)))
            await eventually(
                lambda: _none_running(store),
                what="every expired lease rescued",
            )
            await eventually(lambda: all_published(store), what="the rescue rows published")

    rescued_by_dispatchers = (
        first.metrics.rescued._value.get() + second.metrics.rescued._value.get()
    )
    assert rescued_by_dispatchers + sum(len(batch) for batch in extra) == 300
    per_job = await store.fetch_all(
        text(
            """
            SELECT j.id, j.state,
                   (SELECT count(*) FROM jobrelay.job_journal e
                     WHERE e.job_id = j.id AND e.event = 'lease_expired') AS expired_events,
                   (SELECT count(*) FROM jobrelay.outbox o WHERE o.job_id = j.id) AS outbox_rows
            FROM jobrelay.jobs j
            """
        )
    )
    assert len(per_job) == 300
    for row in per_job:
        assert (row.state, row.expired_events, row.outbox_rows) == ("queued", 1, 2), row
    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    assert len(messages) == 600


async def _none_running(store: Store) -> bool:
    return await factories.count(store, tables.jobs, tables.jobs.c.state == "running") == 0


# --- retention ----------------------------------------------------------------------------------


async def test_retention_deletes_old_published_rows_in_batches_and_keeps_live_jobs_stories(
    store: Store,
) -> None:
    jobs = await insert_jobs(store, 30)
    job_ids = [job_id for _, job_id in jobs]
    ten_days_ago = func.now() - timedelta(days=10)
    async with store.transaction() as connection:
        await factories.job_events(connection, job_ids, "received", at=ten_days_ago)
        # 20 old published rows, 5 recent published ones, 5 unpublished; 10 of the old ones are
        # of jobs cancelled just now: a finished job's rows go with it (DELETE_FINISHED_JOBS),
        # only a live job's are deleted on their own.
        await factories.set_outbox(
            connection, tables.outbox.c.job_id.in_(job_ids[:20]), published_at=ten_days_ago
        )
        await factories.set_outbox(
            connection, tables.outbox.c.job_id.in_(job_ids[20:25]), published_at=func.now()
        )
        await factories.set_job(connection, job_ids[:10], state=JobState.CANCELLED)
    maintenance = store_maintenance(store, retention_seconds=24 * 3600, retention_batch_size=3)
    assert await maintenance.apply_retention() == (10, 0)
    assert await maintenance.apply_retention() == (0, 0)
    assert (await count_unpublished(store), await count_published(store)) == (5, 15)
    # Every job keeps its whole story until the job itself is deleted
    # (tests/integration/test_storage.py).
    assert await factories.count(store, tables.job_events) == 30


async def test_metrics_are_served_over_http_when_a_port_is_set(
    make_settings: MakeSettings, store: Store, unused_tcp_port: int
) -> None:
    settings = make_settings(publish_timeout_seconds=PUBLISH_TIMEOUT)
    import urllib.request

    async with running_dispatcher(settings) as dispatcher:
        dispatcher.metrics.serve(unused_tcp_port, host="127.0.0.1")
        await insert_jobs(store, 4)
        await eventually(lambda: all_published(store), what="rows published")
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(f"http://127.0.0.1:{unused_tcp_port}/metrics").read()
        )
    page = body.decode()
    assert "jobrelay_dispatcher_messages_published_total 4.0" in page
    assert 'jobrelay_dispatcher_publish_failures_total{reason="unroutable"} 0.0' in page
    assert "jobrelay_dispatcher_oldest_due_unpublished_age_seconds" in page
    assert "jobrelay_dispatcher_batch_size_count" in page
    assert "jobrelay_dispatcher_rescued_leases_total" in page


async def test_publishes_the_broker_never_confirms_time_out_together_and_leave_nothing_running(
    amqp_url: str,
) -> None:
    """One deadline covers the batch: through a proxy that swallows every byte, each publish
    ends as a timeout after ``publish_timeout`` (none hangs, none outlives the batch). Forty
    deadlines one after another would take 80 s: a batch ended within the 30 s wait below (and
    15 times one deadline) had one deadline for all, a logical bound rather than a speed."""
    url = urllib.parse.urlsplit(amqp_url)
    proxy = Proxy("broker", url.hostname or "127.0.0.1", url.port or 5672)
    port = proxy.start()
    publisher = Publisher(
        url._replace(netloc=f"{url.username}:{url.password}@127.0.0.1:{port}").geturl(),
        publish_timeout=2.0,
        delivery_limit=50,
    )
    try:
        await publisher.connect()
        rows = [OutboxRow(n, uuid.uuid4(), "demo.sleep", 0) for n in range(40)]
        assert all(o.confirmed for o in await publisher.publish_batch(rows[:2]))
        proxy.set_mode(Mode.BLACKHOLE)
        # The proxy never answers, so only a publish deadline can end the batch.
        outcomes = await asyncio.wait_for(publisher.publish_batch(rows), 30)
        assert [o.reason for o in outcomes] == [TIMEOUT] * len(rows)
        assert [o.row for o in outcomes] == rows
        leftovers = [
            t
            for t in asyncio.all_tasks() - {asyncio.current_task()}
            if "publish" in getattr(t.get_coro(), "__qualname__", "").lower()
        ]
        assert leftovers == []
    finally:
        proxy.close()
        await publisher.close()
