"""The dispatcher as scheduler (docs/flow-control.md): the relay window per work queue, priority
order, clients in turn, paused queues and concurrency limits, against real PostgreSQL and
RabbitMQ with dispatchers running in-process. Each of these fails on the relay before flow
control, which published every due row at once, oldest first."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from sqlalchemy import text

from jobrelay.core.relay import QueueFigures
from jobrelay.core.states import JobState
from jobrelay.core.topology import type_queue_name
from jobrelay.db.queue_store import queue_figures
from jobrelay.db.store import Store
from jobrelay.dispatcher.service import Dispatcher
from tests.conftest import MakeSettings
from tests.support import factories
from tests.support.outbox import count_published, drain, running_dispatcher
from tests.support.waiting import eventually

WINDOW = 50
# due_jobs' type, and its queue.
SLEEP_QUEUE = type_queue_name("demo.sleep")


async def served(store: Store, job_type: str = "demo.sleep") -> None:
    """``job_type`` served by a running consumer, as one says it (job_types.served_until): the
    window counts the messages in its queue. A type nobody serves waits outside the window."""
    await store.fetch_all(
        text(
            "INSERT INTO jobrelay.job_types (name, payload_schema, timeout_seconds, registered_by, "
            "served_until) VALUES (:name, '{}', 30, 'test', now() + interval '1 hour')"
        ),
        name=job_type,
    )


async def due_jobs(store: Store, n: int, **values: Any) -> list[uuid.UUID]:
    """``n`` queued jobs of one client (a new one unless given), with their outbox rows."""
    made = await factories.jobs(store, n, with_outbox=True, **values)
    return [row.id for row in made]


def gauge(dispatcher: Dispatcher, name: str, queue: str = "default") -> float | None:
    return dispatcher.metrics.registry.get_sample_value(name, {"queue": queue})


async def set_paused(store: Store, queue: str, paused: bool) -> None:
    await store.fetch_all(
        text(
            "INSERT INTO jobrelay.queues (name, paused_at) VALUES (:name, CASE WHEN :paused THEN "
            "now() END) "
            "ON CONFLICT (name) DO UPDATE SET paused_at = EXCLUDED.paused_at"
        ),
        name=queue,
        paused=paused,
    )


async def stays(store: Store, published: int, seconds: float) -> None:
    """The published count stays at ``published`` for ``seconds``."""
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        assert await count_published(store) == published
        await asyncio.sleep(0.1)


async def test_the_window_publishes_at_most_its_size_and_a_drain_lets_the_rest_through(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(relay_window=WINDOW)
    await served(store)
    await due_jobs(store, 1000)
    async with running_dispatcher(settings) as dispatcher:
        await eventually(lambda: _published(store, WINDOW), what="the window filled")
        await stays(store, WINDOW, 1.5)
        await eventually(
            lambda: _async(gauge(dispatcher, "jobrelay_relay_backlog_held") == 950),
            what="the held backlog in the metric",
        )
        assert gauge(dispatcher, "jobrelay_relay_window_in_use") == WINDOW
        messages = await drain(settings.amqp_url, SLEEP_QUEUE, idle=3.0)
        assert len(messages) == 1000
        assert await count_published(store) == 1000
        await eventually(
            lambda: _async(gauge(dispatcher, "jobrelay_relay_backlog_held") == 0),
            what="no backlog held once drained",
        )


async def test_a_high_priority_job_behind_a_low_priority_backlog_is_published_within_a_window(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(relay_window=WINDOW)
    await served(store)
    await due_jobs(store, 2000, priority=-5)
    async with running_dispatcher(settings):
        await eventually(lambda: _published(store, WINDOW), what="the window filled")
        [urgent] = await due_jobs(store, 1, priority=10)
        messages = await drain(settings.amqp_url, SLEEP_QUEUE, idle=3.0)
    order = [m.correlation_id for m in messages]
    assert len(order) == 2001
    # Published at the first fill after it arrived: behind what the window already held.
    assert order.index(str(urgent)) <= WINDOW + 5, order.index(str(urgent))


async def test_a_clients_backlog_does_not_delay_another_clients_job_by_more_than_the_window(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(relay_window=WINDOW)
    await served(store)
    await due_jobs(store, 5000)
    async with running_dispatcher(settings):
        await eventually(lambda: _published(store, WINDOW), what="the window filled")
        [bob] = await due_jobs(store, 1)  # another client, due after all of the first's
        messages = await drain(settings.amqp_url, SLEEP_QUEUE, idle=3.0)
    order = [m.correlation_id for m in messages]
    assert len(order) == 5001
    # What the window held when it came, then at most 2 x window / 2 clients publishes.
    assert order.index(str(bob)) <= WINDOW + 2 * WINDOW // 2, order.index(str(bob))


async def test_clients_take_turns_from_the_first_fill(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(relay_window=WINDOW)
    await served(store)
    await due_jobs(store, 3000)
    [bob] = await due_jobs(store, 1)
    async with running_dispatcher(settings):
        await eventually(lambda: _published(store, WINDOW), what="the window filled")
        messages = await drain(settings.amqp_url, SLEEP_QUEUE, idle=0.5)
    order = [m.correlation_id for m in messages]
    assert str(bob) in order[:WINDOW], "the second client's one job is in the first window"


async def test_a_paused_queue_publishes_nothing_while_others_go_and_resumes(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(type_queues="catalog.export=slow")
    await set_paused(store, "default", True)
    await due_jobs(store, 30)
    slow = await due_jobs(store, 20, job_type="catalog.export")
    async with running_dispatcher(settings):
        await eventually(lambda: _published(store, 20), what="the other queue's jobs published")
        await stays(store, 20, 2.0)
        published = await store.fetch_all(
            text("SELECT job_id FROM jobrelay.outbox WHERE published_at IS NOT NULL")
        )
        assert {row.job_id for row in published} == set(slow)
        await set_paused(store, "default", False)
        await eventually(lambda: _published(store, 50), within=5.0, what="resumed within 5 s")
    queued = await store.fetch_all(text("SELECT name FROM jobrelay.queues ORDER BY name"))
    assert [row.name for row in queued] == ["default", "slow"]  # registered at start


async def test_a_type_at_its_concurrency_limit_is_skipped_while_others_go(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings()
    await store.fetch_all(
        text("INSERT INTO jobrelay.type_limits (type, concurrency) VALUES ('demo.sleep', 2)")
    )
    running = await factories.jobs(store, 2, state=JobState.RUNNING)
    limited = await due_jobs(store, 10)
    others = await due_jobs(store, 10, job_type="catalog.export")
    async with running_dispatcher(settings):
        await eventually(lambda: _published(store, 10), what="the other type published")
        await stays(store, 10, 1.0)
        published = await store.fetch_all(
            text("SELECT job_id FROM jobrelay.outbox WHERE published_at IS NOT NULL")
        )
        assert {row.job_id for row in published} == set(others)
        # The running ones finish: their slots free, at most 2 a fill.
        await factories.set_job(
            store,
            [job.id for job in running],
            state=JobState.SUCCEEDED,
            lease_token=None,
            lease_until=None,
        )
        await eventually(lambda: _at_least(store, 12), what="the freed slots filled")
        # The limit lifted at runtime takes effect within seconds, no restart.
        await store.fetch_all(text("DELETE FROM jobrelay.type_limits WHERE type = 'demo.sleep'"))
        await eventually(lambda: _published(store, 20), within=5.0, what="the limit lifted")
    assert len(limited) == 10


async def test_two_dispatchers_in_flow_never_lease_a_row_twice(
    make_settings: MakeSettings, store: Store
) -> None:
    settings = make_settings(relay_window=WINDOW, dispatch_batch_size=20)
    await served(store)
    clients = [(await factories.client(store)).id for _ in range(3)]
    for index, client_id in enumerate(clients):
        await due_jobs(store, 200, client_id=client_id, priority=index)
    async with running_dispatcher(settings), running_dispatcher(settings):
        await eventually(lambda: _at_least(store, 1), what="the topology declared")
        messages = await drain(settings.amqp_url, SLEEP_QUEUE, idle=3.0)
    assert len(messages) == 600
    assert len({m.message_id for m in messages}) == 600
    attempts = await store.fetch_one(text("SELECT max(publish_attempts) AS n FROM jobrelay.outbox"))
    assert attempts is not None and attempts.n == 1


async def _published(store: Store, n: int) -> bool:
    return await count_published(store) == n


async def _at_least(store: Store, n: int) -> bool:
    return await count_published(store) >= n


async def _async(value: bool) -> bool:
    return value


async def test_queue_figures_count_backlog_running_and_pause_per_queue(store: Store) -> None:
    await set_paused(store, "slow", True)
    await due_jobs(store, 3)
    await due_jobs(store, 2, job_type="catalog.export")
    await factories.jobs(store, 1, state=JobState.RUNNING, job_type="catalog.export")
    figures = await queue_figures(store, {"catalog.export": "slow"})
    assert figures == [
        QueueFigures("default", paused=False, backlog=3, running=0),
        QueueFigures("slow", paused=True, backlog=2, running=1),
    ]
