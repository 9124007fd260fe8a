"""``jobrelay submit --wait`` (issue 37 item 8.4): the job submitted through a real API process,
run by a real dispatcher and consumer; the command prints the job's final view and exits with
the status of its end: 0 succeeded, 3 quarantined, 4 cancelled, 5 not finished in time."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.conftest import auth
from tests.support.processes import ROOT, run_cli, running_api
from tests.support.system import System

SLEEPS_NOT = ("demo.sleep", "--payload", '{"seconds": 0}')
POISON = ("demo.fail", "--payload", '{"mode": "permanent", "times": 1}')


def state_line(stdout: str) -> str:
    """The view's state, as ``jobrelay jobs show`` prints it."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("state ")]
    return line.split()[1]


async def test_submit_wait_prints_the_end_and_exits_by_how_the_job_ended(
    system: System, tmp_path: Path
) -> None:
    with system.running(), running_api(system.settings, tmp_path) as (_, env, _):
        env = env | {"JOBRELAY_TOKEN": system.alice}

        succeeded = run_cli(env, "submit", *SLEEPS_NOT, "--wait", "--timeout", "60")
        quarantined = run_cli(env, "submit", *POISON, "--wait", "--json")
        late = run_cli(env, "submit", *SLEEPS_NOT, "--delay", "1h", "--wait", "--timeout", "0.5")

    assert succeeded.returncode == 0, succeeded.stderr
    assert succeeded.stdout.startswith("accepted: job ")
    assert state_line(succeeded.stdout) == "succeeded"
    assert quarantined.returncode == 3, quarantined.stderr
    final = json.loads(quarantined.stdout)  # --json: the final view alone
    assert final["state"] == "quarantined" and final["last_error_code"] == "permanent_error"
    assert late.returncode == 5
    assert state_line(late.stdout) == "queued"
    (said,) = late.stderr.strip().splitlines()
    assert said.endswith("is still queued after 0.5 s; it goes on")


async def test_submit_wait_exits_4_when_its_job_is_cancelled_while_it_waits(
    system: System, tmp_path: Path
) -> None:
    with running_api(system.settings, tmp_path) as (_, env, _):
        env = env | {"JOBRELAY_TOKEN": system.alice, "PYTHONUNBUFFERED": "1"}
        waiting = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "jobrelay", "submit", *SLEEPS_NOT, "--delay", "1h"),
            *("--wait", "--timeout", "60"),
            env=env,
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            assert waiting.stdout is not None
            first = (await waiting.stdout.readline()).decode()  # the submit's line
            job_id = first.split()[2]
            cancel = await system.api.post(f"/v1/jobs/{job_id}/cancel", headers=auth(system.alice))
            assert cancel.status_code == 200, cancel.text
            out, _ = await asyncio.wait_for(waiting.communicate(), 60)
            rest = out.decode()
        finally:
            if waiting.returncode is None:
                waiting.kill()
                await waiting.wait()

    assert first.startswith("accepted: job ")
    assert waiting.returncode == 4
    assert state_line(rest) == "cancelled"


def test_submit_wait_refuses_a_timeout_it_cannot_keep_in_one_line(tmp_path: Path) -> None:
    env = {"JOBRELAY_TOKEN": "jr_unused", "PATH": "/usr/bin:/bin"}
    for args, says in [
        (("--timeout", "5"), "--timeout goes with --wait"),
        (("--wait", "--timeout", "0"), "--timeout must be more than 0 seconds"),
        (("--wait", "--timeout", "nan"), "--timeout must be more than 0 seconds"),
    ]:
        result = run_cli(env, "submit", *SLEEPS_NOT, *args)
        assert result.returncode == 1, (args, result.stderr)
        (line,) = result.stderr.strip().splitlines()
        assert says in line and "Traceback" not in result.stderr
