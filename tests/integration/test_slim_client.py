"""The slim client as a newcomer gets it (issue 43, SPEC section 24): the wheel of
``jobrelay-client`` built from ``clients/python`` as ``make dist`` builds it, installed ALONE
into a fresh venv with the lock's versions (``dist/constraints.txt``'s, made from
requirements/dev.txt: nothing unlocked), holds httpx and its dependencies and none of the
server's; from that venv's python it submits a job to a real ``jobrelay api``, a dispatcher and
a consumer run it, it waits for the result, and a 409 ``idempotency_conflict`` is read as
``IdempotencyConflict``. A build or an install that fails fails the test, never skips it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

from jobrelay.core.settings import Settings
from tests.support.processes import run_cli, running, running_api, service_env

ROOT = Path(__file__).resolve().parents[2]
SERVER_PACKAGES = {"fastapi", "sqlalchemy", "psycopg", "aio-pika", "pydantic", "jobrelay"}

# Run by the slim venv's python: every line of its output is one JSON fact.
NEWCOMER = """
import json, os, sys
from jobrelay_client import Client, IdempotencyConflict, Workflow

with Client(os.environ["API"], os.environ["TOKEN"]) as client:
    job = client.submit("demo.sleep", {"seconds": 0}, key="slim-1")
    done = client.wait(job.id, timeout=60)
    print(json.dumps({"state": done.state, "result": done.result}))
    try:
        client.submit("demo.sleep", {"seconds": 1}, key="slim-1")
    except IdempotencyConflict as error:
        print(json.dumps({"conflict": [error.status, error.code]}))
    flow = Workflow()
    flow.add("demo.sleep", {"seconds": 0}, after=[flow.add("demo.sleep", {"seconds": 0})])
    print(json.dumps({"workflow": client.submit_workflow(flow).state}))
print(json.dumps({"modules": sorted({name.split(".")[0] for name in sys.modules})}))
"""


def _run(*args: str | Path, cwd: Path = ROOT) -> str:
    done = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


def slim_venv(where: Path) -> Path:
    """The slim wheel built and installed alone into a fresh venv: the venv's python."""
    dist = where / "dist"
    # Built from a copy of the two folders (the same layout), so that a `make dist` running
    # beside this test (make test runs two tiers at once) shares no build/ folder with it.
    source = where / "source"
    for folder in ("clients/python", "services/jobrelay_client"):
        shutil.copytree(
            ROOT / folder,
            source / folder,
            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
        )
    _run(sys.executable, "-m", "uv", "build", "--wheel", "--no-build-isolation",
         "--python", sys.executable, "--out-dir", dist, source / "clients/python")  # fmt: skip
    constraints = where / "constraints.txt"
    _run(sys.executable, "scripts/lock_constraints.py", "requirements/dev.txt", constraints)
    (wheel,) = dist.glob("jobrelay_client-*.whl")
    _run(sys.executable, "-m", "venv", where / "venv")
    python = where / "venv" / "bin" / "python"
    _run(python, "-m", "pip", "install", "-q", "-c", constraints, wheel)
    return python


def test_the_slim_client_has_jobrelays_version_and_httpx_its_only_dependency() -> None:
    slim = tomllib.loads((ROOT / "clients/python/pyproject.toml").read_text())["project"]
    full = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert slim["version"] == full["version"]
    assert [dependency.split(">")[0] for dependency in slim["dependencies"]] == ["httpx"]


def test_the_slim_client_alone_in_a_fresh_venv_submits_waits_and_reads_a_conflict(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    python = slim_venv(tmp_path)
    listed = json.loads(_run(python, "-m", "pip", "list", "--format=json"))
    packages = sorted(package["name"].lower() for package in listed)
    print("the slim venv's packages:", " ".join(packages))
    assert "jobrelay-client" in packages
    assert "httpx" in packages
    assert SERVER_PACKAGES & set(packages) == set()

    settings = make_settings()
    env = service_env(settings)
    with (
        running_api(settings, tmp_path) as (_, api_env, base),
        running(["dispatcher"], env, tmp_path / "dispatcher.log"),
        running(["consumer"], env, tmp_path / "consumer.log"),
    ):
        created = run_cli(api_env, "clients", "create", "slim", "--json")
        assert created.returncode == 0, created.stderr
        token = str(json.loads(created.stdout)["token"])
        done = subprocess.run(
            [str(python), "-c", NEWCOMER],
            env={"API": base, "TOKEN": token, "PATH": "/usr/bin:/bin"},
            cwd=tmp_path,  # not the repository: nothing of its source is importable
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 0, done.stderr
    facts = [json.loads(line) for line in done.stdout.splitlines()]
    assert facts[0] == {"state": "succeeded", "result": {"slept": 0}}
    assert facts[1] == {"conflict": [409, "idempotency_conflict"]}
    assert facts[2] == {"workflow": "running"}
    assert not {"jobrelay", "pydantic"} & set(facts[3]["modules"])
