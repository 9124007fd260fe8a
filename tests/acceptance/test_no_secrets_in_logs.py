"""No token, password or payload ever reaches a log line.

The services run with a sentinel PostgreSQL password and a sentinel RabbitMQ password; jobs
carry a sentinel payload; the database restarts and the broker drops every connection along
the way, so the error and reconnect paths log too. Then everything the processes printed is
searched for the sentinels.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
import uuid
from pathlib import Path

import httpx
import psycopg
import pytest

from jobrelay.core.errors import StoreUnavailable
from jobrelay.core.settings import Settings
from jobrelay.db.engine import libpq_url
from jobrelay.db.store import Store
from tests.conftest import MakeSettings, auth, make_client
from tests.support import faults
from tests.support.processes import running, service_env
from tests.support.servers import Servers, management_request
from tests.support.system import eventually, free_port, running_system

DB_PASSWORD = "pg-SENTINEL-4f9c1d"
AMQP_PASSWORD = "mq-SENTINEL-8b2e7a"
PAYLOAD = "payload-SENTINEL-c3d5e9"


@pytest.fixture
def sentinel_settings(
    make_settings: MakeSettings, servers: Servers, amqp_url: str, database_url: str
) -> Settings:
    role = f"sentinel_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(libpq_url(servers.database_url), autocommit=True) as connection:
        connection.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD '{DB_PASSWORD}'")  # type: ignore[arg-type]
    vhost = urllib.parse.unquote(urllib.parse.urlsplit(amqp_url).path.lstrip("/"))
    management_request(
        servers.rabbitmq_api_url,
        "PUT",
        f"/api/users/{role}",
        {"password": AMQP_PASSWORD, "tags": ""},
    )
    management_request(
        servers.rabbitmq_api_url,
        "PUT",
        f"/api/permissions/{urllib.parse.quote(vhost, safe='')}/{role}",
        {"configure": ".*", "write": ".*", "read": ".*"},
    )
    db = urllib.parse.urlsplit(database_url)
    amqp = urllib.parse.urlsplit(amqp_url)
    return make_settings(
        amqp_url=f"amqp://{role}:{AMQP_PASSWORD}@{amqp.hostname}:{amqp.port}{amqp.path}",
        database_url=f"postgresql+psycopg://{role}:{DB_PASSWORD}@{db.hostname}:{db.port}{db.path}",
        log_level="DEBUG",
    )


async def test_no_password_token_or_payload_reaches_the_logs(
    sentinel_settings: Settings, store: Store, tmp_path: Path
) -> None:
    token = await make_client(store, "sentinel-client")
    jobs: list[str] = []
    port = free_port()
    api_env = service_env(sentinel_settings, JOBRELAY_API_PORT=str(port))
    with (
        running_system(sentinel_settings, tmp_path / "logs") as services,
        running(["api"], api_env, tmp_path / "logs" / "api.log") as api_process,
    ):
        services.append(api_process)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as api:
            await eventually(lambda: _answers(api), what="the API")
            for body in (
                {"type": "catalog.export", "payload": {"course": PAYLOAD}},
                {"type": "demo.fail", "payload": {"mode": "transient", "times": 1}},
                {"type": "demo.fail", "payload": {"mode": "permanent", "times": 1}},
            ):
                response = await api.post(
                    "/v1/jobs", json=body, headers=auth(token, uuid.uuid4().hex)
                )
                assert response.status_code == 202
                jobs.append(response.json()["id"])
            rejected = await api.post(
                "/v1/jobs",
                json={"type": "demo.sleep", "payload": {"seconds": PAYLOAD}},
                headers=auth(token, "k"),
            )
            assert rejected.status_code == 422 and PAYLOAD not in rejected.text
            assert (await api.get("/v1/jobs", headers=auth(f"jr_{PAYLOAD}"))).status_code == 401

            await _all_finished(store, jobs)
            faults.pg_restart()
            faults.close_all_broker_connections()
            # The restart may still be in progress: a client retries with the same key.
            key = uuid.uuid4().hex
            body = {"type": "catalog.export", "payload": {"course": PAYLOAD}}
            for _ in range(50):
                more = await api.post("/v1/jobs", json=body, headers=auth(token, key))
                if more.status_code != 503:
                    break
                await asyncio.sleep(0.2)
            assert more.status_code == 202, more.text
            jobs.append(more.json()["id"])
            await _all_finished(store, jobs)
        outputs = {service.args[0]: service.output() for service in services}

    everything = "\n".join(outputs.values())
    assert len(everything) > 1000, "the services should have logged something"
    for secret in (DB_PASSWORD, AMQP_PASSWORD, token, PAYLOAD):
        for name, text in outputs.items():
            assert secret not in text, f"{secret!r} leaked into the {name} log"
    for line in everything.splitlines():
        if line.startswith("{"):
            json.loads(line)  # structured: every log line is one JSON object


async def _answers(api: httpx.AsyncClient) -> bool:
    try:
        return (await api.get("/healthz")).status_code == 200
    except httpx.TransportError:
        return False


async def _all_finished(store: Store, jobs: list[str]) -> None:
    async def finished() -> bool:
        for job_id in jobs:
            try:
                job = await store.get_job(uuid.UUID(job_id))
            except StoreUnavailable:
                return False
            if job is None or job.state.value not in ("succeeded", "quarantined"):
                return False
        return True

    await eventually(finished, within=60, what="every job to finish")
