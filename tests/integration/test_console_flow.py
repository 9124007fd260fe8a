"""The console's queues and limits pages (issue 25, items 4 and 5), through HTTP against the
app on real PostgreSQL and RabbitMQ: the figures, the pause and resume buttons, a runtime limit
set and cleared, the refusals as flash messages, and CSRF on every form."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import MakeSettings
from tests.integration.test_console import (
    assert_html_page,
    console_client,
    flash_of,
    signed_in,
)
from tests.integration.test_flow_admin import payments
from tests.support import factories
from tests.support.consumer_kit import rows


@pytest.fixture
async def console(make_settings: MakeSettings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(make_settings(), store, registry=payments()) as client:
        yield client


async def paused_at(store: Store, name: str = "default") -> Any:
    (row,) = await rows(
        store, "SELECT paused_at FROM jobrelay.queues WHERE name = :name", name=name
    )
    return row.paused_at


async def test_the_queues_page_shows_the_figures_and_the_pause_button_pauses_and_resumes(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    await factories.jobs(store, 3, job_type="catalog.export", with_outbox=True)
    csrf = await signed_in(console, admin)
    page = await console.get("/ui/queues")
    assert_html_page(page, 200)
    assert 'href="/ui/queues" aria-current="page"' in page.text
    assert '<td class="num">3</td>' in page.text  # the backlog
    assert 'action="/ui/queues/pause"' in page.text and "Broker unreachable" not in page.text

    paused = await console.post("/ui/queues/pause", data={"name": "default", "csrf": csrf})
    assert paused.status_code == 303 and paused.headers["location"] == "/ui/queues"
    assert await paused_at(store) is not None
    after = await console.get("/ui/queues")
    assert flash_of(after) == (
        "Queue 'default' paused: none of its jobs is claimed or published until it is resumed."
    )
    assert "by ops" in after.text and 'action="/ui/queues/resume"' in after.text

    resumed = await console.post("/ui/queues/resume", data={"name": "default", "csrf": csrf})
    assert resumed.status_code == 303
    assert await paused_at(store) is None
    assert flash_of(await console.get("/ui/queues")) == "Queue 'default' resumed."


async def test_an_unknown_queue_is_a_flash_message(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    csrf = await signed_in(console, admin)
    answer = await console.post("/ui/queues/pause", data={"name": "nosuch", "csrf": csrf})
    assert answer.status_code == 303
    assert flash_of(await console.get("/ui/queues")) == "There is no queue named 'nosuch'."


@pytest.mark.parametrize("sent", [None, "wrong"])
@pytest.mark.parametrize(
    ("path", "form"),
    [
        ("/ui/queues/pause", {"name": "default"}),
        ("/ui/limits", {"job_type": "mail.send", "concurrency": "1"}),
    ],
)
async def test_a_pause_or_a_limit_without_its_csrf_token_is_refused_and_changes_nothing(
    console: httpx.AsyncClient,
    store: Store,
    admin: str,
    sent: str | None,
    path: str,
    form: dict[str, str],
) -> None:
    await signed_in(console, admin)
    refused = await console.post(path, data=form | ({"csrf": sent} if sent else {}))
    assert_html_page(refused, 403)
    assert await paused_at(store) is None
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []


async def test_without_the_broker_the_queues_page_says_so_and_a_pause_still_works(
    settings: Settings, store: Store, admin: str
) -> None:
    async with console_client(settings, store) as console:  # the broker of port 1: nothing
        csrf = await signed_in(console, admin)
        page = await console.get("/ui/queues")
        assert_html_page(page, 200)
        assert "Broker unreachable:" in page.text and "—" in page.text
        paused = await console.post("/ui/queues/pause", data={"name": "default", "csrf": csrf})
    assert paused.status_code == 303
    assert await paused_at(store) is not None


async def test_the_limits_page_lists_the_limits_in_force_and_sets_and_clears_one(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    csrf = await signed_in(console, admin)
    page = await console.get("/ui/limits")
    assert_html_page(page, 200)
    assert "<code>pay.charge</code>" in page.text and "10/s" in page.text
    assert '<option value="mail.send">' in page.text

    form = {"job_type": "mail.send", "concurrency": "2", "rate": "600/m", "per_key": "true"}
    set_answer = await console.post("/ui/limits", data=form | {"csrf": csrf})
    assert set_answer.status_code == 303
    (row,) = await rows(store, "SELECT * FROM jobrelay.type_limits")
    assert (row.type, row.concurrency, row.rate_count, row.rate_period_seconds, row.per_key) == (
        "mail.send",
        2,
        600,
        60,
        True,
    )
    after = await console.get("/ui/limits")
    assert flash_of(after) == (
        "Set: mail.send  concurrency=2 rate=600/m per key  (runtime), in force within seconds "
        "on every consumer."
    )
    assert 'action="/ui/limits/clear"' in after.text

    cleared = await console.post("/ui/limits/clear", data={"job_type": "mail.send", "csrf": csrf})
    assert cleared.status_code == 303
    assert await rows(store, "SELECT * FROM jobrelay.type_limits") == []
    assert flash_of(await console.get("/ui/limits")) == "Cleared: mail.send  no limit  (code)."


async def test_the_limits_page_sets_a_throttle_alone_keeping_the_codes_limit_and_shows_it(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    csrf = await signed_in(console, admin)
    form = {"job_type": "pay.charge", "throttle": "5/m"}

    answer = await console.post("/ui/limits", data=form | {"csrf": csrf})

    assert answer.status_code == 303
    (row,) = await rows(store, "SELECT * FROM jobrelay.type_limits")
    assert (row.concurrency, row.rate_count, row.throttle_count, row.throttle_period_seconds) == (
        2,
        10,
        5,
        60,
    )
    page = await console.get("/ui/limits")
    assert flash_of(page) == (
        "Set: pay.charge  concurrency=2 rate=10/s throttle=5/m  (runtime), in force within "
        "seconds on every consumer, the throttle at once on every API process."
    )
    assert "<td>5/m</td>" in page.text


@pytest.mark.parametrize(
    ("form", "says"),
    [
        ({"job_type": "mail.send", "rate": "fast"}, "Not set: invalid rate 'fast'"),
        ({"job_type": "mail.send", "concurrency": "0"}, "Not set: a concurrency limit is from 1"),
        ({"job_type": "mail.send", "concurrency": "two"}, "Not set: the concurrency 'two' is not"),
        ({"job_type": "mail.send"}, "Not set: give a concurrency, a rate and/or a throttle"),
        ({"job_type": "no.such", "concurrency": "1"}, "Not set: 'no.such' is neither a job type"),
    ],
)
async def test_a_limit_that_is_not_one_is_a_flash_message_and_stores_nothing(
    console: httpx.AsyncClient, store: Store, admin: str, form: dict[str, str], says: str
) -> None:
    csrf = await signed_in(console, admin)
    answer = await console.post("/ui/limits", data=form | {"csrf": csrf})
    assert answer.status_code == 303
    flash = flash_of(await console.get("/ui/limits"))
    assert flash is not None and html.unescape(flash).startswith(says), flash
    assert await rows(store, "SELECT type FROM jobrelay.type_limits") == []
