"""Settings from ``JOBRELAY_*`` environment variables, built once at each entry point."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from jobrelay.core import database_url as db_urls
from jobrelay.core.bounds import DEFAULT_MAX_ATTEMPTS, MAX_ATTEMPTS_MAX

# The schema every statement of db/sql/*.sql names literally (``FROM jobrelay.jobs``); another
# ``JOBRELAY_DATABASE_SCHEMA`` is put in its place where statements run (db/schema.py).
DEFAULT_SCHEMA = "jobrelay"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="JOBRELAY_", extra="ignore", frozen=True)

    database_url: str = "postgresql+psycopg://jobrelay:jobrelay@localhost:5432/jobrelay"
    # How the database is reached (docs/pgbouncer.md): "session" (the server itself, or a
    # pooler in session mode) or "transaction" (PgBouncer's transaction pooling: no session
    # state outlives a transaction, so no server-side prepared statements, and LISTEN only on
    # ``listen_database_url``). "auto" (unset): one connection at start finds out whether a
    # pooler answers (db/pooler.py) and takes "transaction" if one does, "session" if not;
    # the other values are taken as they are, with no probe.
    database_pool_mode: Literal["auto", "session", "transaction"] = "auto"
    # A direct connection (same URL forms) for LISTEN, which needs a session. Unset: LISTEN on
    # ``database_url`` in session mode; polling in transaction mode (said once in the log).
    listen_database_url: str | None = None
    # The schema that holds every object jobrelay creates (docs/configuration.md): its tables,
    # functions and its own migration version table, never ``public``.
    database_schema: str = DEFAULT_SCHEMA
    # One broker URL, or the nodes of one RabbitMQ cluster separated by commas: each service
    # connects to the first that answers and moves to another when it loses it (docs/cluster.md).
    amqp_url: str = "amqp://guest:guest@localhost:5672/"
    # Replicas of each quorum queue jobrelay creates (x-quorum-initial-group-size). Unset: the
    # broker's default, a replica on every node of the cluster (docs/cluster.md).
    quorum_group_size: int | None = Field(None, ge=1, le=99)

    lease_seconds: float = Field(30.0, gt=0)
    # A job type's default attempt budget; at most what one submission may ask for.
    max_attempts: int = Field(DEFAULT_MAX_ATTEMPTS, ge=1, le=MAX_ATTEMPTS_MAX)
    retry_base_seconds: float = Field(1.0, ge=0)
    retry_max_seconds: float = Field(300.0, ge=0)

    dispatch_batch_size: int = Field(200, ge=1, le=10_000)
    # Per work queue, at most this many messages published and not yet claimed; the rest wait
    # in the outbox, due but unpublished, and are published in flow order (docs/flow-control.md).
    # 0: no window, every due row is published at once (priorities and fairness then only
    # order each batch).
    relay_window: int = Field(500, ge=0, le=1_000_000)
    poll_interval_seconds: float = Field(1.0, gt=0)
    publish_timeout_seconds: float = Field(10.0, gt=0)
    # Finished jobs (succeeded, cancelled) are deleted this long after they finished, with
    # their results, journal and outbox rows; published outbox rows of live jobs too. It is
    # also how long an idempotency key stays taken.
    retention_hours: float = Field(168.0, gt=0)
    # Quarantined jobs wait for an operator: kept until replayed, unless this is set.
    quarantine_retention_hours: float | None = Field(None, gt=0)
    # Self-healing of lost messages (``jobrelay.dispatcher.healing``): a job published
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
    # Past those, a request waits its turn; it is shed only when it would wait longer than this
    # before being handled (SPEC section 19, docs/overload.md). 0: shed as soon as all are busy.
    api_max_queue_seconds: float = Field(0.5, ge=0, le=60)
    # Per-client submissions per second (a token bucket: this rate, bursts of ``burst``), shared
    # by every API process through PostgreSQL; a client row may set its own. Unset: no limit.
    rate_limit_per_second: float | None = Field(None, gt=0)
    rate_limit_burst: int | None = Field(None, ge=1, le=1_000_000)

    consumer_concurrency: int = Field(8, ge=1, le=1000)
    # A job still running this long has its message acked, its lease alone holding it from
    # then on, so the broker's consumer_timeout (30 min by default, node-wide) never closes the
    # consumer's channel over it (docs/long-jobs.md). Keep it below that timeout;
    # 0: ack only once the outcome is stored.
    long_job_ack_seconds: float = Field(900.0, ge=0)
    shutdown_grace_seconds: float = Field(30.0, ge=0)
    # Broker-side last guard; every requeue counts on RabbitMQ 3.10, so keep it far above
    # max_attempts (attempts are counted in PostgreSQL).
    delivery_limit: int = Field(50, ge=1)
    # "type=queue,type=queue": route a slow type to its own queue.
    type_queues: str = ""

    # "module:attribute,module:attribute": registries of job types (``jobrelay.handlers.loading``).
    handlers: str = ""
    # The demo types (demo.*, catalog.export) beside them: off unless asked for (`make run` asks),
    # for any client could hold a consumer slot for an hour or write files with them.
    builtins: bool = False
    # A consumer that does not know a job's type puts it back; only once the type has stayed
    # unknown this long is the job quarantined (unknown_job_type).
    unknown_type_patience_seconds: float = Field(3600.0, ge=0)

    # The operator console (/ui/, docs/console.md): how long a sign-in lasts, and the key its
    # cookies and forms are signed with. Unset, the key is the database's own (console_keys,
    # made by migration 0006), shared by every API process; set, it must be the same on all.
    console_session_seconds: int = Field(8 * 3600, ge=60, le=30 * 86400)
    console_secret: SecretStr | None = Field(None, min_length=32)

    metrics_port: int = Field(0, ge=0, le=65535)
    results_dir: Path = Path("results")
    log_level: str = "INFO"

    @property
    def pool_mode(self) -> Literal["session", "transaction"]:
        """The mode the engines and the listeners follow: "auto" is "session" until the probe
        at start (``jobrelay.db.pooler.settle_pool_mode``) finds a pooler and says otherwise."""
        return "transaction" if self.database_pool_mode == "transaction" else "session"

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

    @field_validator("listen_database_url")
    @classmethod
    def _psycopg_listen_url(cls, url: str | None) -> str | None:
        return normalize_database_url(url) if url else None

    @field_validator("database_schema")
    @classmethod
    def _schema_name(cls, name: str) -> str:
        return validate_schema_name(name)

    @field_validator("amqp_url")
    @classmethod
    def _amqp_urls(cls, url: str) -> str:
        return ",".join(amqp_urls(url))


ADMITTED_PER_CONNECTION = 2

# Lower case only: an unquoted identifier, the same in SQL text, psql and the docs. Reserved
# prefixes (pg_) and ``public`` (where an application's own tables live) are refused.
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def validate_schema_name(name: str) -> str:
    """``name`` when it can be jobrelay's schema; a ValueError that says why otherwise."""
    if not _SCHEMA_NAME.fullmatch(name):
        raise ValueError(
            f"database schema {name!r} is not a lower-case SQL identifier "
            "(letters a-z, digits and _, not starting with a digit, at most 63)"
        )
    if name == "public" or name.startswith("pg_") or name == "information_schema":
        raise ValueError(
            f"database schema {name!r} is reserved: jobrelay needs a schema of its own"
        )
    return name


