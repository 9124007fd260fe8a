"""Broker names and queue arguments, as pure functions (docs/life-of-a-job.md).

Routing: the dispatcher publishes to the topic exchange ``jobrelay.jobs`` with the job type as
routing key. Every type has a quorum queue of its own, ``jobrelay.type.<type>``, bound by the
type's exact name: the dispatcher declares it before its first publish of the type, and every
consumer declares and takes the queues of the types it runs, so a consumer only ever receives
jobs it can run, and a job of a type nobody runs waits in its own queue, harming no other.

The queues of before stay as the safety net of a rolling upgrade: a type bound to none of the
above falls through to the exchange's alternate exchange ``jobrelay.jobs.unrouted`` (fanout),
which feeds ``jobrelay.jobs.default``, and JOBRELAY_TYPE_QUEUES' named queues keep their
bindings; consumers still take them and defer what they do not run (docs/job-types.md). Only
when the default queue's binding is missing is a message unroutable, and then the broker returns
it and the dispatcher records the error (``mandatory`` + ``on_return_raises``).

The work queues and the quarantine are quorum queues: on a cluster each has a replica on every
node (the broker's default) or on ``JOBRELAY_QUORUM_GROUP_SIZE`` nodes (docs/cluster.md).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

JOBS_EXCHANGE = "jobrelay.jobs"
UNROUTED_EXCHANGE = "jobrelay.jobs.unrouted"
QUARANTINE_EXCHANGE = "jobrelay.quarantine"
QUARANTINE_QUEUE = "jobrelay.quarantine"
DEFAULT_QUEUE = "jobrelay.jobs.default"
TYPE_QUEUE_PREFIX = "jobrelay.type."
# A queue name is at most 255 bytes; a longer type's queue is named by a digest of the type.
QUEUE_NAME_MAX_BYTES = 255
DEFAULT_QUEUE_NAME = "default"  # its short name, as ``--queue`` and the ``queues`` table say it
# How many nodes hold a replica of a new quorum queue. Set only at creation: RabbitMQ refuses a
# redeclaration with another value (or with none, or one where there was none).
GROUP_SIZE_ARGUMENT = "x-quorum-initial-group-size"


def work_queue_name(name: str) -> str:
    """``default`` → ``jobrelay.jobs.default``; a full ``jobrelay.jobs.*`` name, or a type's
    queue (``jobrelay.type.*``), is kept."""
    if name.startswith((f"{JOBS_EXCHANGE}.", TYPE_QUEUE_PREFIX)):
        return name
    return f"{JOBS_EXCHANGE}.{name}"


def type_queue_name(job_type: str) -> str:
    """The queue of one job type: ``shop.charge`` → ``jobrelay.type.shop.charge``."""
    name = f"{TYPE_QUEUE_PREFIX}{job_type}"
    if len(name.encode()) <= QUEUE_NAME_MAX_BYTES:
        return name
    return f"{TYPE_QUEUE_PREFIX}sha256.{hashlib.sha256(job_type.encode()).hexdigest()}"


def has_own_queue(job_type: str) -> bool:
    """Whether ``job_type`` gets a queue of its own. A topic binding reads ``*`` and ``#`` as
    wildcards, so a type named with them would take the messages of other types: its jobs go
    to the shared queue of before instead, whose consumers defer what they do not run."""
    return "*" not in job_type and "#" not in job_type


def queue_of(job_type: str, type_queues: Mapping[str, str]) -> str:
    """The logical work queue of ``job_type`` (the unit of ``--queue``, pauses and the relay
    window; JOBRELAY_TYPE_QUEUES, else ``default``), as its broker name."""
    queue = type_queues.get(job_type)
    return work_queue_name(queue) if queue else DEFAULT_QUEUE


def queue_short_name(name: str) -> str:
    """``jobrelay.jobs.slow`` → ``slow``; a short name is kept (the ``queues`` table's name)."""
    return name.removeprefix(f"{JOBS_EXCHANGE}.")


def jobs_exchange_arguments() -> dict[str, Any]:
    return {"alternate-exchange": UNROUTED_EXCHANGE}


def work_queue_arguments(delivery_limit: int, group_size: int | None = None) -> dict[str, Any]:
    return {
        "x-queue-type": "quorum",
        "x-dead-letter-exchange": QUARANTINE_EXCHANGE,
        # At-least-once dead-lettering: a dead-lettered message cannot vanish on the way.
        "x-dead-letter-strategy": "at-least-once",
        "x-overflow": "reject-publish",
        "x-delivery-limit": delivery_limit,
        **quorum_group(group_size),
    }


def quarantine_queue_arguments(group_size: int | None = None) -> dict[str, Any]:
    return {"x-queue-type": "quorum", **quorum_group(group_size)}


def quorum_group(group_size: int | None) -> dict[str, Any]:
    """The replica count of a new quorum queue; none (the broker's default: every node of the
    cluster) when unset."""
    return {} if group_size is None else {GROUP_SIZE_ARGUMENT: group_size}


def typed_queue_bindings(type_queues: dict[str, str]) -> dict[str, list[str]]:
    """Own queue name → the job types (routing keys) bound to it on ``jobrelay.jobs``."""
    routes: dict[str, list[str]] = {}
    for job_type, queue in sorted(type_queues.items()):
        routes.setdefault(work_queue_name(queue), []).append(job_type)
    return routes
