"""A cheap reachability check of the broker, for ``/readyz``."""

from __future__ import annotations

from jobrelay.broker.connection import connect_broker


async def check_broker(url: str, timeout_seconds: float = 3.0) -> None:
    """Raises ``BrokerUnavailable`` unless a connection opens within ``timeout_seconds``."""
    connection = await connect_broker(url, seconds=timeout_seconds, name="jobrelay-readyz")
    await connection.close()
