"""The console as an operator uses it, in headless Chromium against a running system: sign in,
find a job and read its timeline, replay a quarantined job to success, and what the browser
must never do (run a payload's markup, accept a form from elsewhere, sign in a client, expose
the session cookie to scripts). Each page is saved as a screenshot (JOBRELAY_SCREENSHOTS_DIR)."""

from __future__ import annotations

import re
import uuid

from playwright.async_api import Browser, BrowserContext, Dialog, Page, expect

from jobrelay.core.states import JobState
from jobrelay.db.store import Store
from tests.browser.conftest import Deployment, screenshot
from tests.browser.seeding import HOSTILE_CLIENT, HOSTILE_KEY, HOSTILE_TEXT, Seeded
from tests.support.consumer_kit import rows
from tests.support.waiting import eventually


async def sign_in(page: Page, base: str, token: str) -> None:
    await page.goto(base + "/ui/")
    await expect(page).to_have_url(re.compile(r"/ui/signin$"))
    await page.fill("#token", token)
    await page.click("form[action='/ui/signin'] button[type=submit]")


async def session_cookie(context: BrowserContext) -> dict[str, object] | None:
    cookies = await context.cookies()
    return next((dict(c) for c in cookies if c["name"] == "jobrelay_console"), None)


def record_dialogs(page: Page) -> list[str]:
    """Every alert/confirm/prompt the page opens (each is dismissed)."""
    opened: list[str] = []

    async def dismiss(dialog: Dialog) -> None:
        opened.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismiss)
    return opened


async def test_an_admin_signs_in_and_sees_the_overview(
    page: Page, deployment: Deployment, seeded: Seeded, deployed_store: Store
) -> None:
    await page.goto(deployment.base + "/ui/signin")
    await screenshot(page, "signin")

    await sign_in(page, deployment.base, seeded.admin_token)

    await expect(page).to_have_url(deployment.base + "/ui/")
    await expect(page.locator("h1")).to_have_text("Overview")
    await expect(page.locator(".who")).to_have_text("ops-admin")
    stats = await deployed_store.stats()
    succeeded = page.locator(".card", has=page.locator(".state-succeeded")).locator(".card-value")
    shown = int((await succeeded.inner_text()).replace(",", ""))
    assert shown >= stats.jobs_by_state["succeeded"] > 300  # the seeded jobs, and the hour's
    await expect(page.locator("svg.chart g.minute")).to_have_count(60)
    assert await page.locator("svg.chart rect.bar-quarantined").count() > 0
    await expect(page.locator("#live-control")).to_be_visible()  # the script runs
    await screenshot(page, "overview")


async def test_an_operator_finds_a_job_by_id_and_reads_its_timeline(
    page: Page, deployment: Deployment, seeded: Seeded
) -> None:
    retried = seeded.retried[0]
    await sign_in(page, deployment.base, seeded.admin_token)
    await page.goto(deployment.base + "/ui/jobs")
    await expect(page.locator("table.jobs tbody tr")).to_have_count(50)
    await screenshot(page, "jobs")

    await page.fill("#find-id", f"  {retried}  ")
    await page.click("form[action='/ui/jobs/find'] button")

    await expect(page).to_have_url(f"{deployment.base}/ui/jobs/{retried}")
    await expect(page.locator("h1 .state")).to_have_text("succeeded")
    events = await page.locator("ol.journal .event").all_inner_texts()
    # `published` is the relay's mark after the broker's confirm and may land after the run.
    steps = [event for event in events if event != "published"]
    assert steps[0] == "received" and steps[-1] == "succeeded"
    assert events.index("claimed") < events.index("retry_scheduled") < events.index("succeeded")
    assert events.count("claimed") == 2
    await expect(page.locator("svg.timeline circle")).to_have_count(len(events))
    await expect(page.locator(".why")).to_have_text("succeeded on attempt 2 of 3")
    await expect(page.locator("#result")).to_contain_text('"succeeded_on_attempt": 2')
    await screenshot(page, "job")

    await page.goto(deployment.base + "/ui/jobs")
    await page.fill("#find-id", "not-a-job")
    await page.click("form[action='/ui/jobs/find'] button")
    await expect(page.locator(".flash-error")).to_contain_text("is not a job id")


async def test_an_operator_replays_a_quarantined_job_and_sees_it_succeed(
    page: Page, deployment: Deployment, seeded: Seeded, deployed_store: Store
) -> None:
    poisoned = seeded.poisoned[0]
    assert await _state(deployed_store, poisoned) == JobState.QUARANTINED
    await sign_in(page, deployment.base, seeded.admin_token)
    await page.goto(deployment.base + "/ui/quarantine")
    await expect(page.locator("h2 code", has_text="permanent_error")).to_be_visible()
    await screenshot(page, "quarantine")
    # The page shows each reason's newest jobs; the reason's own page lists them all.
    await page.click("a[href='/ui/quarantine?reason=permanent_error']")
    await expect(page.locator("h1")).to_contain_text("permanent_error")

    row = page.locator("tr", has=page.locator(f"a[href='/ui/jobs/{poisoned}']"))
    await row.locator("button", has_text="Replay").click()

    await expect(page.locator(".flash-ok")).to_contain_text(f"Replayed job {poisoned}")
    await eventually(
        lambda: _has_state(deployed_store, poisoned, JobState.SUCCEEDED), what="the replay to run"
    )
    await page.goto(f"{deployment.base}/ui/jobs/{poisoned}")
    await expect(page.locator("h1 .state")).to_have_text("succeeded")
    events = await page.locator("ol.journal .event").all_inner_texts()
    assert events.index("quarantined") < events.index("replayed") < events.index("succeeded")


