"""The Django example (``examples/django_app``) through the real system, as its README runs it:
Django's own server (``manage.py runserver``), a dispatcher, ``make run``'s consumer (no Django)
and a consumer with ``DJANGO_SETTINGS_MODULE`` set, all run as processes from the example's
folder. Orders made by ``POST /orders`` one at a time are each confirmed by their task, which
only the Django consumer receives (never deferred by the other); an order whose transaction
fails after the enqueue leaves no order and no job."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx

from jobrelay.db.store import Store
from tests.conftest import MakeSettings, make_client
from tests.support.consumer_kit import scalar
from tests.support.processes import ROOT, free_port, run_cli, running, service_env
from tests.support.system import eventually

EXAMPLE = ROOT / "examples" / "django_app"
TASK_TYPE = "orders.tasks.confirm_order"
ORDERS = ["tea", "scones", "jam", "cream"]


@contextmanager
def django_server(env: dict[str, str], port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``manage.py runserver`` of the example, stopped at the end."""
    with open(log, "ab") as output:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", "--noreload", f"127.0.0.1:{port}"],
            env=env,
            cwd=EXAMPLE,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            yield process
        finally:
            process.terminate()
            process.wait(10)


async def test_the_django_example_confirms_its_orders_and_rolls_back_a_declined_one(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    cfg = make_settings()
    await make_client(store, "orders")  # the example's ORDERS_CLIENT
    env = service_env(cfg, DJANGO_SETTINGS_MODULE="django_app.settings")
    plain_env = service_env(cfg)  # make run's consumer: the built-in types only
    migrated = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "manage.py", "migrate", "--no-input"],
        env=env,
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    logs = tmp_path / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        services = {
            name: stack.enter_context(running(args, given, logs / f"{name}.log", cwd=EXAMPLE))
            for name, args, given in (
                ("dispatcher", ["dispatcher"], env),
                ("plain consumer", ["consumer", "--concurrency", "2"], plain_env),
                ("consumer", ["consumer", "--concurrency", "2"], env),
            )
        }
        server = stack.enter_context(django_server(env, port, logs / "django.log"))
        async with httpx.AsyncClient(base_url=base, timeout=10) as web:

            async def answers() -> bool:
                assert server.poll() is None, (logs / "django.log").read_text()
                try:
                    return (await web.get("/orders/0")).status_code == 404
                except httpx.TransportError:
                    return False

            await eventually(answers, within=60, what="Django's server")

            async def confirmed(order_id: int) -> dict[str, Any] | None:
                for name, service in services.items():
                    assert service.alive(), f"{name} died:\n{service.output()}"
                order = (await web.get(f"/orders/{order_id}")).json()
                return order if order["confirmed"] else None

            async def finished_task(task_id: str) -> dict[str, Any] | None:
                task: dict[str, Any] = (await web.get(f"/tasks/{task_id}")).json()
                return task if task["status"] != "RUNNING" else None

            for item in ORDERS:  # one at a time: each could land on either consumer before
                made = await web.post("/orders", json={"item": item})
                assert made.status_code == 201, made.text
                order_id, task_id = made.json()["order_id"], made.json()["task_id"]
                # A deferral would put it back for 30-60 s: it would not be confirmed in time.
                await eventually(
                    partial(confirmed, order_id), within=20, what="the order to be confirmed"
                )
                # The handler's own transaction confirms the order; the job's outcome is stored
                # after the handler returns, so the task may still read RUNNING for a moment.
                task = await eventually(
                    partial(finished_task, task_id), within=20, what="the task's outcome"
                )
                assert task == {
                    "id": task_id,
                    "status": "SUCCESSFUL",
                    "attempts": 1,
                    "return_value": {"order_id": order_id, "confirmed": True},
                }

            declined = await web.post("/orders", json={"item": "cake", "decline_payment": True})
            assert declined.status_code == 402, declined.text

        assert "orders.tasks.confirm_order" in services["consumer"].output()  # its job types
    # Only the orders made and their jobs: the declined one's rolled back with its task's job
    # (and so its outbox row, which references the job).
    assert await scalar(store, "SELECT count(*) FROM orders_order") == len(ORDERS)
    assert await scalar(store, "SELECT count(*) FROM jobrelay.jobs") == len(ORDERS)
    assert await scalar(store, "SELECT DISTINCT type FROM jobrelay.jobs") == TASK_TYPE
    deferrals = "SELECT count(*) FROM jobrelay.job_journal WHERE event = 'deferred'"
    assert await scalar(store, deferrals) == 0  # the plain consumer never received one


def test_a_consumer_whose_django_settings_cannot_load_says_why_and_exits_2(
    make_settings: MakeSettings,
) -> None:
    env = service_env(make_settings(), DJANGO_SETTINGS_MODULE="no_such_project.settings")

    ended = run_cli(env, "consumer", cwd=EXAMPLE, timeout=60)

    assert ended.returncode == 2, ended.stdout + ended.stderr
    output = ended.stdout + ended.stderr
    assert "no_such_project" in output and "Traceback" not in output


def test_import_jobrelay_loads_no_django() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, jobrelay, jobrelay.handlers.loading, jobrelay.consumer.service; "
            "print(sorted(m for m in sys.modules if m.partition('.')[0] in ('django', "
            "'django_tasks')))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert loaded.stdout.strip() == "[]"
