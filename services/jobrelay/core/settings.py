"""Settings from ``JOBRELAY_*`` environment variables, built once at each entry point."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBRELAY_", extra="ignore", frozen=True)

    database_url: str = "postgresql+psycopg://jobrelay:jobrelay@localhost:5432/jobrelay"
    amqp_url: str = "amqp://guest:guest@localhost:5672/"

    lease_seconds: float = Field(30.0, gt=0)
    max_attempts: int = Field(3, ge=1, le=1000)
    retry_base_seconds: float = Field(1.0, ge=0)
    retry_max_seconds: float = Field(300.0, ge=0)

    dispatch_batch_size: int = Field(200, ge=1, le=10_000)
    poll_interval_seconds: float = Field(1.0, gt=0)
    publish_timeout_seconds: float = Field(10.0, gt=0)
    # Finished jobs (succeeded, cancelled) are deleted this long after they finished, with
    # their results, journal and outbox rows; published outbox rows of live jobs too. It is
    # also how long an idempotency key stays taken.
    retention_hours: float = Field(168.0, gt=0)
    # Quarantined jobs wait for an operator: kept until replayed, unless this is set.
    quarantine_retention_hours: float | None = Field(None, gt=0)
    # Self-healing of lost messages (``jobrelay.dispatcher.housekeeping``): a job published
    # this long ago and never claimed, whose work queue is empty, is published again; 0 = off.
    redispatch_after_seconds: float = Field(300.0, ge=0)

    max_body_bytes: int = Field(65536, ge=1024)
    # The body of POST /v1/jobs/batch (up to 1,000 jobs) may be this large.
    max_batch_bytes: int = Field(4 * 1024 * 1024, ge=1024)
    api_host: str = "127.0.0.1"
    api_port: int = Field(8000, ge=0, le=65535)
    api_workers: int = Field(1, ge=1, le=64)
    db_pool_size: int = Field(10, ge=1, le=200)
    # A request that waits longer than this for a pooled connection answers 503
    # database_unavailable (with Retry-After) instead of queueing behind the others.
    db_pool_timeout_seconds: float = Field(2.0, gt=0)
    # Requests one API worker admits at once; the rest are shed at once with 503 overloaded and
    # Retry-After (docs/overload.md). Unset: sized from the pool; 0: never shed.
    api_max_concurrency: int | None = Field(None, ge=0, le=100_000)
    # Per-client submissions per second (a token bucket: this rate, bursts of ``burst``), shared
    # by every API process through PostgreSQL; a client row may set its own. Unset: no limit.
    rate_limit_per_second: float | None = Field(None, gt=0)
    rate_limit_burst: int | None = Field(None, ge=1, le=1_000_000)

    consumer_concurrency: int = Field(8, ge=1, le=1000)
    shutdown_grace_seconds: float = Field(30.0, ge=0)
    # Broker-side last guard; every requeue counts on RabbitMQ 3.10, so keep it far above
    # max_attempts (attempts are counted in PostgreSQL).
    delivery_limit: int = Field(50, ge=1)
    # "type=queue,type=queue": route a slow type to its own queue.
    type_queues: str = ""

    # "module:attribute,module:attribute": registries of job types, combined with the built-in
    # types unless builtins is false (``jobrelay.handlers.loading``).
    handlers: str = ""
    builtins: bool = True
    # A consumer that does not know a job's type puts it back; only once the type has stayed
    # unknown this long is the job quarantined (unknown_job_type).
    unknown_type_patience_seconds: float = Field(3600.0, ge=0)

    metrics_port: int = Field(0, ge=0, le=65535)
    results_dir: Path = Path("results")
    log_level: str = "INFO"

    @property
    def admitted_requests(self) -> int:
        """``api_max_concurrency``, or its default: twice the pool, so that while every
        connection runs a statement as many requests are parsed and answered around them, and
        no more wait (docs/overload.md has the measurement)."""
        if self.api_max_concurrency is not None:
            return self.api_max_concurrency
        return ADMITTED_PER_CONNECTION * self.db_pool_size

    @field_validator("database_url")
    @classmethod
    def _psycopg_url(cls, url: str) -> str:
        return normalize_database_url(url)


ADMITTED_PER_CONNECTION = 2

# The driver jobrelay ships with; the schemes people paste (Heroku, libpq, docker images) name
# the same database without it.
DATABASE_SCHEME = "postgresql+psycopg"
_DATABASE_SCHEMES = {"postgres", "postgresql", "postgresql+psycopg"}


def normalize_database_url(url: str) -> str:
    """``postgres://…`` and ``postgresql://…`` as ``postgresql+psycopg://…``; a URL of another
    database or driver is a ValueError that names the scheme only (never the password)."""
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in _DATABASE_SCHEMES:
        shown = scheme.lower() if sep else "none"
        raise ValueError(
            f"not a PostgreSQL URL (scheme {shown[:40]!r}); use postgresql+psycopg://, "
            "postgresql:// or postgres://USER:PASSWORD@HOST:PORT/DATABASE"
        )
    return f"{DATABASE_SCHEME}://{rest}"


def mask_url(url: str) -> str:
    """The URL with its password replaced, safe for logs and error messages."""
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def parse_type_queues(spec: str) -> dict[str, str]:
    """``"catalog.export=slow,demo.sleep=slow"`` → ``{"catalog.export": "slow", ...}``."""
    routes: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        job_type, sep, queue = item.partition("=")
        if not sep or not job_type.strip() or not queue.strip():
            raise ValueError(f"JOBRELAY_TYPE_QUEUES entry {item!r} is not type=queue")
        routes[job_type.strip()] = queue.strip()
    return routes
