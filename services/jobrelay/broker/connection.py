"""Open a broker connection, with every failure as ``BrokerUnavailable`` (password masked).

The one place that calls ``aio_pika.connect``/``connect_robust``: the publisher, the
dispatcher's housekeeping, the consumer, operations, ``/readyz`` and the healthcheck all connect
through ``connect_broker``, so a refused connection reads the same everywhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import aio_pika
from aio_pika.abc import AbstractConnection, AbstractRobustConnection

from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.settings import mask_url

Opened = TypeVar("Opened", bound=AbstractConnection)


async def connect_broker(
    url: str, *, seconds: float = 5.0, name: str | None = None
) -> AbstractConnection:
    """A plain connection, opened within ``seconds``; raises ``BrokerUnavailable``."""
    return await _open(aio_pika.connect, url, seconds, name)


async def connect_broker_robust(
    url: str, *, seconds: float = 10.0, name: str | None = None
) -> AbstractRobustConnection:
    """A robust connection (later drops reconnect by themselves), opened within
    ``seconds``; raises ``BrokerUnavailable``."""
    return await _open(aio_pika.connect_robust, url, seconds, name)


async def _open(
    connect: Callable[..., Awaitable[Opened]], url: str, seconds: float, name: str | None
) -> Opened:
    try:
        return await asyncio.wait_for(
            connect(url, timeout=seconds, client_properties=_client_properties(name)), seconds
        )
    except Exception as error:
        raise unavailable(url, error) from None


def _client_properties(name: str | None) -> dict[str, Any] | None:
    """Names the connection in the broker's management UI and ``rabbitmqctl``."""
    return {"connection_name": name} if name else None


def unavailable(url: str, error: BaseException) -> BrokerUnavailable:
    """The error for a broker that could not be reached: masked URL and the error's type."""
    return BrokerUnavailable(f"broker unavailable at {mask_url(url)}: {type(error).__name__}")
