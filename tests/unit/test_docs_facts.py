"""What docs/failover.md, docs/django.md and docs/containers.md say about the code, checked
against the code's own data (issue 37 item 8.6: failover.md named a problem code the API never
sends, and a retry rule the client does not follow; django.md left out the consumer's
settings)."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from jobrelay.api.problems import on_store_unavailable
from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import Settings
from jobrelay_client._retry import RETRY_STATUSES

DOCS = Path(__file__).resolve().parents[2] / "docs"


def page(name: str) -> str:
    return " ".join((DOCS / name).read_text(encoding="utf-8").split())


def _counting_metrics() -> Any:
    counter = SimpleNamespace(inc=lambda *args: None)
    return SimpleNamespace(shed=lambda reason: counter)


def test_failover_names_the_problem_code_the_api_answers_without_its_database() -> None:
    request = SimpleNamespace(
        app=SimpleNamespace(
            state=SimpleNamespace(context=SimpleNamespace(metrics=_counting_metrics()))
        )
    )
    answer = asyncio.run(on_store_unavailable(request, StoreUnavailable("down")))  # type: ignore[arg-type]
    code = json.loads(answer.body)["code"]

    failover = page("failover.md")
    assert answer.status_code == 503 and f"`503 {code}`" in failover
    assert "(`store_unavailable`) to the submissions" not in failover  # the consumer's word


def test_failover_names_the_statuses_the_client_retries() -> None:
    failover = page("failover.md")
    named = re.search(
        r"the answers `(\d+)`, `(\d+)`, `(\d+)` and `(\d+)`, not other `5xx`", failover
    )
    assert named is not None
    assert {int(status) for status in named.groups()} == set(RETRY_STATUSES)
    assert "clients retrying `5xx`" not in failover


def test_the_django_consumer_is_told_its_database_and_broker_settings() -> None:
    names = {f"JOBRELAY_{name.upper()}" for name in Settings.model_fields}
    for variable in ("JOBRELAY_DATABASE_URL", "JOBRELAY_AMQP_URL"):
        assert variable in names
        assert f"export {variable}=" in (DOCS / "django.md").read_text(encoding="utf-8")
        assert f"{variable}:" in (DOCS / "containers.md").read_text(encoding="utf-8")
    assert "DJANGO_SETTINGS_MODULE: mysite.settings" in (DOCS / "containers.md").read_text(
        encoding="utf-8"
    )
