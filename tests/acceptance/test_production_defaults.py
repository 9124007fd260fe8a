"""The services as a production deployment starts them: no JOBRELAY_BUILTINS, no handlers.

The demo types are off (docs/production.md): the API starts without any type of its own (it
accepts what consumers registered), refuses a demo type as unknown, and writes nothing for it.
The consumer's refusal to start with no types is tests/unit/test_handlers.py's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from tests.conftest import MakeSettings
from tests.support.processes import answers, free_port, run_cli, running, service_env, wait_for


def submit(base: str, token: str, job_type: str) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(
        base + "/v1/jobs",
        data=json.dumps({"type": job_type, "payload": {"seconds": 0}}).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4()),
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), json.loads(error.read())


def test_by_default_the_api_starts_without_the_demo_types_and_refuses_them(
    make_settings: MakeSettings, tmp_path: Path
) -> None:
    port = free_port()
    env = service_env(make_settings(handlers=""), JOBRELAY_API_PORT=str(port))
    del env["JOBRELAY_BUILTINS"]  # unset, as in production: the default itself
    base = f"http://127.0.0.1:{port}"

    with running(["api"], env, tmp_path / "api.log") as api:
        wait_for(lambda: answers(base + "/healthz") or not api.alive(), 30, what="the API")
        assert api.alive(), api.output()
        created = run_cli(env, "clients", "create", "shop-backend", "--json")
        assert created.returncode == 0, created.stderr
        token = json.loads(created.stdout)["token"]

        status, problem = submit(base, token, "demo.sleep")
        listed = run_cli(env, "jobs", "list", "--json")

    assert (status, problem["code"]) == (422, "unknown_job_type"), problem
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["jobs"] == []  # nothing written for it
    lines = (tmp_path / "api.log").read_text().splitlines()
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    (types,) = [line["types"] for line in logged if line.get("event") == "job_types"]
    assert types == ""  # no demo type, and no handler of its own: the registered ones only
