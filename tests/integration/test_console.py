"""The operator console at /ui/, through HTTP against the app (real PostgreSQL and RabbitMQ):
sign-in and its refusals, the session cookie, CSRF, every page and every action, and the errors
as HTML pages. The browser's view of the same is tests/browser/."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr
from sqlalchemy import func, insert
from starlette.routing import BaseRoute

from jobrelay.api.app import create_app
from jobrelay.console import security
from jobrelay.console.jobs import PAGE_SIZE
from jobrelay.core.jobs import JobRequest
from jobrelay.core.settings import Settings
from jobrelay.core.states import JobState
from jobrelay.db import tables
from jobrelay.db.client_store import ClientStore
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth, make_client
from tests.support import factories
from tests.support.consumer_kit import rows
from tests.support.schedules import HEARTBEAT, registry as with_heartbeat

BASE = "http://jobrelay.test"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
JOB_LINK = re.compile(r'href="/ui/jobs/([0-9a-f-]{36})"')
HOSTILE = "<script>alert(1)</script><img src=x onerror=alert(2)>"


@asynccontextmanager
async def console_client(
    settings: Settings, store: Store, *, base: str = BASE, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A browser of the console: it keeps cookies and does not follow redirects."""
    app = create_app(settings, store=store, **options)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=base) as client:
        yield client