# The driver jobrelay ships with; the schemes people paste (Heroku, libpq, docker images) name
# the same database without it.
DATABASE_SCHEME = "postgresql+psycopg"
_DATABASE_SCHEMES = {"postgres", "postgresql", "postgresql+psycopg"}


def normalize_database_url(url: str) -> str:
    """The URL as SQLAlchemy takes it: ``postgres://…`` and ``postgresql://…`` as
    ``postgresql+psycopg://…``, and libpq's several hosts (``h1:5432,h2:5433``, a primary and
    its standbys) as ``?host=h1:5432&host=h2:5433`` (``jobrelay.core.database_url``; several
    hosts get ``target_session_attrs=read-write`` unless the URL says otherwise). A URL of
    another database or driver, or one whose hosts or ports do not parse, is a ValueError that
    names the fault only (never the password)."""
    return db_urls.sqlalchemy_form(_parsed(url)).render(DATABASE_SCHEME)


def _parsed(url: str) -> db_urls.DatabaseUrl:
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in _DATABASE_SCHEMES:
        shown = scheme.lower() if sep else "none"
        raise ValueError(
            f"not a PostgreSQL URL (scheme {shown[:40]!r}); use postgresql+psycopg://, "
            "postgresql:// or postgres://USER:PASSWORD@HOST:PORT[,HOST:PORT]/DATABASE"
        )
    return db_urls.read_write_by_default(db_urls.parse(rest))


def libpq_url(url: str) -> str:
    """The URL as psycopg and libpq take it (``postgresql://…``), from any form
    ``JOBRELAY_DATABASE_URL`` accepts: ``postgresql+psycopg://`` (SQLAlchemy's, the documented
    one), ``postgresql://`` or ``postgres://``. Public as ``jobrelay.libpq_url``, for
    ``psycopg.connect(jobrelay.libpq_url(os.environ["JOBRELAY_DATABASE_URL"]))`` before
    ``jobrelay.enqueue``; another database's URL is the ValueError of ``normalize_database_url``.
    Several hosts are written libpq's way, in the netloc (``u:p@h1:5432,h2:5433/db``)."""
    return db_urls.libpq_form(_parsed(url)).render("postgresql")


