"""The handler guide's example (``examples/shop``) through the real system: the API (two worker
processes), a dispatcher and a consumer run as processes from the example's folder with
``JOBRELAY_HANDLERS=shop.jobs:registry``; jobs go in over HTTP and end where the guide says."""

from __future__ import annotations

import json
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from jobrelay.core.settings import Settings
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth, make_client
from tests.support.processes import ROOT, answers, run_cli, running, service_env
from tests.support.system import eventually, free_port

EXAMPLE = ROOT / "examples" / "shop"
TERMINAL = {"succeeded", "quarantined", "cancelled"}


async def test_the_shop_example_runs_its_own_job_types_through_the_real_system(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    cfg = make_settings(handlers="shop.jobs:registry", api_workers=2)
    token = await make_client(store, "shop")
    port = free_port()
    env = service_env(cfg, JOBRELAY_API_PORT=str(port))
    base = f"http://127.0.0.1:{port}"
    logs = tmp_path / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        services = {
            name: stack.enter_context(running(args, env, logs / f"{name}.log", cwd=EXAMPLE))
            for name, args in (
                ("api", ["api"]),
                ("dispatcher", ["dispatcher"]),
                ("consumer", ["consumer", "--concurrency", "4"]),
            )
        }
        await eventually(
            lambda: _up(base, services["api"]), within=60, what="the API's two workers"
        )
        async with httpx.AsyncClient(base_url=base, timeout=10) as api:

            async def submit(job_type: str, payload: dict[str, Any]) -> httpx.Response:
                return await api.post(
                    "/v1/jobs",
                    json={"type": job_type, "payload": payload},
                    headers=auth(token, uuid.uuid4().hex),
                )

            submitted = {
                name: await submit(job_type, payload)
                for name, job_type, payload in (
                    ("receipt", "shop.send_receipt", {"order_id": "A-1", "email": "a@shop.test"}),
                    ("invoice", "shop.render_invoice", {"order_id": "A-1", "lines": ["1 x tea"]}),
                    (
                        "charge",
                        "shop.charge",
                        {"order_id": "A-1", "amount_cents": 1250, "gateway_busy_for": 2},
                    ),
                    ("ship", "shop.ship", {"order_id": "A-1"}),
                    ("builtin", "catalog.export", {"course": "JavaScript"}),
                )
            }
            assert {name: r.status_code for name, r in submitted.items()} == dict.fromkeys(
                submitted, 202
            ), {name: r.text for name, r in submitted.items()}
            unknown = await submit("shop.refund", {})
            assert (unknown.status_code, unknown.json()["code"]) == (422, "unknown_job_type")
            invalid = await submit("shop.charge", {"order_id": "A-1", "amount_cents": -5})
            assert (invalid.status_code, invalid.json()["code"]) == (422, "invalid_payload")

            ids = {name: r.json()["id"] for name, r in submitted.items()}

            async def finished() -> dict[str, Any] | None:
                views = {}
                for name, job_id in ids.items():
                    view = (await api.get(f"/v1/jobs/{job_id}", headers=auth(token))).json()
                    if view["state"] not in TERMINAL:
                        return None
                    views[name] = view
                return views

            views = await eventually(finished, within=60, what="every shop job to finish")
        outputs = {name: service.output() for name, service in services.items()}
        trace = run_cli(env, "jobs", "trace", ids["ship"], cwd=EXAMPLE)

    assert {name: view["state"] for name, view in views.items()} == {
        "receipt": "succeeded",
        "invoice": "succeeded",
        "charge": "succeeded",
        "ship": "quarantined",
        "builtin": "succeeded",
    }
    assert views["receipt"]["result"] == {"message_id": f"receipt-jobrelay:{ids['receipt']}"}
    invoice = cfg.results_dir / views["invoice"]["result"]["key"]
    assert invoice.read_text().startswith("invoice for order A-1")
    # Busy twice, then charged: three attempts of the type's own five.
    charge = views["charge"]
    assert (charge["attempts"], charge["max_attempts"]) == (3, 5)
    # A success clears the earlier attempts' error from the view; the journal keeps it.
    assert (charge["last_error_code"], charge["last_error"]) == (None, None)
    # The owner reads the reason code and the message...
    ship = views["ship"]
    assert (ship["attempts"], ship["last_error_code"]) == (1, "address_missing")
    assert ship["last_error"] == "the order has no shipping address"
    # ...an operator the whole failure.
    assert trace.returncode == 0, trace.stderr
    assert "PermanentError: the order has no shipping address" in trace.stdout
    assert "Traceback (most recent call last)" in trace.stdout and "in ship" in trace.stdout

    # Each service said which types it knows (the API once per worker).
    for name in ("api", "consumer"):
        known = [
            json.loads(line)
            for line in outputs[name].splitlines()
            if line.startswith("{") and '"job_types"' in line
        ]
        assert len(known) == (2 if name == "api" else 1), outputs[name][-3000:]
        assert all("shop.charge" in line["types"] for line in known)
        assert all("catalog.export" in line["types"] for line in known)


async def _up(base: str, api: Any) -> bool:
    assert api.alive(), api.output()[-3000:]
    return answers(base + "/healthz")


def test_the_shop_example_image_adds_its_handlers_to_the_jobrelay_image() -> None:
    dockerfile = (EXAMPLE / "Dockerfile").read_text()
    assert "FROM jobrelay:latest" in dockerfile
    assert "COPY shop/ /app/shop/" in dockerfile
    assert "JOBRELAY_HANDLERS=shop.jobs:registry" in dockerfile


def test_a_service_whose_handlers_do_not_load_stops_at_start_saying_why(
    settings: Settings,
) -> None:
    env = service_env(settings)
    api = run_cli(env, "api", "--handlers", "shop.jobs:registry")  # not from examples/shop
    assert api.returncode == 1
    assert api.stderr.strip().splitlines() == [
        f"jobrelay: cannot import handlers module 'shop.jobs' (from {ROOT}): No module named 'shop'"
    ]
    consumer = run_cli(env | {"JOBRELAY_HANDLERS": "shop.jobs:registry"}, "consumer")
    assert consumer.returncode == 2
    assert "cannot import handlers module 'shop.jobs'" in consumer.stderr
    # From the example's folder, the same option loads.
    shown = run_cli(env, "jobs", "trace", str(uuid.uuid4()), cwd=EXAMPLE)
    assert (shown.returncode, shown.stderr.startswith("jobrelay: no job")) == (1, True)
