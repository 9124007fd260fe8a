"""The API's metrics belong to the app that holds them (``api/metrics.py``): two apps in one
process count apart, and ``/metrics`` serves the app's own with the process collectors."""

from __future__ import annotations

import httpx

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings


def _requests(text: str, route: str) -> float:
    prefix = f'jobrelay_api_request_seconds_count{{method="GET",route="{route}",status="200"}} '
    counts = [float(line[len(prefix) :]) for line in text.splitlines() if line.startswith(prefix)]
    return counts[0] if counts else 0.0


async def test_two_apps_count_their_own_requests() -> None:
    first, second = (create_app(Settings(), store=object()) for _ in range(2))  # type: ignore[arg-type]
    async with (
        httpx.AsyncClient(transport=httpx.ASGITransport(app=first), base_url="http://a") as a,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=second), base_url="http://b") as b,
    ):
        for _ in range(3):
            assert (await a.get("/healthz")).status_code == 200
        served_a = (await a.get("/metrics")).text
        served_b = (await b.get("/metrics")).text
    assert _requests(served_a, "/healthz") == 3
    assert _requests(served_b, "/healthz") == 0
    assert "python_gc_objects_collected_total" in served_a  # the runtime collectors too
