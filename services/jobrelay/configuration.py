"""``jobrelay.configure``: what a job definition's ``enqueue`` goes through
(``core/registry.py::JobDefinition``).

An application calls it once at start, as it configures logging::

    jobrelay.configure(
        client=jobrelay.Client(url, token),  # for charge.enqueue(...)
        async_client=jobrelay.AsyncClient(url, token),  # for await charge.enqueue_async(...)
        client_name="shop",  # for charge.enqueue(..., connection=conn), in your transaction
    )

(any of the three, or all). Each call replaces the whole configuration; ``configure()`` with
no argument removes it. The clients and ``jobrelay.enqueue`` are imported only when an enqueue
needs them, so ``import jobrelay`` loads neither httpx nor psycopg.
"""

from __future__ import annotations

import inspect
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Unpack

from jobrelay.core.jobs import PolicyOptions
from jobrelay.core.registry import (
    EnqueuedJob,
    EnqueueRequest,
    install_enqueuer,
    not_configured,
)
from jobrelay.core.settings import DEFAULT_SCHEMA, validate_schema_name


class SubmitsJobs(Protocol):
    """What ``configure(client=...)`` takes: a ``jobrelay.Client`` (or the testing kit's
    recorder)."""

    def submit(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> EnqueuedJob: ...


class SubmitsJobsAsync(Protocol):
    """What ``configure(async_client=...)`` takes: a ``jobrelay.AsyncClient``."""

    async def submit(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        key: str | None = None,
        run_at: datetime | None = None,
        priority: int | None = None,
        **policies: Unpack[PolicyOptions],
    ) -> EnqueuedJob: ...


@dataclass(frozen=True)
class Configuration:
    """The ``Enqueuer`` ``configure`` installs: a request without a connection goes to the
    client, one with a connection to ``jobrelay.enqueue`` as ``client_name``."""

    client: SubmitsJobs | None = None
    async_client: SubmitsJobsAsync | None = None
    client_name: str | uuid.UUID | None = None
    # jobrelay's schema in the application's database (JOBRELAY_DATABASE_SCHEMA).
    schema: str = DEFAULT_SCHEMA

    def enqueue(self, request: EnqueueRequest) -> EnqueuedJob:
        if request.connection is not None:
            from jobrelay import transactional

            return transactional.enqueue(
                request.connection,  # type: ignore[arg-type]  # its own TypeError names the kinds
                client=self._client_name(request),
                type=request.type,
                payload=request.payload,
                key=request.key,
                run_at=request.run_at,
                priority=request.priority,
                registry=request.registry,
                schema=self.schema,
                **request.policies,
            )
        if self.client is None:
            raise not_configured(request.type, is_async=False, in_transaction=False)
        return self.client.submit(
            request.type,
            request.payload,
            key=request.key,
            run_at=request.run_at,
            priority=request.priority,
            **request.policies,
        )

    async def enqueue_async(self, request: EnqueueRequest) -> EnqueuedJob:
        if request.connection is not None:
            from jobrelay import transactional

            return await transactional.enqueue_async(
                request.connection,  # type: ignore[arg-type]  # its own TypeError names the kinds
                client=self._client_name(request),
                type=request.type,
                payload=request.payload,
                key=request.key,
                run_at=request.run_at,
                priority=request.priority,
                registry=request.registry,
                schema=self.schema,
                **request.policies,
            )
        if self.async_client is None:
            raise not_configured(request.type, is_async=True, in_transaction=False)
        return await self.async_client.submit(
            request.type,
            request.payload,
            key=request.key,
            run_at=request.run_at,
            priority=request.priority,
            **request.policies,
        )

    def _client_name(self, request: EnqueueRequest) -> str | uuid.UUID:
        if self.client_name is None:
            raise not_configured(request.type, is_async=False, in_transaction=True)
        return self.client_name


def configure(
    *,
    client: SubmitsJobs | None = None,
    async_client: SubmitsJobsAsync | None = None,
    client_name: str | uuid.UUID | None = None,
    schema: str = DEFAULT_SCHEMA,
) -> None:
    """Set what every ``JobDefinition.enqueue`` goes through (see the module's documentation).
    ``client``: a ``jobrelay.Client``, for ``enqueue``; ``async_client``: a
    ``jobrelay.AsyncClient``, for ``enqueue_async``; ``client_name``: the jobrelay client (its
    name or id) that owns the jobs enqueued with ``connection=``; ``schema``: jobrelay's schema
    for those (``JOBRELAY_DATABASE_SCHEMA`` when not ``jobrelay``; ``ValueError`` for a name that
    is not a plain identifier). The clients are used as they are: closing them is the
    application's. ``TypeError`` for a client of the wrong kind."""
    _check_client("client", client, is_async=False)
    _check_client("async_client", async_client, is_async=True)
    if client_name is not None and not isinstance(client_name, str | uuid.UUID):
        raise TypeError(
            f"client_name is a jobrelay client's name or id, not {type(client_name).__name__}"
        )
    validate_schema_name(schema)
    configured = client is not None or async_client is not None or client_name is not None
    install_enqueuer(
        Configuration(client, async_client, client_name, schema) if configured else None
    )


def _check_client(option: str, client: object, *, is_async: bool) -> None:
    if client is None:
        return
    submit = getattr(client, "submit", None)
    if not callable(submit):
        raise TypeError(f"{option} must have a submit method (a jobrelay client), not {client!r}")
    if inspect.iscoroutinefunction(submit) != is_async:
        kind, other = ("not async", "client") if is_async else ("async", "async_client")
        raise TypeError(
            f"{option}: the submit of {type(client).__name__} is {kind}: pass it as {other}="
        )