async def test_markup_in_a_payload_a_key_and_a_client_name_is_shown_as_text(
    page: Page, deployment: Deployment, seeded: Seeded
) -> None:
    dialogs = record_dialogs(page)
    await sign_in(page, deployment.base, seeded.admin_token)

    await page.goto(f"{deployment.base}/ui/jobs/{seeded.hostile}")
    await expect(page.locator("#payload")).to_contain_text(HOSTILE_TEXT)
    await expect(page.locator("dl.fields")).to_contain_text(HOSTILE_KEY)
    await expect(page.locator("dl.fields")).to_contain_text(HOSTILE_CLIENT)
    await page.goto(deployment.base + "/ui/jobs")
    await expect(page.locator("table.jobs")).to_contain_text(HOSTILE_CLIENT)
    await page.goto(deployment.base + "/ui/clients")
    await expect(page.locator("table.clients")).to_contain_text(HOSTILE_CLIENT)
    await page.wait_for_load_state("load")  # an <img onerror> would have fired by now

    assert dialogs == []
    assert await page.locator("main img, main script").count() == 0


async def test_a_form_without_its_csrf_token_is_refused_and_changes_nothing(
    page: Page, deployment: Deployment, seeded: Seeded, deployed_store: Store
) -> None:
    await sign_in(page, deployment.base, seeded.admin_token)
    await page.goto(deployment.base + "/ui/clients")
    disable = page.locator("tr", has_text="shop-backend").locator(
        "form[action='/ui/clients/disable']"
    )
    # A wrong token in the page's own form, sent by the browser as a click sends it.
    await disable.locator("input[name=csrf]").evaluate("input => { input.value = 'forged'; }")
    await disable.locator("button").click()

    await expect(page.locator("h1")).to_contain_text("Refused")
    assert not await _disabled(deployed_store, "shop-backend")
    # No token at all, as a form posted from another page would come.
    missing = await page.request.post(
        deployment.base + "/ui/clients/disable", form={"name": "shop-backend"}, max_redirects=0
    )
    assert missing.status == 403
    assert "nothing was changed" in await missing.text()
    assert not await _disabled(deployed_store, "shop-backend")


async def test_a_client_token_cannot_sign_in_and_gets_no_session_cookie(
    page: Page, context: BrowserContext, deployment: Deployment, seeded: Seeded
) -> None:
    await sign_in(page, deployment.base, seeded.client_token)

    await expect(page.locator("h1")).to_have_text("This token cannot sign in")
    assert await session_cookie(context) is None
    await page.goto(deployment.base + "/ui/clients")
    await expect(page).to_have_url(re.compile(r"/ui/signin\?next=%2Fui%2Fclients$"))


async def test_the_session_cookie_is_http_only_and_same_site_strict(
    page: Page, context: BrowserContext, deployment: Deployment, seeded: Seeded
) -> None:
    await sign_in(page, deployment.base, seeded.admin_token)
    await expect(page.locator("h1")).to_have_text("Overview")

    cookie = await session_cookie(context)

    assert cookie is not None
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert seeded.admin_token not in str(cookie["value"])
    assert "jobrelay_console" not in await page.evaluate("document.cookie")
    await page.goto(deployment.base + "/ui/schedules")
    await expect(page.locator("table.jobs")).to_contain_text("catalog-nightly")
    await screenshot(page, "schedules")
    await page.goto(deployment.base + "/ui/clients")
    await screenshot(page, "clients")


PHONE = {"width": 375, "height": 740}
WIDER_THAN_THE_WINDOW = """() => [...document.querySelectorAll("body *")]
    .filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5)
    .filter(e => !e.parentElement.closest("table, pre, svg"))
    .map(e => e.tagName.toLowerCase() + (e.className ? "." + e.className : ""))"""


# Item 17 of issue 24: on a phone the header's nav ran past the right edge (the page scrolled
# sideways and Clients was off screen).
async def test_on_a_phone_every_page_fits_the_width_and_its_nav_wraps(
    browser: Browser, deployment: Deployment, seeded: Seeded
) -> None:
    phone = await browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    try:
        page = await phone.new_page()
        await sign_in(page, deployment.base, seeded.admin_token)
        await expect(page.locator("h1")).to_have_text("Overview")
        for path in (
            "/ui/",
            "/ui/jobs",
            f"/ui/jobs/{seeded.retried[0]}",
            "/ui/workflows",
            "/ui/quarantine",
            "/ui/schedules",
            "/ui/sequences",
            "/ui/clients",
        ):
            await page.goto(deployment.base + path)
            width = await page.evaluate("document.documentElement.scrollWidth")
            # A phone widens its layout to a page wider than the screen, and zooms out.
            window = await page.evaluate("window.innerWidth")
            wider = await page.evaluate(WIDER_THAN_THE_WINDOW)
            assert width <= window == PHONE["width"], (path, width, window, wider)
            for link in await page.locator("header nav a").all():
                box = await link.bounding_box()
                assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= window
        await page.goto(deployment.base + "/ui/")
        await screenshot(page, "overview-phone")
    finally:
        await phone.close()


async def _state(store: Store, job_id: uuid.UUID) -> JobState | None:
    job = await store.get_job(job_id)
    return job.state if job else None


async def _has_state(store: Store, job_id: uuid.UUID, state: JobState) -> bool:
    return await _state(store, job_id) == state


async def _disabled(store: Store, name: str) -> bool:
    (row,) = await rows(
        store, "SELECT disabled_at FROM jobrelay.clients WHERE name = :name", name=name
    )
    return row.disabled_at is not None
