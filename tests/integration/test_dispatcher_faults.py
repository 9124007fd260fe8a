"""The dispatcher as a real process, with the broker, the database and the process itself failing
under it. Nothing is lost; a crash may publish a row twice."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from sqlalchemy import text

from jobrelay.core.settings import Settings
from jobrelay.core.topology import type_queue_name
from jobrelay.db.store import Store
from jobrelay.db.tables import outbox
from tests.conftest import MakeSettings
from tests.support import factories
from tests.support.faults import close_all_broker_connections, pg_restart, rabbitmqctl
from tests.support.outbox import (
    count_published,
    count_unpublished,
    drain,
    eventually,
    insert_jobs,
)
from tests.support.processes import Service, running, service_env
from tests.support.queues import depth_is

pytestmark = pytest.mark.slow


# Publishes time out in a second and rows go out in small batches: the faults land mid-run.
# The relay window wider than any test's rows: these publish thousands with no consumer (the
# flow pick still leases every batch).
# The queue of the jobs' type (insert_jobs makes demo.sleep jobs), where their messages go.
SLEEP_QUEUE = type_queue_name("demo.sleep")

RELAY = {"publish_timeout_seconds": 1.0, "dispatch_batch_size": 50, "relay_window": 1_000_000}


def dispatcher(settings: Settings, log: Path):  # type: ignore[no-untyped-def]
    return running(["dispatcher"], service_env(settings), log)


async def all_published(store: Store) -> bool:
    return await count_unpublished(store) == 0


async def at_least_published(store: Store, n: int) -> bool:
    return await count_published(store) >= n


def assert_alive(process: Service) -> None:
    assert process.alive(), process.output()[-3000:]


async def test_broker_connections_closed_and_app_restarted_while_5000_rows_are_relayed(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    settings = make_settings(**RELAY)
    jobs = await insert_jobs(store, 2000)
    with dispatcher(settings, tmp_path / "dispatcher.log") as process:
        await eventually(lambda: at_least_published(store, 300), within=30, what="300 published")
        await asyncio.to_thread(close_all_broker_connections)
        jobs += await insert_jobs(store, 1500)
        await eventually(lambda: at_least_published(store, 2300), within=30, what="2300 published")

        await asyncio.to_thread(rabbitmqctl, "stop_app")
        try:
            jobs += await insert_jobs(store, 1500)
            await asyncio.sleep(1.0)
            assert await count_unpublished(store) >= 1500, "nothing can be published meanwhile"
            assert_alive(process)
        finally:
            await asyncio.to_thread(rabbitmqctl, "start_app")
        await eventually(lambda: all_published(store), within=60, what="every row published")
        assert_alive(process)
        output = process.output()
    assert "broker_unavailable" in output or "connection_lost" in output

    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    delivered = {m.correlation_id for m in messages}
    assert len(jobs) == 5000
    assert delivered == {str(job_id) for _, job_id in jobs}, "every job has a message"
    assert len(messages) >= 5000


async def test_a_dispatcher_killed_after_publish_before_published_at_commits_publishes_again(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    settings = make_settings(**RELAY)
    await insert_jobs(store, 1)
    with dispatcher(settings, tmp_path / "first.log") as first:
        await eventually(lambda: all_published(store), what="the dispatcher to be up")
        # Hold off every mark: the dispatcher publishes, gets the confirm and then waits
        # before published_at commits (a trigger of the test's own takes a lock it holds).
        async with store.transaction() as connection:
            for statement in HOLD_MARKS:
                await connection.execute(text(statement))
        async with store.transaction() as blocker:
            await blocker.execute(text(f"SELECT pg_advisory_xact_lock({MARK_LOCK})"))
            [(outbox_id, job_id)] = await insert_jobs(store, 1)
            await eventually(
                lambda: depth_is(settings.amqp_url, 2, SLEEP_QUEUE), what="the message confirmed"
            )
            await eventually(
                lambda: _marking_waits_on_lock(store), what="the dispatcher stuck marking"
            )
            first.kill()
            assert first.process.returncode == -signal.SIGKILL
            # Its statement runs in autocommit and would still complete once the lock goes;
            # ending the orphaned backend too makes the crash land before published_at commits.
            ended = await store.fetch_all(
                text(
                    "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
                    "WHERE datname = current_database() "
                    "AND application_name = 'jobrelay-dispatcher'"
                )
            )
            assert ended and all(row.ok for row in ended)
    row = await factories.outbox_row(store, outbox_id)
    assert row.published_at is None and row.publish_attempts == 1

    with dispatcher(settings, tmp_path / "second.log") as second:
        await eventually(lambda: all_published(store), within=20, what="the row published again")
        assert_alive(second)
    row = await factories.outbox_row(store, outbox_id)
    assert row.published_at is not None and row.publish_attempts == 2
    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    copies = [m for m in messages if m.message_id == str(outbox_id)]
    assert len(copies) == 2, "a duplicate message, nothing lost"
    assert {m.correlation_id for m in copies} == {str(job_id)}


# The test's stand-in for a mark that cannot commit: setting published_at waits for MARK_LOCK.
MARK_LOCK = 4242
HOLD_MARKS = (
    f"""
    CREATE FUNCTION jobrelay.test_hold_marks() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF NEW.published_at IS NOT NULL AND OLD.published_at IS NULL THEN
            PERFORM pg_advisory_xact_lock({MARK_LOCK});
        END IF;
        RETURN NEW;
    END $$
    """,
    "CREATE TRIGGER test_hold_marks BEFORE UPDATE ON jobrelay.outbox"
    " FOR EACH ROW EXECUTE FUNCTION jobrelay.test_hold_marks()",
)


async def _marking_waits_on_lock(store: Store) -> bool:
    row = await store.fetch_one(
        text(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
            "AND application_name = 'jobrelay-dispatcher' AND wait_event_type = 'Lock' "
            "AND query LIKE '%SET published_at = now()%'"
        )
    )
    return row is not None and row.n == 1


async def test_a_database_restart_while_relaying_is_waited_out(
    make_settings: MakeSettings, store: Store, tmp_path: Path, direct_database_url: str
) -> None:
    # Its LISTEN on the server itself (behind PgBouncer: on JOBRELAY_LISTEN_DATABASE_URL), so
    # that the restart is seen by the listener too.
    settings = make_settings(
        **(RELAY | {"dispatch_batch_size": 20, "listen_database_url": direct_database_url})
    )
    jobs = await insert_jobs(store, 5000)
    with dispatcher(settings, tmp_path / "dispatcher.log") as process:
        await eventually(lambda: at_least_published(store, 300), within=30, what="300 published")
        assert await count_unpublished(store) > 0, "the restart must land while relaying"
        await asyncio.to_thread(pg_restart)
        await eventually(lambda: all_published(store), within=60, what="every row published")
        assert_alive(process)
        jobs += await insert_jobs(store, 10)  # and it still wakes up for new rows
        await eventually(lambda: all_published(store), within=10, what="rows after the restart")
        assert_alive(process)
        output = process.output()
    assert "listener_lost" in output  # the restart was seen, and waited out
    messages = await drain(settings.amqp_url, SLEEP_QUEUE)
    assert {m.correlation_id for m in messages} == {str(job_id) for _, job_id in jobs}


async def test_sigterm_finishes_the_current_batch_and_exits_0(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    settings = make_settings(**RELAY)
    await insert_jobs(store, 500)
    with dispatcher(settings, tmp_path / "dispatcher.log") as process:
        await eventually(lambda: at_least_published(store, 1), what="relaying")
        code = await asyncio.to_thread(process.terminate, 20)
        output = process.output()
    assert code == 0, output[-3000:]
    assert "dispatcher stopped" in output
    # No row was left leased by the stopped dispatcher: whatever it leased, it recorded.
    leased = outbox.c.published_at.is_(None) & (outbox.c.publish_attempts > 0)
    assert await factories.count(store, outbox, leased) == 0


async def test_an_unreachable_broker_at_start_is_waited_for_with_the_password_masked(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    settings = make_settings(**RELAY, amqp_url="amqp://guest:s3cret-pw@127.0.0.1:1/")
    await insert_jobs(store, 3)
    with dispatcher(settings, tmp_path / "dispatcher.log") as process:
        await asyncio.sleep(2.5)
        assert_alive(process)
        output = process.output()
    assert "broker_unavailable" in output
    assert "s3cret-pw" not in output
    never_leased = await factories.count(store, outbox, outbox.c.publish_attempts == 0)
    assert never_leased == 3, "no row is leased while the broker is unreachable"
