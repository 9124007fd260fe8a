"""A client generated from the OpenAPI document is the document's test (issue 24, item 21).

openapi-python-client printed 48 warnings and dropped most error answers: the problem schema
was copied inline into every answer instead of referenced from ``components``, and the batch
items reused the single submissions' titles. Here the client is generated with no warning, one
module per tag (``jobs``, ``admin``, ``health``) and one function per chosen operation id, and
then used against ``jobrelay api`` running as a process: a 202, a 409 and a 422, each parsed
into its documented model, and a documented 404 that does not raise.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from jobrelay.api.app import create_app
from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import make_client
from tests.support.processes import running_api

PACKAGE = "jobrelay_generated_client"


def generate(document: dict[str, Any], where: Path) -> subprocess.CompletedProcess[str]:
    (where / "openapi.json").write_text(json.dumps(document))
    return subprocess.run(
        [
            *(sys.executable, "-m", "openapi_python_client", "generate"),
            *("--path", str(where / "openapi.json")),
            *("--output-path", str(where / PACKAGE), "--meta", "none"),
        ],
        # Its post-hook runs ruff: the venv's, found beside this python (else it prints
        # "Skipping Integration: ruff is not in PATH" and leaves the code unformatted).
        env=os.environ | {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def generated(settings: Settings, tmp_path: Path) -> Iterator[ModuleType]:
    """The generated package, imported from a temporary directory (and forgotten after)."""
    made = generate(create_app(settings).openapi(), tmp_path)
    output = made.stdout + made.stderr
    assert made.returncode == 0, output
    assert "warning" not in output.lower(), output
    assert "skipping" not in output.lower(), output  # every post-hook ran
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.split(".")[0] == PACKAGE]:
            del sys.modules[name]


def test_the_client_has_a_module_per_tag_and_a_function_per_operation(
    generated: ModuleType,
) -> None:
    operations = {
        "jobs": {"submit_job", "submit_batch", "list_jobs", "get_job", "list_job_events"}
        | {"get_job_trace", "cancel_job", "signal_job"},
        "admin": {"get_stats", "list_quarantine", "reconcile_quarantine", "replay_job"}
        | {"get_any_job_trace"}
        | {"list_queues", "pause_queue", "resume_queue"}
        | {"list_limits", "get_limit", "set_limit", "clear_limit"},
        "health": {"get_liveness", "get_readiness", "get_metrics"},
    }
    for tag, names in operations.items():
        for name in names:
            module = importlib.import_module(f"{PACKAGE}.api.{tag}.{name}")
            assert callable(module.sync_detailed), (tag, name)


async def test_the_generated_client_gets_a_202_a_409_a_422_and_a_404_as_documented(
    generated: ModuleType, settings: Settings, store: Store, tmp_path: Path
) -> None:
    """The generated client is synchronous: its calls block this test, not the API, which
    runs in its own process."""
    token = await make_client(store, "generated")
    models = importlib.import_module(f"{PACKAGE}.models")
    submit_job = importlib.import_module(f"{PACKAGE}.api.jobs.submit_job")
    get_job = importlib.import_module(f"{PACKAGE}.api.jobs.get_job")

    def export(course: str, **fields: Any) -> Any:
        return models.SubmitCatalogExport(
            type_="catalog.export", payload=models.CatalogExportPayload(course=course), **fields
        )

    with running_api(settings, tmp_path) as (_, _, base):
        client = generated.AuthenticatedClient(
            base_url=base, token=token, raise_on_unexpected_status=True
        )
        with client:
            accepted = submit_job.sync_detailed(
                client=client, body=export("JavaScript"), idempotency_key="gen-1"
            )
            assert accepted.status_code == 202, accepted.content
            assert isinstance(accepted.parsed, models.JobView)
            assert accepted.parsed.type_ == "catalog.export"

            conflict = submit_job.sync_detailed(
                client=client, body=export("Python"), idempotency_key="gen-1"
            )
            assert conflict.status_code == 409, conflict.content
            assert isinstance(conflict.parsed, models.Problem)
            assert conflict.parsed.code == "idempotency_conflict"

            invalid = submit_job.sync_detailed(
                client=client, body=export("Go", max_attempts=0), idempotency_key="gen-2"
            )
            assert invalid.status_code == 422, invalid.content
            assert isinstance(invalid.parsed, models.Problem)
            assert invalid.parsed.code == "validation_error"
            (field,) = invalid.parsed.errors
            assert isinstance(field, models.FieldError)
            assert field.loc == ["body", "max_attempts"]

            missing = get_job.sync_detailed(uuid.uuid4(), client=client)
            assert missing.status_code == 404
            assert isinstance(missing.parsed, models.Problem)
            assert missing.parsed.code == "job_not_found"

            found = get_job.sync(accepted.parsed.id, client=client)
            assert isinstance(found, models.JobView) and found.id == accepted.parsed.id
