"""The API's ``/metrics`` exports the system's counts from its database (one worker, in
process; several workers: ``tests/acceptance/test_metrics_multiprocess.py``)."""

from __future__ import annotations

import httpx

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import api_client
from tests.support.metrics import arrange_alerts, assert_arranged, samples, value
from tests.support.processes import free_port


async def test_metrics_show_every_alert_of_the_readme_from_the_database(
    settings: Settings, store: Store
) -> None:
    await arrange_alerts(store)
    async with api_client(settings, store) as api:
        scrape = await api.get("/metrics")
    assert scrape.status_code == 200
    assert_arranged(samples(scrape.text))


async def test_a_database_that_is_down_gives_a_scrape_with_stats_up_zero_and_no_stats(
    settings: Settings,
) -> None:
    down = settings.model_copy(
        update={"database_url": f"postgresql+psycopg://jobrelay:pw@127.0.0.1:{free_port()}/x"}
    )
    store = Store.connect(down.database_url, pool_timeout=1)
    try:
        app = create_app(down, store=store)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://jobrelay.test") as api:
            assert (await api.get("/healthz")).status_code == 200
            scrape = await api.get("/metrics")
    finally:
        await store.close()
    assert scrape.status_code == 200
    scraped = samples(scrape.text)
    assert value(scraped, "jobrelay_stats_up") == 0
    assert not any(name.startswith("jobrelay_jobs") for name, _ in scraped)
    assert not any(name.startswith("jobrelay_outbox") for name, _ in scraped)
    healthz = value(
        scraped, "jobrelay_api_request_seconds_count", route="/healthz", method="GET", status="200"
    )
    assert healthz == 1  # the API's own metrics are all there
