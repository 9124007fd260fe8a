"""``jobrelay healthcheck``: the container health check of the dispatcher and the consumers.

With the service's own settings (the same ``JOBRELAY_*`` environment), it proves what the
service needs, not only that a port answers:

- the database: a connection with the service's URL and credentials, and jobrelay's schema in
  it (the ``outbox`` table);
- the broker: a connection with the service's URL, and jobrelay's topology on it (the exchange
  ``jobrelay.jobs`` that every service declares at start); with ``--queue``, that work queue
  exists and has at least one consumer attached;
- the service process itself: its metrics endpoint answers on 127.0.0.1, when
  ``JOBRELAY_METRICS_PORT`` is set.

Prints one line (``healthy: ...`` or ``unhealthy: ...``, passwords masked) and exits 0 or 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import Callable
from typing import Any

from jobrelay.core.settings import DEFAULT_SCHEMA, Settings, mask_url
from jobrelay.core.topology import JOBS_EXCHANGE, work_queue_name

EXAMPLE = "jobrelay healthcheck --queue default   (exit 0 healthy, 1 not)"


class Unhealthy(Exception):
    """One failed check, phrased for an operator (no secrets)."""


def check_database(url: str, timeout: float, schema: str = DEFAULT_SCHEMA) -> str:
    import psycopg

    from jobrelay.db.engine import libpq_url

    try:
        with psycopg.connect(
            libpq_url(url),
            connect_timeout=max(2, round(timeout)),
            application_name="jobrelay-healthcheck",
            autocommit=True,
        ) as connection:
            row = connection.execute(
                "SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.outbox",)
            ).fetchone()
    except Exception as error:
        raise Unhealthy(
            f"database unavailable at {mask_url(url)} ({type(error).__name__})"
        ) from None
    if not row or not row[0]:
        raise Unhealthy(
            f"database at {mask_url(url)} has no jobrelay tables in schema {schema} (run migrate)"
        )
    return "database ok"


async def _check_broker(url: str, queue: str | None, seconds: float) -> str:
    from jobrelay.broker.connection import connect_broker
    from jobrelay.core.errors import BrokerUnavailable

    try:
        connection = await connect_broker(url, seconds=seconds, name="jobrelay-healthcheck")
    except BrokerUnavailable as error:
        raise Unhealthy(str(error)) from None
    try:
        async with asyncio.timeout(seconds):
            channel = await connection.channel()
            try:
                await channel.get_exchange(JOBS_EXCHANGE, ensure=True)
            except Exception:
                raise Unhealthy(f"broker has no exchange {JOBS_EXCHANGE} yet") from None
            if queue is None:
                return "broker ok"
            name = work_queue_name(queue)
            channel = await connection.channel()
            try:
                declared = await channel.declare_queue(name, passive=True)
            except Exception:
                raise Unhealthy(f"broker has no queue {name} yet") from None
            result: Any = declared.declaration_result
            consumers = int(getattr(result, "consumer_count", 0) or 0)
            if consumers < 1:
                raise Unhealthy(f"no consumer on queue {name}")
            return f"broker ok ({name}: {consumers} consumers)"
    except TimeoutError:
        raise Unhealthy(f"broker at {mask_url(url)} did not answer in {seconds:g}s") from None
    finally:
        with contextlib.suppress(Exception):  # the verdict is already made
            async with asyncio.timeout(seconds):
                await connection.close()


def check_broker(amqp_url: str, queue: str | None, timeout: float) -> str:
    """Any node of a comma-separated list will do, as for the services."""
    failures: list[str] = []
    for url in [part.strip() for part in amqp_url.split(",") if part.strip()]:
        try:
            return asyncio.run(_check_broker(url, queue, timeout))
        except Unhealthy as error:
            failures.append(str(error))
    raise Unhealthy("; ".join(failures) or "no broker URL configured")


def check_metrics(port: int, timeout: float) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as answer:
            answer.read(1)
    except Exception as error:
        raise Unhealthy(
            f"the service's metrics endpoint 127.0.0.1:{port} does not answer "
            f"({type(error).__name__})"
        ) from None
    return "metrics ok"


def run_checks(settings: Settings, *, queue: str | None, timeout: float) -> tuple[bool, str]:
    checks: list[Callable[[], str]] = []
    if settings.metrics_port:
        checks.append(lambda: check_metrics(settings.metrics_port, timeout))
    checks.append(lambda: check_database(settings.database_url, timeout, settings.database_schema))
    checks.append(lambda: check_broker(settings.amqp_url, queue, timeout))
    passed: list[str] = []
    for check in checks:
        try:
            passed.append(check())
        except Unhealthy as error:
            return False, f"unhealthy: {error}"
    return True, "healthy: " + ", ".join(passed)
