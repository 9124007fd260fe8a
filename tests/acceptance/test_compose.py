"""compose.yaml and the Dockerfile, tested without a Docker engine.

The file is parsed and checked for what an operator relies on (one-shot migrate, health checks,
depends_on conditions, required passwords, loopback-only ports, stop grace periods, one build,
a scalable consumer, a non-root image); then every service's command runs with its compose
environment (interpolated as compose does) as a local process against the test servers —
hostnames and ports rewritten —, the dispatcher's and consumers' health checks run against
them, and a job goes through. tests/containers runs the same file under a real Docker Engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from jobrelay.core.settings import Settings
from tests.conftest import MakeSettings
from tests.support.processes import (
    ROOT,
    answers,
    free_port,
    run_cli,
    running,
    service_env,
    wait_for,
)

COMPOSE = ROOT / "compose.yaml"
DOCKERFILE = ROOT / "Dockerfile"
ENV_EXAMPLE = ROOT / ".env.example"
JOBRELAY_SERVICES = ("migrate", "api", "dispatcher", "consumer")
VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ``${VAR}``, ``${VAR:-default}`` and ``${VAR:?error}``."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if env.get(name):
            return env[name]
        if op == ":?":
            raise AssertionError(f"compose would refuse to start: {arg}")
        return arg if op == ":-" else ""

    return VARIABLE.sub(substitute, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def test_compose_declares_the_whole_system(compose: dict[str, Any]) -> None:
    assert "name" not in compose  # docker-compose 1.29 rejects a top-level name
    services = compose["services"]
    default = {name for name, service in services.items() if "profiles" not in service}
    assert default == {"preflight", "postgres", "rabbitmq", *JOBRELAY_SERVICES}
    profiled = {name: service.get("profiles") for name, service in services.items()}
    assert {name for name, profiles in profiled.items() if profiles == ["cluster"]} == {
        "rabbitmq-2",
        "rabbitmq-3",
        "rabbitmq-cluster",
    }  # docs/cluster.md
    assert services["rabbitmq"]["image"].endswith("-management}")
    for name in ("postgres", "rabbitmq", "api", "dispatcher", "consumer"):
        assert services[name]["healthcheck"]["test"], name
    for name, service in services.items():
        assert service.get("stop_grace_period"), name
    assert services["migrate"]["command"] == ["jobrelay", "migrate", "--wait", "60"]
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "dispatcher", "consumer"):
        depends = services[name]["depends_on"]
        assert depends["migrate"]["condition"] == "service_completed_successfully", name
        assert depends["rabbitmq"]["condition"] == "service_healthy", name
        # So that `stop` stops the service before the database.
        assert depends["postgres"]["condition"] == "service_healthy", name
        assert services[name]["command"][:2] == ["jobrelay", name]


def test_compose_images_are_variables_and_jobrelay_is_built_once(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert services["postgres"]["image"] == "${JOBRELAY_POSTGRES_IMAGE:-postgres:15}"
    assert services["rabbitmq"]["image"] == "${JOBRELAY_RABBITMQ_IMAGE:-rabbitmq:3.10-management}"
    built = [name for name, service in services.items() if "build" in service]
    assert built == ["etcd", "postgres-ha-1", "postgres-ha-2", "migrate"]
    # The ha profile's image, one for its three services; the jobrelay image by `migrate` only
    # (every other jobrelay service depends on it).
    assert len({str(services[name]["build"]) for name in built[:3]}) == 1
    args = services["migrate"]["build"]["args"]
    assert args["PYTHON_IMAGE"] == "${PYTHON_IMAGE:-python:3.11-slim}"
    images = {services[name]["image"] for name in JOBRELAY_SERVICES}
    assert len(images) == 1


def test_compose_requires_passwords_and_binds_to_loopback(compose: dict[str, Any]) -> None:
    text = COMPOSE.read_text()
    required = set(re.findall(r"\$\{(\w+):\?", text))
    assert {"POSTGRES_PASSWORD", "RABBITMQ_PASSWORD"} <= required
    assert "jobrelay}@" not in text  # no default password anywhere
    example = ENV_EXAMPLE.read_text()
    for name in required:
        assert re.search(rf"^{name}=\S+", example, re.M), f".env.example lacks {name}"
    services = compose["services"]
    assert services["rabbitmq"]["hostname"] == "rabbitmq"  # node name and data survive
    (ui,) = services["rabbitmq"]["ports"]
    assert ui.startswith("127.0.0.1:") and ui.endswith(":15672")
    (api,) = services["api"]["ports"]
    assert interpolate(api, {}) == "127.0.0.1:8000:8000"
    assert "readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "-h" in services["postgres"]["healthcheck"]["test"]  # pg_isready over TCP


def test_the_ha_profile_points_the_services_at_both_patroni_nodes(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    ha = {name for name, service in services.items() if service.get("profiles") == ["ha"]}
    assert ha == {"etcd", "postgres-ha-1", "postgres-ha-2"}  # docs/containers.md
    for name in ha:
        assert services[name]["healthcheck"]["test"], name
    url = services["api"]["environment"]["JOBRELAY_DATABASE_URL"]
    default = interpolate(url, COMPOSE_VARIABLES)
    assert default == "postgresql+psycopg://jobrelay:unused-here@postgres:5432/jobrelay"
    example = dict(re.findall(r"^#?(JOBRELAY_DATABASE_\w+)=(\S+)", ENV_EXAMPLE.read_text(), re.M))
    multi_host = interpolate(url, {**COMPOSE_VARIABLES, **example})
    assert multi_host == (
        "postgresql+psycopg://jobrelay:unused-here@postgres-ha-1:5432,postgres-ha-2:5432"
        "/jobrelay?target_session_attrs=read-write"
    )
    Settings(database_url=multi_host)  # the services take it (several hosts, libpq's way)


def test_the_consumer_can_be_scaled(compose: dict[str, Any]) -> None:
    consumer = compose["services"]["consumer"]
    assert "container_name" not in consumer
    assert "ports" not in consumer  # a fixed host port would collide at --scale consumer=2


def test_the_image_is_slim_and_runs_as_a_non_root_user() -> None:
    lines = [line.strip() for line in DOCKERFILE.read_text().splitlines()]
    assert "ARG PYTHON_IMAGE=python:3.11-slim" in lines
    assert all(
        line.startswith("FROM ${PYTHON_IMAGE}") for line in lines if line.startswith("FROM ")
    )
    users = [line.split()[1] for line in lines if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0")
    assert 'CMD ["jobrelay", "api"]' in lines
    # The locked dependencies in a layer built from the lock alone, before the sources.
    text = DOCKERFILE.read_text()
    assert "--require-hashes" in text
    assert text.index("COPY requirements/runtime.txt") < text.index("COPY services")
    assert "--mount" not in text and "# syntax" not in text  # the classic builder builds it


COMPOSE_VARIABLES = {"POSTGRES_PASSWORD": "unused-here", "RABBITMQ_PASSWORD": "unused-here"}


def compose_environment(
    service: dict[str, Any], variables: dict[str, str] = COMPOSE_VARIABLES
) -> dict[str, str]:
    """The service's environment as compose gives it, with ``variables`` as .env: a key listed
    without a value takes the variable of its name, and is left out when that is not set."""
    environment = {}
    for key, value in (service.get("environment") or {}).items():
        if value is None:
            if key in variables:
                environment[key] = variables[key]
        else:
            environment[key] = interpolate(str(value), variables)
    return environment


# Settings compose sets itself, for they point at its containers, volume and health checks;
# .env changes the database and broker through the passwords and the ha/cluster variables.
SET_BY_COMPOSE = {
    "database_url",
    "amqp_url",
    "results_dir",
    "api_host",
    "api_port",
    "metrics_port",
}


def test_every_setting_in_env_reaches_every_jobrelay_service(compose: dict[str, Any]) -> None:
    services = compose["services"]
    not_fixed = {f"JOBRELAY_{name.upper()}" for name in set(Settings.model_fields) - SET_BY_COMPOSE}
    for name in JOBRELAY_SERVICES:
        service = services[name]
        # The whole of .env (or JOBRELAY_ENV_FILE) is the service's environment ...
        assert service["env_file"] == "${JOBRELAY_ENV_FILE:-.env}", name
        assert interpolate(service["env_file"], {}) == ".env"
        # ... and what compose sets on top of it (which wins) is only what points at its own
        # containers, or a default that .env still overrides.
        for key in not_fixed & set(service.get("environment") or {}):
            dot_env = COMPOSE_VARIABLES | {key: "from-dot-env"}
            assert compose_environment(service, dot_env)[key] == "from-dot-env", (name, key)
        # No key listed without a value: Docker would unset it, and with it the ENV of an image
        # built FROM jobrelay (JOBRELAY_HANDLERS, docs/containers.md).
        assert None not in (service.get("environment") or {}).values(), name
    assert services["consumer"]["command"] == ["jobrelay", "consumer"]  # no option overrides it


def preflight(
    compose: dict[str, Any], variables: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """The ``preflight`` service's check, run by ``sh`` here with ``variables`` as .env."""
    service = compose["services"]["preflight"]
    shell, flag, script = service["entrypoint"]
    environment = compose_environment(service, variables)
    return subprocess.run(
        [shell, flag, script.replace("$$", "$")],  # compose's escape of a literal $
        env={"PATH": os.environ["PATH"], **environment},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_compose_refuses_the_placeholder_passwords_of_env_example(compose: dict[str, Any]) -> None:
    placeholders = dict(re.findall(r"^#?(\w+_PASSWORD)=(\S+)", ENV_EXAMPLE.read_text(), re.M))
    assert {"POSTGRES_PASSWORD", "RABBITMQ_PASSWORD"} <= set(placeholders)
    own = {name: secrets.token_hex(12) for name in placeholders}
    accepted = preflight(compose, own)
    assert (accepted.returncode, accepted.stdout + accepted.stderr) == (0, "")
    for name, placeholder in placeholders.items():
        refused = preflight(compose, own | {name: placeholder})
        assert refused.returncode != 0, name
        (line,) = refused.stderr.splitlines()
        assert name in line and ".env" in line, line
        assert placeholder not in refused.stdout + refused.stderr  # never the password itself

    # No server, hence no service, starts before the check has passed.
    services = compose["services"]
    for name in ("postgres", "rabbitmq", "etcd"):
        condition = services[name]["depends_on"]["preflight"]["condition"]
        assert condition == "service_completed_successfully", name
    for name in services:
        if name != "preflight":
            assert "preflight" in dependencies(services, name), name


def dependencies(services: dict[str, Any], name: str) -> set[str]:
    """Every service ``name`` waits for, directly or through another."""
    direct = set(services[name].get("depends_on") or {})
    return direct.union(*(dependencies(services, other) for other in direct))


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
    compose: dict[str, Any], make_settings: MakeSettings, tmp_path: Path
) -> None:
    services = compose["services"]
    system = make_settings()

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

        # The dispatcher's and consumers' health checks, against these processes.
        for label, service, ports in processes[1:]:
            check = service["healthcheck"]["test"]
            assert check[:3] == ["CMD", "jobrelay", "healthcheck"], check
            env = local_environment(compose_environment(service), system, **ports)
            verdict = run_cli(env, *check[2:], timeout=60)
            assert verdict.returncode == 0, (label, verdict.stdout, verdict.stderr)
            assert verdict.stdout.startswith("healthy: metrics ok, database ok, broker ok")

    assert done["result"]["key"] == f"reports/{job['id']}.csv"
    assert (system.results_dir / done["result"]["key"]).stat().st_size == done["result"]["size"]
