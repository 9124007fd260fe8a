"""jobrelay: durable background jobs on a transactional outbox, PostgreSQL and RabbitMQ.

What a handler author needs is importable from here::

    from jobrelay import JobContext, PermanentError, Registry, TransientError

with ``configure``, which says what the definitions ``@registry.job`` returns enqueue through
(``jobrelay/configuration.py``): ``charge.enqueue(Charge(...))`` after
``jobrelay.configure(client=jobrelay.Client(url, token))``. So is the client of the HTTP API
(``jobrelay.client``), imported on first use, so that ``import jobrelay`` does not load
httpx::

    from jobrelay import ApiError, AsyncClient, Client, IdempotencyConflict, Job

and the transactional enqueue (``jobrelay.transactional``), for applications that share
jobrelay's database: a job written inside the caller's own transaction, also imported on
first use::

    from jobrelay import TypeNotAllowed, UnknownClient, enqueue, enqueue_async

and workflows, graphs of jobs that wait for one another (docs/workflows.md), built with
``Workflow`` and submitted with ``Client.submit_workflow`` or, in the caller's transaction,
``enqueue_workflow`` / ``enqueue_workflow_async``::

    from jobrelay import Workflow, enqueue_workflow

and what a durable handler's calls raise (docs/durable-execution.md)::

    from jobrelay import ChildFailed, SignalTimeout

and the context of a batch handler, which takes many jobs in one call (docs/batch-handlers.md)::

    from jobrelay import BatchContext

with ``jobrelay.libpq_url``, which turns ``JOBRELAY_DATABASE_URL`` (in any form it accepts,
``postgresql+psycopg://`` too) into the URL ``psycopg.connect`` takes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from jobrelay.configuration import configure
from jobrelay.core.batches import BatchContext
from jobrelay.core.durable import ChildFailed, SignalTimeout
from jobrelay.core.errors import PermanentError, TransientError
from jobrelay.core.registry import JobContext, Registry
from jobrelay.core.workflows import Workflow

if TYPE_CHECKING:
    from jobrelay.client import ApiError, AsyncClient, Client, IdempotencyConflict, Job
    from jobrelay.transactional import (
        TypeNotAllowed,
        UnknownClient,
        enqueue,
        enqueue_async,
        enqueue_workflow,
        enqueue_workflow_async,
        libpq_url,
    )

_CLIENT_NAMES = frozenset({"ApiError", "AsyncClient", "Client", "IdempotencyConflict", "Job"})
_ENQUEUE_NAMES = frozenset(
    {
        "TypeNotAllowed",
        "UnknownClient",
        "enqueue",
        "enqueue_async",
        "enqueue_workflow",
        "enqueue_workflow_async",
        "libpq_url",
    }
)

__all__ = [
    "ApiError",
    "AsyncClient",
    "BatchContext",
    "ChildFailed",
    "Client",
    "IdempotencyConflict",
    "Job",
    "JobContext",
    "PermanentError",
    "Registry",
    "SignalTimeout",
    "TransientError",
    "TypeNotAllowed",
    "UnknownClient",
    "Workflow",
    "configure",
    "enqueue",
    "enqueue_async",
    "enqueue_workflow",
    "enqueue_workflow_async",
    "libpq_url",
]


def __getattr__(name: str) -> Any:
    if name in _CLIENT_NAMES:
        from jobrelay import client

        return getattr(client, name)
    if name in _ENQUEUE_NAMES:
        from jobrelay import transactional

        return getattr(transactional, name)
    raise AttributeError(f"module 'jobrelay' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _CLIENT_NAMES | _ENQUEUE_NAMES)
