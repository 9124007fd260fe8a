"""The browser tier: the console in headless Chromium against a real system.

One system per module: ``jobrelay api``, a dispatcher and a consumer as processes, on a database
and a RabbitMQ vhost of their own, filled once with realistic work (``seeding.py``). Each test
opens a browser context of its own (no cookie carries over).

Chromium is Debian's (``apt-get install chromium``), driven by Playwright; Playwright's own
browser download is never used. ``JOBRELAY_CHROMIUM`` names another executable. Without one the
tests are skipped, and under CI they fail.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser, BrowserContext, Page, async_playwright

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.browser.handlers import HANDLERS
from tests.browser.seeding import Seeded, seed
from tests.conftest import FAST_TIMINGS
from tests.support import databases
from tests.support.processes import ROOT, running_api
from tests.support.servers import Servers, create_vhost, delete_vhost, vhost_amqp_url
from tests.support.system import running_system

NO_CHROMIUM = (
    "no Chromium for the browser tests: apt-get install chromium "
    "(or set JOBRELAY_CHROMIUM to its executable)"
)
# Playwright's own wait for a page or an element; a page of the console answers in milliseconds.
ACTION_TIMEOUT_MS = 15_000


def chromium_executable() -> str:
    """Debian's chromium, or JOBRELAY_CHROMIUM; skipped without one, failed under CI."""
    path = os.environ.get("JOBRELAY_CHROMIUM") or shutil.which("chromium")
    if path and os.access(path, os.X_OK):
        return path
    if os.environ.get("CI"):
        pytest.fail(NO_CHROMIUM, pytrace=False)
    pytest.skip(NO_CHROMIUM)


def screenshots_dir() -> Path:
    folder = Path(os.environ.get("JOBRELAY_SCREENSHOTS_DIR") or ROOT / ".local" / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


async def screenshot(page: Page, name: str) -> Path:
    """The whole page as ``<name>.png`` in JOBRELAY_SCREENSHOTS_DIR (.local/screenshots/)."""
    path = screenshots_dir() / f"{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    return path


@dataclass(frozen=True)
class Deployment:
    settings: Settings
    base: str  # the API's URL


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    executable = chromium_executable()
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"]
        )
        yield launched
        await launched.close()


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    opened = await browser.new_context(viewport={"width": 1280, "height": 860})
    opened.set_default_timeout(ACTION_TIMEOUT_MS)
    yield opened
    await opened.close()


@pytest.fixture
async def page(context: BrowserContext) -> Page:
    return await context.new_page()


@pytest.fixture(scope="module")
def deployment(
    servers: Servers, template_database: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """The API, a dispatcher and a consumer as processes, on a database and vhost of their own."""
    url = databases.copy_template(servers.database_url, template_database)
    vhost = f"jobrelay-browser-{uuid.uuid4().hex[:10]}"
    create_vhost(servers.rabbitmq_api_url, vhost)
    logs = tmp_path_factory.mktemp("browser-logs")
    settings = Settings(
        database_url=url,
        amqp_url=vhost_amqp_url(servers.amqp_url, vhost),
        results_dir=logs / "results",
        handlers=HANDLERS,
        # A lease that no busy CI machine lets expire: the timeline test counts the claims.
        **(FAST_TIMINGS | {"lease_seconds": 10.0}),
    )
    try:
        with running_api(settings, logs) as (_, _, base), running_system(settings, logs):
            yield Deployment(settings, base)
    finally:
        delete_vhost(servers.rabbitmq_api_url, vhost)
        databases.drop_database(servers.database_url, url)


@pytest.fixture(scope="module")
async def deployed_store(deployment: Deployment) -> AsyncIterator[Store]:
    store = Store.connect(deployment.settings.database_url, pool_size=4)
    yield store
    await store.close()


@pytest.fixture(scope="module")
async def seeded(deployment: Deployment, deployed_store: Store) -> Seeded:
    return await seed(deployment.base, deployed_store)
