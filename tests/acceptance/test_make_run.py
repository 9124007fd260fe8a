"""``make run`` as a developer uses it: the demo client and its token survive a restart.

scripts/run.sh runs here against servers of its own (a scratch ``JOBRELAY_SERVERS_DIR``), is
stopped as Ctrl-C would stop it, the servers are stopped keeping their data (``make down``), and
the second run must hand out the same token, which the API accepts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import ROOT, free_port, wait_for

TOKEN_LINE = re.compile(r"export JOBRELAY_TOKEN=(\S+)")


@pytest.fixture
def scratch() -> Iterator[dict[str, str]]:
    # Not pytest's tmp_path: PostgreSQL runs as the postgres OS user, who must traverse it.
    folder = Path(tempfile.mkdtemp(prefix="jobrelay-make-run-"))
    folder.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBRELAY_")}
    env |= {
        "PYTHON": sys.executable,
        "JOBRELAY_SERVERS_DIR": str(folder / "servers"),
        "JOBRELAY_DEMO_TOKEN_FILE": str(folder / "demo-token"),
        "JOBRELAY_RESULTS_DIR": str(folder / "results"),
        "JOBRELAY_API_PORT": str(free_port()),
    }
    yield env
    subprocess.run(
        [sys.executable, "scripts/servers.py", "down", "--delete-data"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    shutil.rmtree(folder, ignore_errors=True)


def run_once(env: dict[str, str], log: Path) -> str:
    """Start ``make run``'s script, wait for its token and a live API, stop it; the token."""
    with open(log, "wb") as output:
        process = subprocess.Popen(
            ["bash", "scripts/run.sh"],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{env['JOBRELAY_API_PORT']}"
        wait_for(
            lambda: TOKEN_LINE.search(log.read_text()) or process.poll() is not None,
            120,
            0.2,
            what="make run to print its token",
        )
        match = TOKEN_LINE.search(log.read_text())
        assert match, log.read_text()
        token = match.group(1)
        wait_for(lambda: status(base, token) == 200, 60, 0.2, what="the API to accept it")
        # make run asks for the demo types (JOBRELAY_BUILTINS=true), off by default elsewhere.
        assert demo_submission(base, token) == 202
        return token
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)


def demo_submission(base: str, token: str) -> int:
    """The status of a ``demo.sleep`` submission (202: the API knows the demo types)."""
    request = urllib.request.Request(
        base + "/v1/jobs",
        data=json.dumps({"type": "demo.sleep", "payload": {"seconds": 0}}).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "Idempotency-Key": str(uuid.uuid4()),
        },
        method="POST",
    )
    return answer_status(request)


def status(base: str, token: str) -> int:
    request = urllib.request.Request(
        base + "/v1/jobs", headers={"Authorization": f"Bearer {token}"}
    )
    return answer_status(request)


def answer_status(request: urllib.request.Request) -> int:
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return 0


