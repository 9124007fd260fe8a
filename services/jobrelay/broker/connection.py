"""Open a broker connection, with every failure as ``BrokerUnavailable`` (passwords masked).

The one place that calls ``aio_pika``'s connections: the publisher, the dispatcher's
healing, the consumer, operations, ``/readyz`` and the healthcheck all connect through
``connect_broker`` or ``connect_broker_robust``, so a refused connection reads the same
everywhere: ``broker unavailable at <masked URL>: connection refused`` (``cause_of`` puts the
driver's error in words; the drivers' own log lines are debug lines, ``jobrelay/logs.py``).

``JOBRELAY_AMQP_URL`` may list the nodes of one RabbitMQ cluster (docs/cluster.md). A connection
goes to the first node of the list that answers, each tried in turn for up to ``seconds``: the
order is the operator's (put the nearest node first); and the queues jobrelay declares get their
leader on the node the declaring connection is on, so services that start together meet on the
same node as their queues' leaders. A robust connection that loses its node reconnects to the
next one of the list (``FailoverConnection``), wrapping around, so a node that just went away is
the last one tried again. A plain connection is reopened by its owner (the publisher, the
healing), through ``connect_broker`` again.

Nothing else changes in a move: a publish whose confirm did not come leaves its outbox row
unpublished, and a delivery whose ack was lost with the old connection comes again (a duplicate:
the consumer's lease and guarded finish keep its result single).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import aio_pika
import aiormq.exceptions
from aio_pika.abc import AbstractConnection, AbstractRobustConnection
from yarl import URL

from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.masking import Masker
from jobrelay.core.settings import amqp_urls, mask_url

Opened = TypeVar("Opened", bound=AbstractConnection)


async def connect_broker(
    url: str, *, seconds: float = 5.0, name: str | None = None
) -> AbstractConnection:
    """A plain connection to the first node of ``url`` (one URL or a comma-separated list)
    that opens within ``seconds``; raises ``BrokerUnavailable``."""
    properties = _client_properties(name)

    def plain(node: str) -> Awaitable[AbstractConnection]:
        return aio_pika.connect(node, timeout=seconds, client_properties=properties)

    return await _first_answering(plain, url, seconds)


async def connect_broker_robust(
    url: str, *, seconds: float = 10.0, name: str | None = None
) -> AbstractRobustConnection:
    """A robust connection to the first node of ``url`` that opens within ``seconds``: a
    later drop reconnects by itself, to the next node of the list. Raises
    ``BrokerUnavailable``."""
    nodes = amqp_urls(url)
    properties = _client_properties(name)

    async def robust(node: str) -> AbstractRobustConnection:
        start = nodes.index(node)
        connection = FailoverConnection(
            URL(node),
            nodes=[URL(other) for other in nodes[start:] + nodes[:start]],
            client_properties=properties,
        )
        try:
            await connection.connect(timeout=seconds)
        except BaseException:
            with contextlib.suppress(Exception):
                await connection.close()
            raise
        return connection

    return await _first_answering(robust, url, seconds)


class FailoverConnection(aio_pika.RobustConnection):
    """A robust connection over the nodes of one cluster: whenever its connection is lost, or
    an attempt to open one fails, the next attempt goes to the next node of ``nodes`` (the
    first of which is ``url``). aio-pika calls ``_on_connection_close`` in both cases, before
    it reconnects to ``self.url``; its channels, QoS, queues and consumers are restored on the
    new node as on the old."""

    def __init__(self, url: URL, *, nodes: Sequence[URL], **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self.nodes = list(nodes) or [self.url]
        self.node_index = 0

    async def _on_connection_close(self, closing: asyncio.Future[Any]) -> None:
        await super()._on_connection_close(closing)
        if self.close_called or self.is_closed:
            return  # closed by us: nothing reconnects
        self.node_index = (self.node_index + 1) % len(self.nodes)
        self.url = self.nodes[self.node_index]


async def _first_answering(
    connect: Callable[[str], Awaitable[Opened]], url: str, seconds: float
) -> Opened:
    """The connection to the first node that answers within ``seconds``, or
    ``BrokerUnavailable`` naming why each node did not."""
    try:
        nodes = amqp_urls(url)
    except ValueError as error:  # Settings validates it first; a caller's own URL may not be
        raise BrokerUnavailable(f"broker URL not usable: {error}") from None
    failures: list[tuple[str, BaseException]] = []
    for node in nodes:
        try:
            return await asyncio.wait_for(connect(node), seconds)
        except Exception as error:
            failures.append((node, error))
    if len(failures) == 1:
        raise unavailable(*failures[0], seconds=seconds)
    reasons = "; ".join(f"{mask_url(node)}: {cause_of(error, seconds)}" for node, error in failures)
    raise BrokerUnreachable(f"broker unavailable at every node ({reasons})", cause=reasons)


def _client_properties(name: str | None) -> dict[str, Any] | None:
    """Names the connection in the broker's management UI and ``rabbitmqctl``."""
    return {"connection_name": name} if name else None


class BrokerUnreachable(BrokerUnavailable):
    """No connection opened; ``cause`` says why in words (``cause_of``)."""

    def __init__(self, message: str, *, cause: str) -> None:
        super().__init__(message)
        self.cause = cause


def unavailable(
    url: str, error: BaseException, *, seconds: float | None = None
) -> BrokerUnavailable:
    """The error for a broker that could not be reached: the masked URL and why, in words."""
    cause = cause_of(error, seconds)
    return BrokerUnreachable(f"broker unavailable at {mask_url(url)}: {cause}", cause=cause)


def cause_of(error: BaseException, seconds: float | None = None) -> str:
    """Why a connection attempt failed, in an operator's words: "connection refused", "login
    refused", "no answer within 5s", ... (``seconds``: the attempt's timeout). The driver's
    own text only where no words are known, with any password masked."""
    if isinstance(error, BrokerUnreachable):
        return error.cause
    if isinstance(error, aiormq.exceptions.ProbableAuthenticationError):
        return "login refused (check the user and password of the broker URL)"
    if isinstance(error, TimeoutError):
        return "no answer" if seconds is None else f"no answer within {seconds:g}s"
    if isinstance(error, aiormq.exceptions.InvalidFrameError) and "Connection.Close" in str(error):
        return "the broker closed the connection while opening it (does the vhost exist?)"
    if isinstance(error, OSError) and isinstance(error.errno, int):
        if isinstance(error, socket.gaierror) or error.errno < 0:
            return f"host not found ({str(error.strerror).lower()})"
        return os.strerror(error.errno).lower()  # "connection refused", "no route to host", ...
    text = Masker()(str(error)).splitlines()[0][:200] if str(error) else ""
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