@pytest.fixture
async def console(make_settings: MakeSettings, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    async with console_client(make_settings(), store) as client:
        yield client


async def sign_in(client: httpx.AsyncClient, token: str, next: str = "/ui/") -> httpx.Response:
    return await client.post("/ui/signin", data={"token": token, "next": next})


async def signed_in(client: httpx.AsyncClient, token: str) -> str:
    """Signs in; the session's CSRF token, as its forms carry it."""
    assert (await sign_in(client, token)).status_code == 303
    return csrf_of(await client.get("/ui/clients"))


def csrf_of(page: httpx.Response) -> str:
    assert page.status_code == 200, page.text
    found = CSRF.search(page.text)
    assert found is not None, "the page has no form with a CSRF token"
    return found.group(1)


def assert_html_page(response: httpx.Response, status: int) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("text/html")
    if status >= 400:
        assert "Traceback" not in response.text and "File " not in response.text
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["cache-control"] == "no-store"


def assert_to_signin(response: httpx.Response, next: str | None = None) -> None:
    assert response.status_code == 303, response.text
    expected = "/ui/signin" + (f"?next={next}" if next else "")
    assert response.headers["location"] == expected


def flash_of(page: httpx.Response) -> str | None:
    found = re.search(r'<p class="flash flash-(ok|error)" role="status">([^<]*)</p>', page.text)
    return html.unescape(found.group(2)) if found else None


async def client_row(store: Store, name: str) -> Any:
    (row,) = await rows(store, "SELECT * FROM jobrelay.clients WHERE name = :name", name=name)
    return row


# --- sign-in, the session, sign-out ------------------------------------------------------------


async def test_an_admin_token_signs_in_and_goes_where_it_was_headed(
    console: httpx.AsyncClient, admin: str
) -> None:
    assert_to_signin(await console.get("/ui/jobs?state=queued"), "%2Fui%2Fjobs%3Fstate%3Dqueued")
    form = await console.get("/ui/signin", params={"next": "/ui/jobs?state=queued"})
    assert 'name="next" value="/ui/jobs?state=queued"' in form.text

    response = await sign_in(console, admin, "/ui/jobs?state=queued")

    assert response.status_code == 303
    assert response.headers["location"] == "/ui/jobs?state=queued"
    cookie = response.headers["set-cookie"]
    assert cookie.startswith("jobrelay_console=s1.")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert "Max-Age=28800" in cookie
    assert "Secure" not in cookie  # plain http: a Secure cookie would never come back
    assert admin not in cookie
    page = await console.get("/ui/jobs?state=queued")
    assert_html_page(page, 200)
    assert ">ops</span>" in page.text  # signed in as the admin client "ops"


async def test_over_https_the_session_cookie_is_secure(
    make_settings: MakeSettings, store: Store, admin: str
) -> None:
    async with console_client(make_settings(), store, base="https://jobrelay.test") as client:
        response = await sign_in(client, admin)
    assert response.status_code == 303
    assert "Secure" in response.headers["set-cookie"]


@pytest.mark.parametrize("who", ["client", "unknown", "disabled admin", "empty"])
async def test_anything_but_an_enabled_admin_token_is_refused_alike_and_gets_no_cookie(
    console: httpx.AsyncClient, store: Store, alice: str, who: str
) -> None:
    disabled = await make_client(store, "old-admin", admin=True)
    await ClientStore(store).set_client_disabled("old-admin", disabled=True)
    token = {"client": alice, "unknown": "jr_" + "x" * 40, "disabled admin": disabled, "empty": ""}

    refused = await sign_in(console, token[who])

    assert_html_page(refused, 403)
    assert "set-cookie" not in refused.headers
    assert "This token cannot sign in" in refused.text
    assert token[who] == "" or token[who] not in refused.text
    unknown = await sign_in(console, "jr_" + "y" * 40)
    assert unknown.text == refused.text  # nothing says which kind of refusal it was
    assert_to_signin(await console.get("/ui/"))


@pytest.mark.parametrize(
    "next", ["//evil.example/", "https://evil.example/ui/", "/v1/admin/stats", "/ui/../v1/jobs"]
)
async def test_a_sign_in_never_redirects_out_of_the_console(
    console: httpx.AsyncClient, admin: str, next: str
) -> None:
    response = await sign_in(console, admin, next)
    assert response.status_code == 303
    assert response.headers["location"] == "/ui/"


async def test_a_disabled_clients_session_ends_at_once(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    await signed_in(console, admin)
    assert (await console.get("/ui/")).status_code == 200

    await ClientStore(store).set_client_disabled("ops", disabled=True)
    ended = await console.get("/ui/")

    assert_to_signin(ended)
    assert 'jobrelay_console=""' in ended.headers["set-cookie"]  # the dead cookie goes
    await ClientStore(store).set_client_disabled("ops", disabled=False)


async def test_a_forged_or_expired_cookie_opens_nothing(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    await signed_in(console, admin)
    value = console.cookies["jobrelay_console"]
    ops = await client_row(store, "ops")
    key = (await rows(store, "SELECT secret FROM jobrelay.console_keys"))[0].secret
    expired = security.sign_session(bytes(key), security.Session(ops.id, 1_000, "nonce"))
    another_key = security.sign_session(b"z" * 32, security.Session(ops.id, 2**40, "nonce"))
    altered = value.replace(".s1.", ".s1.", 1)[:-3] + "abc"

    for forged in (expired, another_key, altered):
        console.cookies.set("jobrelay_console", forged, domain="jobrelay.test", path="/ui")
        assert_to_signin(await console.get("/ui/"))


async def test_signing_out_clears_the_cookie_and_ends_the_session(
    console: httpx.AsyncClient, admin: str
) -> None:
    csrf = await signed_in(console, admin)
    response = await console.post("/ui/signout", data={"csrf": csrf})

    assert response.status_code == 303 and response.headers["location"] == "/ui/signin"
    assert 'jobrelay_console=""' in response.headers["set-cookie"]
    assert_to_signin(await console.get("/ui/"))
    assert flash_of(await console.get("/ui/signin")) == "Signed out."


async def test_the_key_is_read_once_per_process_and_a_set_secret_replaces_it(
    make_settings: MakeSettings, store: Store, admin: str
) -> None:
    async with console_client(make_settings(), store) as first:
        await signed_in(first, admin)
        cookie = first.cookies["jobrelay_console"]
        await rows(
            store,
            "UPDATE jobrelay.console_keys SET secret = decode(repeat('ab', 32), 'hex') RETURNING "
            "id",
        )
        # This process read the key already: its sessions hold.
        assert (await first.get("/ui/")).status_code == 200
    async with console_client(make_settings(), store) as restarted:
        restarted.cookies.set("jobrelay_console", cookie, domain="jobrelay.test", path="/ui")
        assert_to_signin(await restarted.get("/ui/"))
    secret = "s" * 40
    settings = make_settings(console_secret=SecretStr(secret))
    async with console_client(settings, store) as configured:
        configured.cookies.set("jobrelay_console", cookie, domain="jobrelay.test", path="/ui")
        assert_to_signin(await configured.get("/ui/"))
        await signed_in(configured, admin)
        ops = await client_row(store, "ops")
        mine = security.read_session(secret.encode(), configured.cookies["jobrelay_console"], now=0)
        assert mine is not None and mine.client_id == ops.id


# --- every route refuses a caller without a session ---------------------------------------------


def every_route(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """The app's routes, those of included routers too (FastAPI may keep them nested)."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from every_route(included.routes)
        else:
            yield route


def console_routes(settings: Settings) -> list[tuple[str, str]]:
    app = create_app(settings)
    found = []
    for route in every_route(app.routes):
        path = getattr(route, "path", "")
        for method in sorted(getattr(route, "methods", None) or ()):
            if path.startswith("/ui") and path != "/ui/signin":
                found.append((method, path))
    return found


async def test_every_console_route_sends_a_caller_without_a_session_to_sign_in_changing_nothing(
    console: httpx.AsyncClient, settings: Settings, store: Store, alice: str
) -> None:
    quarantined = await factories.job(store, state=JobState.QUARANTINED)
    queued = await factories.job(store, state=JobState.QUEUED)
    routes = console_routes(settings)
    assert ("POST", "/ui/clients/disable") in routes and ("GET", "/ui/jobs/{job_id}") in routes
    form = {"name": "alice", "job_id": str(quarantined.id), "code": "permanent_error"}
    clients_before = len(await ClientStore(store).list_clients())

    for method, path in routes:
        concrete = path.replace("{job_id}", str(queued.id)).replace("{rest:path}", "anything")
        response = await console.request(method, concrete, data=form if method == "POST" else None)
        assert response.status_code == 303, (method, path)
        assert response.headers["location"].startswith("/ui/signin"), (method, path)

    assert (await client_row(store, "alice")).disabled_at is None
    assert (await factories.job_row(store, quarantined.id)).state == "quarantined"
    assert (await factories.job_row(store, queued.id)).state == "queued"
    assert len(await ClientStore(store).list_clients()) == clients_before  # none created


def test_the_console_is_not_in_the_api_document(settings: Settings) -> None:
    paths = create_app(settings).openapi()["paths"]
    assert paths and not [path for path in paths if path.startswith("/ui")]


async def test_the_assets_are_served_by_the_api_itself(console: httpx.AsyncClient) -> None:
    css = await console.get("/ui/static/console.css")
    script = await console.get("/ui/static/console.js")
    assert css.status_code == script.status_code == 200
    assert css.headers["content-type"].startswith("text/css")
    for asset in (css.text, script.text):
        assert "http://" not in asset and "https://" not in asset  # nothing from elsewhere
    assert_html_page(await console.get("/ui/static/missing.css"), 404)


# --- CSRF ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("sent", [None, "", "wrong", "another-session"])
async def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(
    console: httpx.AsyncClient,
    make_settings: MakeSettings,
    store: Store,
    admin: str,
    alice: str,
    sent: str | None,
) -> None:
    csrf = await signed_in(console, admin)
    if sent == "another-session":
        async with console_client(make_settings(), store) as other:
            sent = await signed_in(other, admin)
        assert sent != csrf
    form = {"name": "alice"} | ({"csrf": sent} if sent is not None else {})

    refused = await console.post("/ui/clients/disable", data=form)

    assert_html_page(refused, 403)
    assert "nothing was changed" in refused.text
    assert (await client_row(store, "alice")).disabled_at is None
    accepted = await console.post("/ui/clients/disable", data={"name": "alice", "csrf": csrf})
    assert accepted.status_code == 303
    assert (await client_row(store, "alice")).disabled_at is not None


# --- clients ------------------------------------------------------------------------------------


async def test_a_created_clients_token_is_shown_once_and_works(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    csrf = await signed_in(console, admin)
    created = await console.post("/ui/clients", data={"name": "shop <b>", "csrf": csrf})

    assert_html_page(created, 200)
    token = re.search(r'<pre class="token" id="token">(jr_[^<]+)</pre>', created.text)
    assert token is not None
    assert "shop &lt;b&gt;" in created.text and "shop <b>" not in created.text
    assert (await console.get("/v1/jobs", headers=auth(token.group(1)))).status_code == 200
    listing = await console.get("/ui/clients")
    assert "shop &lt;b&gt;" in listing.text and token.group(1) not in listing.text
    assert not (await client_row(store, "shop <b>")).is_admin

    again = await console.post("/ui/clients", data={"name": "shop <b>", "csrf": csrf})
    assert_html_page(again, 409)
    assert "already exists" in again.text
    blank = await console.post("/ui/clients", data={"name": "  ", "csrf": csrf})
    assert_html_page(blank, 400)


async def test_the_clients_page_shows_the_types_each_client_may_submit(
    console: httpx.AsyncClient, store: Store, admin: str, alice: str
) -> None:
    await ClientStore(store).set_client_type_patterns("alice", ["shop.*", "mail.send"])
    await make_client(store, "plain")
    await signed_in(console, admin)

    listing = await console.get("/ui/clients")

    assert_html_page(listing, 200)
    rows_of = {
        name: row
        for row in listing.text.split("<tr>")[2:]
        if (name := re.search(r"<td>([^<]+)", row).group(1).strip())  # type: ignore[union-attr]
    }
    assert "shop.*, mail.send" in rows_of["alice"]
    assert "every type but Django tasks and" in rows_of["plain"]
    assert "every type</td>" in rows_of["ops"]

    csrf = await signed_in(console, admin)
    bad = await console.post(
        "/ui/clients", data={"name": "shop", "types": "shop.[ab]", "csrf": csrf}
    )
    assert_html_page(bad, 400)
    assert "Types: type pattern" in html.unescape(bad.text)
    created = await console.post(
        "/ui/clients", data={"name": "shop", "types": "shop.*, mail.send", "csrf": csrf}
    )
    assert_html_page(created, 200)
    assert (await client_row(store, "shop")).type_patterns == ["shop.*", "mail.send"]


async def test_an_admin_client_made_in_the_console_can_sign_in(
    console: httpx.AsyncClient, make_settings: MakeSettings, store: Store, admin: str
) -> None:
    csrf = await signed_in(console, admin)
    created = await console.post(
        "/ui/clients", data={"name": "second-op", "admin": "true", "csrf": csrf}
    )
    token = re.search(r'id="token">(jr_[^<]+)<', created.text)
    assert token is not None
    async with console_client(make_settings(), store) as other:
        assert (await sign_in(other, token.group(1))).status_code == 303


async def test_rotating_a_token_shows_the_new_one_and_the_old_one_stops(
    console: httpx.AsyncClient, admin: str, alice: str
) -> None:
    csrf = await signed_in(console, admin)
    rotated = await console.post("/ui/clients/rotate", data={"name": "alice", "csrf": csrf})

    token = re.search(r'id="token">(jr_[^<]+)<', rotated.text)
    assert token is not None and token.group(1) != alice
    assert "The previous token is refused from now on" in rotated.text
    assert (await console.get("/v1/jobs", headers=auth(alice))).status_code == 401
    assert (await console.get("/v1/jobs", headers=auth(token.group(1)))).status_code == 200

    graced = await console.post(
        "/ui/clients/rotate", data={"name": "alice", "grace": "1h", "csrf": csrf}
    )
    assert "keeps working until" in graced.text
    assert (await console.get("/v1/jobs", headers=auth(token.group(1)))).status_code == 200

    bad = await console.post(
        "/ui/clients/rotate", data={"name": "alice", "grace": "forever", "csrf": csrf}
    )
    assert bad.status_code == 303
    assert "Not rotated" in (flash_of(await console.get("/ui/clients")) or "")


async def test_a_client_is_disabled_and_enabled_with_the_outcome_shown_once(
    console: httpx.AsyncClient, store: Store, admin: str, alice: str
) -> None:
    csrf = await signed_in(console, admin)
    await console.post("/ui/clients/disable", data={"name": "alice", "csrf": csrf})

    first = await console.get("/ui/clients")
    assert flash_of(first) == "Client 'alice' disabled: its token is refused from now on."
    assert flash_of(await console.get("/ui/clients")) is None  # shown once
    assert (await console.get("/v1/jobs", headers=auth(alice))).status_code == 401

    await console.post("/ui/clients/enable", data={"name": "alice", "csrf": csrf})
    assert (await client_row(store, "alice")).disabled_at is None
    await console.post("/ui/clients/enable", data={"name": "nobody", "csrf": csrf})
    assert flash_of(await console.get("/ui/clients")) == "There is no client named 'nobody'."


# --- jobs ---------------------------------------------------------------------------------------


async def test_the_job_list_pages_through_every_clients_jobs_both_ways(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    first = await factories.client(store, name="first")
    second = await factories.client(store, name="second")
    made = []
    for minutes in range(PAGE_SIZE + 25):  # two clients' jobs, interleaved in time
        owner = first if minutes % 2 else second
        created = func.now() - timedelta(minutes=minutes)
        made.append((await factories.job(store, client_id=owner.id, created_at=created)).id)
    await signed_in(console, admin)

    page_one = await console.get("/ui/jobs")
    ids_one = JOB_LINK.findall(page_one.text)
    page_two = await console.get(html.unescape(next_link(page_one, "next")))
    ids_two = JOB_LINK.findall(page_two.text)
    back = await console.get(html.unescape(next_link(page_two, "prev")))

    assert ids_one + ids_two == [str(job_id) for job_id in made]  # newest first, each once
    assert 'rel="next"' not in page_two.text
    assert JOB_LINK.findall(back.text) == ids_one
    only_first = await console.get("/ui/jobs", params={"client": "first"})
    listed = JOB_LINK.findall(only_first.text)
    assert listed == [str(job_id) for job_id in made if str(job_id) in listed]
    assert len(listed) == (PAGE_SIZE + 25) // 2


def next_link(page: httpx.Response, rel: str) -> str:
    found = re.search(rf'<a href="([^"]+)" rel="{rel}">', page.text)
    assert found is not None, f"no {rel} link"
    return found.group(1)


async def test_the_job_list_filters_by_state_type_and_client(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    owner = await factories.client(store, name="shop")
    failed = await factories.job(store, client_id=owner.id, state=JobState.QUARANTINED)
    export = await factories.job(store, client_id=owner.id, job_type="catalog.export")
    await signed_in(console, admin)

    quarantined = await console.get("/ui/jobs", params={"state": "quarantined"})
    exports = await console.get("/ui/jobs", params={"type": "catalog.export", "client": "shop"})
    nobody = await console.get("/ui/jobs", params={"client": "nobody"})
    bogus = await console.get("/ui/jobs", params={"state": "bogus"})
    garbage = await console.get("/ui/jobs", params={"cursor": "not-a-cursor"})

    assert JOB_LINK.findall(quarantined.text) == [str(failed.id)]
    assert JOB_LINK.findall(exports.text) == [str(export.id)]
    assert JOB_LINK.findall(nobody.text) == [] and "There is no client named nobody" in nobody.text
    assert_html_page(bogus, 400)
    assert_html_page(garbage, 400)


async def test_find_by_id_opens_the_job_or_says_why_not(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    job = await factories.job(store)
    await signed_in(console, admin)

    found = await console.get("/ui/jobs/find", params={"id": f" {job.id} "})
    unknown = await console.get("/ui/jobs/find", params={"id": str(uuid.uuid4())})
    malformed = await console.get("/ui/jobs/find", params={"id": "<b>nope</b>"})

    assert found.status_code == 303 and found.headers["location"] == f"/ui/jobs/{job.id}"
    assert_html_page(unknown, 404)
    assert "There is no job" in unknown.text
    assert_html_page(malformed, 400)
    assert "&#39;&lt;b&gt;nope&lt;/b&gt;&#39; is not a job id" in malformed.text
    assert_html_page(await console.get("/ui/jobs/not-a-uuid"), 404)
    assert_html_page(await console.get(f"/ui/jobs/{uuid.uuid4()}"), 404)


async def test_a_jobs_page_shows_its_data_as_text_with_its_trace_and_traceback(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    job = await factories.job(
        store,
        state=JobState.QUARANTINED,
        payload={"note": HOSTILE},
        last_error_code="unexpected_error",
        last_error=HOSTILE,
    )
    await factories.job_events(store, [job.id], "received", attempt=0)
    failure = {"class": "RuntimeError", "message": HOSTILE, "traceback": "Traceback: " + HOSTILE}
    await factories.job_events(
        store, [job.id], "quarantined", attempt=1, detail="unexpected_error", error=failure
    )
    await signed_in(console, admin)

    page = await console.get(f"/ui/jobs/{job.id}")

    assert_html_page(page, 200)
    assert "<script>" not in page.text and "<img src=x" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "Traceback: &lt;script&gt;" in page.text  # the operators' view has it
    assert page.text.count('class="mark mark-') == 2  # received, quarantined on the line
    assert "+0.000 s" in page.text
    assert 'action="/ui/quarantine/replay"' in page.text  # quarantined: replayable
    # Quarantined: also cancellable (issue 41: a cancel unblocks its sequence).
    assert f'action="/ui/jobs/{job.id}/cancel"' in page.text


# Item 17 of issue 24: the "why" line of a running job showed its lease as raw ISO text
# (2024-06-01T12:00:00.123456+00:00) beside the page's other times (2024-06-01 12:00:00.123 UTC).
async def test_a_running_or_retrying_jobs_page_writes_its_times_like_the_rest_of_the_page(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    lease = datetime(2030, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)
    running = await factories.job(store, state=JobState.RUNNING, attempts=1, lease_until=lease)
    retrying = await factories.job(
        store, state=JobState.RETRYING, available_at=lease, last_error_code="transient_error"
    )
    await signed_in(console, admin)

    running_page = await console.get(f"/ui/jobs/{running.id}")
    retrying_page = await console.get(f"/ui/jobs/{retrying.id}")

    assert_html_page(running_page, 200)
    assert (
        '<p class="why">not stopped: running attempt 1, lease until 2030-06-01 12:00:00.123 UTC</p>'
        in running_page.text
    )
    assert "next attempt due 2030-06-01 12:00:00.123 UTC</p>" in retrying_page.text
    for page in (running_page, retrying_page):
        assert "2030-06-01T12" not in page.text and "+00:00" not in page.text


async def test_a_queued_job_is_cancelled_from_its_page(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    job = await factories.job(store)
    csrf = await signed_in(console, admin)
    page = await console.get(f"/ui/jobs/{job.id}")
    assert f'action="/ui/jobs/{job.id}/cancel"' in page.text

    response = await console.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf})
    again = await console.post(f"/ui/jobs/{job.id}/cancel", data={"csrf": csrf})

    assert response.status_code == 303 and response.headers["location"] == f"/ui/jobs/{job.id}"
    assert (await factories.job_row(store, job.id)).state == "cancelled"
    assert flash_of(await console.get(f"/ui/jobs/{job.id}")) == (
        "Not cancelled: the job is cancelled."
    )
    assert again.status_code == 303


# --- quarantine ---------------------------------------------------------------------------------


async def quarantined_job(store: Store, code: str = "permanent_error") -> uuid.UUID:
    client = await factories.client(store)
    accepted = await store.accept_job(
        client.id, JobRequest(uuid.uuid4().hex, "demo.fail", {"mode": "permanent"}, 1)
    )
    await factories.set_job(
        store, accepted.job.id, state=JobState.QUARANTINED, last_error_code=code
    )
    return accepted.job.id


async def test_the_quarantine_groups_by_reason_and_replays_one_and_a_reason(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    one = await quarantined_job(store)
    two = await quarantined_job(store)
    other = await quarantined_job(store, "attempts_exhausted")
    csrf = await signed_in(console, admin)

    page = await console.get("/ui/quarantine")
    assert_html_page(page, 200)
    assert page.text.index("<code>permanent_error</code>") < page.text.index(
        "<code>attempts_exhausted</code>"
    )  # the largest reason first
    assert {str(one), str(two), str(other)} <= set(JOB_LINK.findall(page.text))

    replayed = await console.post(
        "/ui/quarantine/replay", data={"job_id": str(other), "csrf": csrf}
    )
    assert replayed.status_code == 303 and replayed.headers["location"] == "/ui/quarantine"
    assert (await factories.job_row(store, other)).state == "queued"
    assert flash_of(await console.get("/ui/quarantine")) == (
        f"Replayed job {other}: queued again with a fresh attempt budget; its message left "
        "the quarantine queue."
    )

    await console.post(
        "/ui/quarantine/replay-reason", data={"code": "permanent_error", "csrf": csrf}
    )
    assert {(await factories.job_row(store, job)).state for job in (one, two)} == {"queued"}
    assert flash_of(await console.get("/ui/quarantine")) == (
        "Replayed 2 of 2 job(s) quarantined for permanent_error: queued again with a fresh "
        "attempt budget."
    )

    again = await console.post(
        "/ui/quarantine/replay",
        data={"job_id": str(other), "csrf": csrf, "back": f"/ui/jobs/{other}"},
    )
    assert again.headers["location"] == f"/ui/jobs/{other}"
    assert "is queued, not quarantined" in (flash_of(await console.get(f"/ui/jobs/{other}")) or "")


async def test_a_purge_asks_first_then_reports_what_it_deleted(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    job = await quarantined_job(store)
    csrf = await signed_in(console, admin)

    confirm = await console.get("/ui/quarantine/purge")
    assert_html_page(confirm, 200)
    assert 'action="/ui/quarantine/purge"' in confirm.text and "csrf" in confirm.text
    purged = await console.post("/ui/quarantine/purge", data={"csrf": csrf})

    assert purged.status_code == 303
    assert flash_of(await console.get("/ui/quarantine")) == (
        "Purged 0 message(s) from jobrelay.quarantine; the jobs stay quarantined and can "
        "still be replayed."
    )
    assert (await factories.job_row(store, job)).state == "quarantined"


BANNER = "Broker unreachable: replay is unavailable."
NOT_REPLAYED = "Not replayed: the broker is unreachable, so replay is unavailable. Nothing changed."


def disabled_buttons(page: httpx.Response) -> list[str]:
    return re.findall(r"<button [^>]*disabled[^>]*>([^<]*)</button>", page.text)


# Item 17 of issue 24: the overview said nothing without the broker and every replay button
# stayed active (a click was a 503 page).
async def test_without_the_broker_the_pages_say_so_and_replay_and_purge_are_disabled(
    settings: Settings, store: Store, admin: str
) -> None:
    job = await quarantined_job(store)  # settings: a broker URL nothing answers (a closed port)
    async with console_client(settings, store) as console:
        await signed_in(console, admin)
        overview = await console.get("/ui/")
        live = await console.get("/ui/overview/live")
        listing = await console.get("/ui/quarantine")
        job_page = await console.get(f"/ui/jobs/{job}")
        confirm = await console.get("/ui/quarantine/purge")

    for page in (overview, live, listing, job_page, confirm):
        assert page.status_code == 200, page.text
        assert BANNER in page.text
    assert_html_page(overview, 200)
    assert disabled_buttons(listing) == ["Replay all 1", "Replay"]
    assert 'href="/ui/quarantine/purge"' not in listing.text  # the purge link is inert
    assert disabled_buttons(job_page) == ["Replay"]
    assert disabled_buttons(confirm) == ["Purge the messages"]


async def test_without_the_broker_a_replay_or_purge_is_refused_with_a_message_changing_nothing(
    settings: Settings, store: Store, admin: str
) -> None:
    job = await quarantined_job(store)
    async with console_client(settings, store) as console:
        csrf = await signed_in(console, admin)
        back = f"/ui/jobs/{job}"
        one = await console.post(
            "/ui/quarantine/replay", data={"job_id": str(job), "csrf": csrf, "back": back}
        )
        one_flash = flash_of(await console.get(back))
        reason = await console.post(
            "/ui/quarantine/replay-reason", data={"code": "permanent_error", "csrf": csrf}
        )
        reason_flash = flash_of(await console.get("/ui/quarantine"))
        purged = await console.post("/ui/quarantine/purge", data={"csrf": csrf})
        purge_flash = flash_of(await console.get("/ui/quarantine"))

    assert (one.status_code, one.headers["location"]) == (303, back)
    assert one_flash == NOT_REPLAYED
    assert (reason.status_code, reason.headers["location"]) == (303, "/ui/quarantine")
    assert reason_flash == NOT_REPLAYED
    assert purged.status_code == 303
    assert purge_flash == (
        "Not purged: the broker is unreachable, so purge is unavailable. Nothing changed."
    )
    assert (await factories.job_row(store, job)).state == "quarantined"


async def test_with_the_broker_the_pages_show_no_banner_and_no_disabled_button(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    job = await quarantined_job(store)
    await signed_in(console, admin)
    for path in ("/ui/", "/ui/quarantine", f"/ui/jobs/{job}", "/ui/quarantine/purge"):
        page = await console.get(path)
        assert_html_page(page, 200)
        assert BANNER not in page.text and disabled_buttons(page) == [], path


# --- overview, schedules, errors ----------------------------------------------------------------


async def test_the_overview_counts_jobs_and_charts_the_last_hours_finishes(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    await factories.jobs(store, 3, state=JobState.SUCCEEDED)
    await factories.jobs(store, 2, state=JobState.QUEUED)
    await factories.jobs(store, 1, state=JobState.QUARANTINED)
    await factories.jobs(
        store, 4, state=JobState.SUCCEEDED, finished_at=func.now() - timedelta(minutes=90)
    )
    await signed_in(console, admin)

    page = await console.get("/ui/")
    live = await console.get("/ui/overview/live")

    assert_html_page(page, 200)
    assert "3 succeeded and 1 quarantined in the last hour" in page.text
    assert re.search(
        r"state-succeeded\">succeeded</span></span>\s*<span class=\"card-value\">7<", page.text
    )
    assert re.search(
        r"state-queued\">queued</span></span>\s*<span class=\"card-value\">2<", page.text
    )
    assert page.text.count('class="minute"') == 60
    assert live.headers["x-console-fragment"] == "overview"
    assert "<html" not in live.text and "3 succeeded and 1 quarantined" in live.text


async def test_finished_jobs_are_counted_in_their_minute_for_an_hour(store: Store) -> None:
    await factories.jobs(
        store, 2, state=JobState.SUCCEEDED, finished_at=func.now() - timedelta(minutes=5)
    )
    await factories.jobs(store, 1, state=JobState.QUARANTINED)
    await factories.jobs(
        store, 5, state=JobState.SUCCEEDED, finished_at=func.now() - timedelta(minutes=61)
    )
    await factories.jobs(store, 1, state=JobState.CANCELLED)
    finished = await rows(
        store,
        "SELECT date_trunc('minute', finished_at) AS minute, state FROM jobrelay.jobs "
        "WHERE finished_at > now() - interval '59 minutes'",
    )

    minutes = await store.finished_per_minute()

    assert len(minutes) == 60
    assert [m.minute for m in minutes] == sorted(m.minute for m in minutes)
    counted = {
        m.minute: (m.succeeded, m.quarantined) for m in minutes if m.succeeded or m.quarantined
    }
    expected: dict[Any, list[int]] = {}
    for row in finished:
        if row.state in ("succeeded", "quarantined"):
            counts = expected.setdefault(row.minute, [0, 0])
            counts[row.state == "quarantined"] += 1
    assert counted == {minute: tuple(counts) for minute, counts in expected.items()}
    assert sum(m.succeeded for m in minutes) == 2 and sum(m.quarantined for m in minutes) == 1


async def test_the_schedules_page_shows_each_schedule_and_its_ticks(
    make_settings: MakeSettings, store: Store, admin: str
) -> None:
    async with console_client(make_settings(), store, registry=with_heartbeat) as console:
        await signed_in(console, admin)
        page = await console.get("/ui/schedules")

    assert_html_page(page, 200)
    assert f"<td>{HEARTBEAT}</td>" in page.text
    assert "every 1.0 s" in page.text or "every 1 s" in page.text
    assert "not made" in page.text  # no dispatcher ran: the latest tick has no job


async def test_an_unknown_page_and_a_bad_request_are_html_pages(
    console: httpx.AsyncClient, admin: str
) -> None:
    await signed_in(console, admin)
    assert_html_page(await console.get("/ui/nowhere"), 404)
    assert_html_page(await console.put("/ui/jobs"), 404)  # a method no console page takes
    assert_html_page(await console.post("/ui/jobs/not-a-uuid/cancel", data={}), 403)
    csrf = csrf_of(await console.get("/ui/clients"))
    invalid = await console.post("/ui/quarantine/replay", data={"job_id": "x", "csrf": csrf})
    assert_html_page(invalid, 400)


async def test_an_unreachable_database_is_an_html_page(
    make_settings: MakeSettings, database_url: str
) -> None:
    secret = "q" * 40
    settings = make_settings(console_secret=SecretStr(secret))
    dead = Store.connect("postgresql+psycopg://jobrelay:jobrelay@127.0.0.1:1/nowhere")
    session = security.Session(uuid.uuid4(), 2**40, "nonce")
    try:
        async with console_client(settings, dead) as console:
            console.cookies.set(
                "jobrelay_console",
                security.sign_session(secret.encode(), session),
                domain="jobrelay.test",
                path="/ui",
            )
            page = await console.get("/ui/")
    finally:
        await dead.close()
    assert_html_page(page, 503)
    assert "The database is unavailable" in page.text
    assert "nowhere" not in page.text and "127.0.0.1" not in page.text


async def test_a_sleeping_jobs_page_shows_its_wait_its_steps_folded_and_its_signals(
    console: httpx.AsyncClient, store: Store, admin: str
) -> None:
    child = await factories.job(store)
    job = await factories.job(
        store, state=JobState.SLEEPING, attempts=1, waiting_on={"child": str(child.id)}
    )
    async with store.transaction() as connection:
        await connection.execute(
            insert(tables.job_steps).values(
                job_id=job.id, name="charge", kind="step", attempt=1, value={"note": HOSTILE}
            )
        )
        await connection.execute(
            insert(tables.job_steps).values(
                job_id=job.id,
                name="child:catalog.export",
                kind="child",
                attempt=1,
                status="waiting",
                child_id=child.id,
            )
        )
        await connection.execute(
            insert(tables.job_signals).values(job_id=job.id, name="approved", value=HOSTILE)
        )
    await signed_in(console, admin)

    page = await console.get(f"/ui/jobs/{job.id}")

    assert_html_page(page, 200)
    assert "<script>" not in page.text and "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert f"waiting for child job {child.id}" in page.text  # the why line
    assert f'<a class="mono" href="/ui/jobs/{child.id}">' in page.text
    assert "<details><summary>value</summary>" in page.text  # folded
    assert "<code>charge</code>" in page.text and "<code>approved</code>" in page.text
    assert "not taken yet" in page.text