def test_make_run_keeps_its_demo_client_and_token_across_a_restart(
    scratch: dict[str, str], tmp_path: Path
) -> None:
    first = run_once(scratch, tmp_path / "run-1.log")
    down = subprocess.run(
        [sys.executable, "scripts/servers.py", "down"],
        cwd=ROOT,
        env=scratch,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert down.returncode == 0, down.stderr
    time.sleep(0.5)

    second = run_once(scratch, tmp_path / "run-2.log")

    assert second == first
    assert "again" in (tmp_path / "run-2.log").read_text()
    # Ctrl-C stops it quietly: no line about a service that exited.
    assert "stopping the others" not in (tmp_path / "run-1.log").read_text()
    assert (Path(scratch["JOBRELAY_DEMO_TOKEN_FILE"]).stat().st_mode & 0o777) == 0o600


def test_a_second_make_run_on_a_busy_port_says_which_port_and_how_to_choose_another(
    scratch: dict[str, str],
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", int(scratch["JOBRELAY_API_PORT"])))
        taken.listen()
        result = subprocess.run(
            ["bash", "scripts/run.sh"],
            cwd=ROOT,
            env=scratch,
            capture_output=True,
            text=True,
            timeout=60,
        )

    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert scratch["JOBRELAY_API_PORT"] in lines[0]
    assert "JOBRELAY_API_PORT=" in lines[0]
    # It stopped before starting anything: no servers were made for it.
    assert not Path(scratch["JOBRELAY_SERVERS_DIR"]).exists()


def service_pids(session: int, command: str) -> list[int]:
    """The processes of ``session`` running ``jobrelay COMMAND``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if os.getsid(int(entry.name)) != session:
                continue
        except (OSError, ProcessLookupError):
            continue  # gone meanwhile
        if b"jobrelay" in argv and command.encode() in argv:
            found.append(int(entry.name))
    return found


def test_make_run_stops_with_one_line_when_one_of_its_services_dies(
    scratch: dict[str, str], tmp_path: Path
) -> None:
    # Before: a dead consumer left the API and the dispatcher running, every job queued.
    log = tmp_path / "run.log"
    with open(log, "wb") as output:
        process = subprocess.Popen(
            ["bash", "scripts/run.sh"],
            cwd=ROOT,
            env=scratch,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        base = f"http://127.0.0.1:{scratch['JOBRELAY_API_PORT']}"
        wait_for(lambda: status(base, "none") == 401, 120, 0.2, what="make run's API")
        consumer = wait_for(lambda: service_pids(process.pid, "consumer"), 30, 0.2, what="it")
        os.kill(consumer[0], signal.SIGKILL)
        exit_status = process.wait(60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)

    assert exit_status == 1
    said = [line for line in log.read_text().splitlines() if line.startswith("make run:")]
    assert said == ["make run: the consumer exited (status 137); stopping the others"]
    assert status(base, "none") == 0  # the API is gone with it
    assert service_pids(process.pid, "dispatcher") == []


def make_plan(target: str, env: dict[str, str]) -> str:
    """What ``make TARGET`` would run (``make -n``), in a scratch copy of the Makefile."""
    result = subprocess.run(
        ["make", "-n", "--no-print-directory", target],
        cwd=env["CHECKOUT"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture
def bare_checkout(tmp_path: Path) -> dict[str, str]:
    """A folder with the Makefile and the files its environment depends on, and an environment
    with no virtual environment active."""
    for name in ("Makefile", "pyproject.toml", "requirements/dev.txt"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHON", "MAKEFLAGS")}
    return env | {"CHECKOUT": str(tmp_path)}


@pytest.mark.parametrize("target", ["test", "run"])
def test_make_test_and_make_run_create_the_venv_from_the_lock_when_none_is_active(
    bare_checkout: dict[str, str], target: str
) -> None:
    plan = make_plan(target, bare_checkout)

    venv_python = f"{bare_checkout['CHECKOUT']}/.venv/bin/python"
    assert "python3 -m venv .venv" in plan
    assert f"{venv_python} -m pip install --require-hashes -r requirements/dev.txt" in plan
    assert "scripts/servers.py run" in plan or "scripts/run.sh" in plan


@pytest.mark.parametrize("venv", [".venv", ".local/venv-3.13"])
def test_a_venv_is_reused_until_the_lock_changes(bare_checkout: dict[str, str], venv: str) -> None:
    # .venv, and the one of the Python 3.13 tier (make test-python313).
    checkout = Path(bare_checkout["CHECKOUT"])
    (checkout / venv / "bin").mkdir(parents=True)
    (checkout / venv / "bin/python").symlink_to(sys.executable)
    stamp = checkout / venv / ".jobrelay-installed"
    stamp.touch()
    future = time.time() + 60
    os.utime(stamp, (future, future))
    install = f"{venv}/bin/python -m pip install -q --require-hashes"
    if venv == ".venv":
        install = f"{checkout}/.venv/bin/python -m pip install --require-hashes"

    assert install not in make_plan("test", bare_checkout)

    os.utime(checkout / "requirements/dev.txt", (future + 60, future + 60))
    assert install in make_plan("test", bare_checkout)


def test_an_active_virtual_environment_is_used_as_it_is(bare_checkout: dict[str, str]) -> None:
    active = bare_checkout | {"VIRTUAL_ENV": str(Path(sys.executable).parent.parent)}

    plan = make_plan("test", active)

    assert "python3 -m pip install" not in plan  # nothing installed into the active one
    assert "python3 -m pytest" in plan
