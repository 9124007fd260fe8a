"""A new job type deployed by deploying consumers only (docs/job-types.md, "Registered types"):
the API runs as a process with the built-in types alone, the dispatcher and the consumer with
the shop example's handlers (``examples/shop``); the consumer registers them at start, and the
API accepts, refuses and lets run the shop's jobs it has no code for."""

from __future__ import annotations

import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth, make_client
from tests.support.processes import ROOT, answers, running, service_env
from tests.support.system import eventually, free_port

EXAMPLE = ROOT / "examples" / "shop"
RECEIPT = {"order_id": "A-1", "email": "a@shop.test"}


async def test_an_api_without_the_shops_code_accepts_and_runs_the_types_its_consumer_registered(
    make_settings: MakeSettings, store: Store, tmp_path: Path
) -> None:
    token = await make_client(store, "shop")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    shop = service_env(make_settings(handlers="shop.jobs:registry"))
    bare = service_env(make_settings(handlers=""), JOBRELAY_API_PORT=str(port))
    logs = tmp_path / "logs"
    logs.mkdir()
    with ExitStack() as stack:
        api_service = stack.enter_context(running(["api"], bare, logs / "api.log"))

        async def up() -> bool:
            assert api_service.alive(), api_service.output()[-3000:]
            return answers(base + "/healthz")

        await eventually(up, within=60, what="the API")
        async with httpx.AsyncClient(base_url=base, timeout=10) as api:

            async def submit(job_type: str, payload: dict[str, Any]) -> httpx.Response:
                return await api.post(
                    "/v1/jobs",
                    json={"type": job_type, "payload": payload},
                    headers=auth(token, uuid.uuid4().hex),
                )

            before = await submit("shop.send_receipt", RECEIPT)
            for name, args in (
                ("dispatcher", ["dispatcher"]),
                ("consumer", ["consumer", "--concurrency", "2"]),
            ):
                stack.enter_context(running(args, shop, logs / f"{name}.log", cwd=EXAMPLE))

            async def accepted() -> httpx.Response | None:
                answer = await submit("shop.send_receipt", RECEIPT)
                return answer if answer.status_code == 202 else None

            made = await eventually(accepted, within=60, what="the registered type accepted")
            invalid = await submit("shop.send_receipt", {"order_id": "A-1"})
            job_id = made.json()["id"]

            async def succeeded() -> bool:
                view = (await api.get(f"/v1/jobs/{job_id}", headers=auth(token))).json()
                return view["state"] == "succeeded"

            await eventually(succeeded, within=60, what="the shop's job to run")

    assert (before.status_code, before.json()["code"]) == (422, "unknown_job_type")
    assert (invalid.status_code, invalid.json()["code"]) == (422, "invalid_payload")
    assert [error["loc"] for error in invalid.json()["errors"]] == [["email"]]
