"""A cheap reachability check of the broker, for ``/readyz``."""

from __future__ import annotations

import asyncio

import aio_pika

from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.settings import mask_url


async def check_broker(url: str, timeout_seconds: float = 3.0) -> None:
    try:
        connection = await asyncio.wait_for(
            aio_pika.connect(url, timeout=timeout_seconds), timeout_seconds
        )
    except Exception as error:
        raise BrokerUnavailable(
            f"broker unavailable at {mask_url(url)}: {type(error).__name__}"
        ) from None
    await connection.close()
