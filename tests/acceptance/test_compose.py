"""compose.yaml and the Dockerfile, tested where no Docker engine exists.

The file is parsed and checked for what an operator relies on (one-shot migrate, health checks,
depends_on conditions, a scalable consumer, a non-root image); then every service's command
runs with its compose environment as a local process against the test servers — hostnames and
ports rewritten — and a job goes through them.
"""

from __future__ import annotations

import contextlib
import json
import re
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobrelay.core.settings import Settings
from tests.support.processes import (
    ROOT,
    answers,
    free_port,
    run_cli,
    running,
    service_env,
    wait_for,
)
from tests.support.system import fast_settings

COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
JOBRELAY_SERVICES = ("migrate", "api", "dispatcher", "consumer")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def test_compose_declares_the_whole_system(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == {"postgres", "rabbitmq", *JOBRELAY_SERVICES}
    assert services["rabbitmq"]["image"].endswith("-management")
    for name in ("postgres", "rabbitmq", "api", "dispatcher", "consumer"):
        assert services[name]["healthcheck"]["test"], name
    assert services["migrate"]["command"] == ["jobrelay", "migrate"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "dispatcher", "consumer"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["rabbitmq"]["condition"] == "service_healthy", name
        assert services[name]["command"][:2] == ["jobrelay", name]


def test_the_consumer_can_be_scaled(compose: dict[str, Any]) -> None:
    consumer = compose["services"]["consumer"]
    assert "container_name" not in consumer
    assert "ports" not in consumer  # a fixed host port would collide at --scale consumer=2


def test_the_image_is_slim_and_runs_as_a_non_root_user() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    assert any(re.match(r"FROM python:3\.1[1-9]-slim", line) for line in lines)
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert 'CMD ["jobrelay", "api"]' in lines


def compose_environment(service: dict[str, Any]) -> dict[str, str]:
    return {key: str(value) for key, value in (service.get("environment") or {}).items()}


def local_environment(
    compose_env: dict[str, str], settings: Settings, **ports: int
) -> dict[str, str]:
    """The compose environment with the servers' hostnames swapped for the test servers."""
    env = service_env(settings)
    for key, value in compose_env.items():
        if key in ("JOBRELAY_DATABASE_URL", "JOBRELAY_AMQP_URL", "JOBRELAY_RESULTS_DIR"):
            continue  # these point at containers and volumes: the test servers stand in
        env[key] = value
    for key, port in ports.items():
        env[key] = str(port)
    return env


def http(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


def test_every_compose_service_runs_locally_and_a_job_goes_through(
    compose: dict[str, Any], settings: Settings, amqp_url: str, tmp_path: Path
) -> None:
    services = compose["services"]
    system = fast_settings(settings, amqp_url)

    migrate = services["migrate"]
    result = run_cli(
        local_environment(compose_environment(migrate), system),
        *migrate["command"][1:],
        timeout=120,
    )
    assert result.returncode == 0, result.stderr

    created = run_cli(service_env(system), "clients", "create", "compose-test", "--json")
    token = json.loads(created.stdout)["token"]

    api_port = free_port()
    metrics = {name: free_port() for name in ("dispatcher", "consumer1", "consumer2")}
    processes = [
        ("api", services["api"], {"JOBRELAY_API_PORT": api_port}),
        ("dispatcher", services["dispatcher"], {"JOBRELAY_METRICS_PORT": metrics["dispatcher"]}),
        # --scale consumer=2
        ("consumer1", services["consumer"], {"JOBRELAY_METRICS_PORT": metrics["consumer1"]}),
        ("consumer2", services["consumer"], {"JOBRELAY_METRICS_PORT": metrics["consumer2"]}),
    ]
    with contextlib.ExitStack() as stack:
        running_services = {}
        for label, service, ports in processes:
            env = local_environment(compose_environment(service), system, **ports)
            env["JOBRELAY_API_HOST"] = "127.0.0.1"  # compose binds 0.0.0.0 inside a container
            running_services[label] = stack.enter_context(
                running(service["command"][1:], env, tmp_path / f"{label}.log")
            )
        base = f"http://127.0.0.1:{api_port}"
        wait_for(lambda: answers(base + "/healthz"), 30, what="the api health check")
        for label, port in metrics.items():
            wait_for(
                lambda p=port: answers(f"http://127.0.0.1:{p}/metrics"),
                30,
                what=f"the {label} health check",
            )

        job = http(
            "POST",
            base + "/v1/jobs",
            {"type": "catalog.export", "payload": {"course": "JavaScript"}},
            {
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": str(uuid.uuid4()),
                "Content-Type": "application/json",
            },
        )
        location = f"{base}/v1/jobs/{job['id']}"
        done = wait_for(
            lambda: (
                (view := http("GET", location, headers={"Authorization": f"Bearer {token}"}))
                and view["state"] == "succeeded"
                and view
            ),
            60,
            what="the job to succeed",
        )
        for label, service in running_services.items():
            assert service.alive(), (label, service.output()[-2000:])

    assert done["result"]["key"] == f"reports/{job['id']}.csv"
    assert (system.results_dir / done["result"]["key"]).stat().st_size == done["result"]["size"]