# The password of a URL: up to its "@", never past the "//" of the next URL in a list.
_URL_PASSWORD = re.compile(r"(//[^:/@]+:)(?:(?!//)[^@])*@")
# libpq also takes it as a query parameter: ``postgresql://u@h1,h2/db?password=…``.
_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&#\s]*")


def mask_url(url: str) -> str:
    """The URL (or each URL of a comma-separated list) with its password replaced, safe for
    logs and error messages; libpq's several hosts (``u:p@h1,h2/db``) and SQLAlchemy's
    (``u:p@/db?host=h1&host=h2``) alike."""
    return _QUERY_PASSWORD.sub(r"\1***", _URL_PASSWORD.sub(r"\1***@", url))


AMQP_SCHEMES = ("amqp", "amqps")


def amqp_urls(spec: str) -> list[str]:
    """The broker URLs of ``JOBRELAY_AMQP_URL``, in the order they are tried: one URL, or the
    nodes of one cluster separated by commas. Every entry must be an ``amqp://`` URL with a
    host, all of them on the same vhost and all with TLS or none (a list that would move a
    service to another vhost, or off TLS, is a mistake). Anything else is a ValueError that
    names the entry by its position, never the entry itself.

    A node without a user (``amqp://h2:5672/``) takes the user and password of the first URL:
    a cluster's users are the same on every node, and the password is written once."""
    entries = [entry.strip() for entry in spec.split(",")]
    if len(entries) == 1 and not entries[0]:
        raise ValueError(f"no broker URL; use {_AMQP_FORM}, or several separated by commas")
    vhosts: dict[str, int] = {}
    schemes: dict[str, int] = {}
    for position, entry in enumerate(entries, start=1):
        label = f"entry {position} of {len(entries)}" if len(entries) > 1 else "the URL"
        scheme, vhost = _amqp_parts(entry, label)
        vhosts.setdefault(vhost, position)
        schemes.setdefault(scheme, position)
    if len(vhosts) > 1:
        shown = ", ".join(f"{vhost!r} (entry {position})" for vhost, position in vhosts.items())
        raise ValueError(
            f"the broker URLs name different vhosts: {shown}; list the nodes of one cluster, "
            "on one vhost"
        )
    if len(schemes) > 1:
        raise ValueError(
            "the broker URLs mix amqp:// and amqps://: use TLS for every node or for none"
        )
    first = urllib.parse.urlsplit(entries[0]).netloc
    if "@" not in first:
        return entries
    userinfo = first.rpartition("@")[0]
    return [entries[0]] + [_with_userinfo(entry, userinfo) for entry in entries[1:]]


def _with_userinfo(entry: str, userinfo: str) -> str:
    """``entry`` with ``userinfo`` (``user:password``) unless it names a user of its own."""
    if "@" in urllib.parse.urlsplit(entry).netloc:
        return entry
    scheme, _, rest = entry.partition("://")
    return f"{scheme}://{userinfo}@{rest}"


_AMQP_FORM = "amqp://USER:PASSWORD@HOST:PORT/VHOST"


def _amqp_parts(entry: str, label: str) -> tuple[str, str]:
    """(scheme, vhost) of one broker URL, or a ValueError about it (password masked)."""
    if not entry:
        raise ValueError(f"{label} is empty (a stray comma?); use {_AMQP_FORM}")
    scheme, sep, _rest = entry.partition("://")
    if not sep or scheme.lower() not in AMQP_SCHEMES:
        shown = scheme.lower()[:40] if sep else "none"
        raise ValueError(
            f"{label} is not an AMQP URL (scheme {shown!r}); use {_AMQP_FORM} or amqps://"
        )
    # The entry itself is never shown: a password with a raw comma in it would be cut in two,
    # and half of it would not look like a password to mask_url.
    try:
        parts = urllib.parse.urlsplit(entry)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError:
        raise ValueError(
            f"{label} has an invalid host or port (a comma in a password is written %2C)"
        ) from None
    if not parts.hostname:
        raise ValueError(f"{label} names no host; use {_AMQP_FORM}")
    # As the AMQP client reads it: the path without its leading "/", or "/" when empty.
    return scheme.lower(), urllib.parse.unquote(parts.path[1:]) or "/"


def parse_type_queues(spec: str) -> dict[str, str]:
    """``"catalog.export=slow,demo.sleep=slow"`` → ``{"catalog.export": "slow", ...}``."""
    routes: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        job_type, sep, queue = item.partition("=")
        if not sep or not job_type.strip() or not queue.strip():
            raise ValueError(f"JOBRELAY_TYPE_QUEUES entry {item!r} is not type=queue")
        routes[job_type.strip()] = queue.strip()
    return routes
