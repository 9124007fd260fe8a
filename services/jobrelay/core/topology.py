"""Broker names and queue arguments, as pure functions (docs/life-of-a-job.md).

Routing: the dispatcher publishes to the topic exchange ``jobrelay.jobs`` with the job type as
routing key. A type configured to run on its own queue is bound there by its exact name; every
other type falls through to the exchange's alternate exchange ``jobrelay.jobs.unrouted`` (fanout),
which feeds ``jobrelay.jobs.default``. So the default queue takes all types except the routed
ones, and a type without a handler anywhere still lands somewhere visible instead of being
dropped. Only when the default queue's binding is missing is a message unroutable, and then the
broker returns it and the dispatcher records the error (``mandatory`` + ``on_return_raises``).

The work queues and the quarantine are quorum queues: on a cluster each has a replica on every
node (the broker's default) or on ``JOBRELAY_QUORUM_GROUP_SIZE`` nodes (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

JOBS_EXCHANGE = "jobrelay.jobs"
UNROUTED_EXCHANGE = "jobrelay.jobs.unrouted"
QUARANTINE_EXCHANGE = "jobrelay.quarantine"
QUARANTINE_QUEUE = "jobrelay.quarantine"
DEFAULT_QUEUE = "jobrelay.jobs.default"
DEFAULT_QUEUE_NAME = "default"  # its short name, as ``--queue`` and the ``queues`` table say it
# How many nodes hold a replica of a new quorum queue. Set only at creation: RabbitMQ refuses a
# redeclaration with another value (or with none, or one where there was none).
GROUP_SIZE_ARGUMENT = "x-quorum-initial-group-size"


def work_queue_name(name: str) -> str:
    """``default`` → ``jobrelay.jobs.default``; a full ``jobrelay.jobs.*`` name is kept."""
    return name if name.startswith(f"{JOBS_EXCHANGE}.") else f"{JOBS_EXCHANGE}.{name}"


def queue_of(job_type: str, type_queues: dict[str, str]) -> str:
    """The work queue a job of ``job_type`` is routed to (see the module's docstring)."""
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
