"""``JOBRELAY_AMQP_URL`` as one URL or the nodes of a cluster (docs/cluster.md): what a list
may be, how it is masked, and how a robust connection walks through it. No servers needed."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import aiormq.exceptions
import pytest
from pydantic import ValidationError
from yarl import URL

from jobrelay.broker.connection import FailoverConnection, connect_broker
from jobrelay.broker.publisher import Publisher
from jobrelay.core.errors import BrokerUnavailable
from jobrelay.core.masking import Masker
from jobrelay.core.relay import CONNECTION_LOST, NACKED, OutboxRow
from jobrelay.core.settings import Settings, amqp_urls, mask_url

NODES = "amqp://u:sentinel-pw@h1:5672/jobs,amqp://u:sentinel-pw@h2:5673/jobs"


def test_a_list_is_its_urls_in_order_and_a_single_url_is_a_list_of_one() -> None:
    assert amqp_urls(" amqp://h1/ , amqp://h2:5673/ ") == ["amqp://h1/", "amqp://h2:5673/"]
    assert amqp_urls("amqp://guest:guest@localhost:5672/") == ["amqp://guest:guest@localhost:5672/"]
    # "/" and "%2F" name the same vhost.
    assert (
        Settings(amqp_url=" amqp://h1/ ,amqp://x@h2/%2F").amqp_url == "amqp://h1/,amqp://x@h2/%2F"
    )


def test_a_node_without_a_user_takes_the_user_and_password_of_the_first() -> None:
    assert amqp_urls("amqp://u:pw@h1:5672/,amqp://h2:5673/,amqp://v:other@h3/") == [
        "amqp://u:pw@h1:5672/",
        "amqp://u:pw@h2:5673/",
        "amqp://v:other@h3/",  # its own user stays
    ]
    assert amqp_urls("amqp://h1/,amqp://h2/") == ["amqp://h1/", "amqp://h2/"]  # guest for all


@pytest.mark.parametrize(
    ("urls", "expected"),
    [
        ("", "no broker URL"),
        ("amqp://u:sentinel-pw@h1/,", "entry 2 of 2 is empty"),
        ("amqp://u:sentinel-pw@h1/,,amqp://h3/", "entry 2 of 3 is empty"),
        ("amqp://u:sentinel-pw@h1/,http://h2/", "entry 2 of 2 is not an AMQP URL (scheme 'http')"),
        ("sentinel-pw", "the URL is not an AMQP URL (scheme 'none')"),
        ("amqp://u:sentinel-pw@h1:port/", "the URL has an invalid host or port"),
        ("amqp://u:sentinel-pw@/", "the URL names no host"),
        ("amqp://u:sentinel-pw@h1/a,amqp://u:sentinel-pw@h2/b", "different vhosts: 'a' (entry 1)"),
        ("amqp://u:sentinel-pw@h1/,amqps://u:sentinel-pw@h2/", "mix amqp:// and amqps://"),
        # A raw comma cuts a password in two; neither half may be shown.
        ("amqp://u:sentinel,pw@h1/", "entry 1 of 2 has an invalid host or port"),
    ],
)
def test_a_malformed_list_is_one_clear_error_without_the_password(urls: str, expected: str) -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(amqp_url=urls)
    (error,) = raised.value.errors(include_input=False)
    assert error["loc"] == ("amqp_url",)
    assert expected in error["msg"]
    assert "\n" not in error["msg"]
    assert "sentinel" not in error["msg"]


def test_every_url_of_a_list_is_masked_on_its_own() -> None:
    assert mask_url(NODES) == "amqp://u:***@h1:5672/jobs,amqp://u:***@h2:5673/jobs"
    # A node without a password does not make the next node's password run into it.
    assert mask_url("amqp://h1:5672/,amqp://u:sentinel-pw@h2/") == (
        "amqp://h1:5672/,amqp://u:***@h2/"
    )
    assert mask_url("postgresql://u:a,b@h/db") == "postgresql://u:***@h/db"
    masker = Masker.for_urls(["amqp://u:first-secret@h1/,amqp://u:second-secret@h2/"])
    assert masker("first-secret second-secret") == "*** ***"


async def test_no_node_answering_names_each_node_masked() -> None:
    with pytest.raises(BrokerUnavailable) as raised:
        await connect_broker("amqp://u:sentinel-pw@127.0.0.1:1/,amqp://u:sentinel-pw@127.0.0.1:2/")
    message = str(raised.value)
    assert "every node" in message
    assert "127.0.0.1:1/" in message and "127.0.0.1:2/" in message
    assert "sentinel-pw" not in message


async def test_a_robust_connection_goes_to_the_next_node_after_each_loss_wrapping_around() -> None:
    nodes = [URL(f"amqp://u:p@h{n}:5672/") for n in (1, 2, 3)]
    connection = FailoverConnection(nodes[0], nodes=nodes)
    seen = [connection.url.host]
    for _ in range(4):
        closing = asyncio.get_running_loop().create_future()
        closing.set_exception(ConnectionResetError())
        await connection._on_connection_close(closing)  # as aio-pika calls it on a loss
        seen.append(connection.url.host)
    assert seen == ["h1", "h2", "h3", "h1", "h2"]

    await connection.close()  # closed by us: no move, nothing reconnects
    closing = asyncio.get_running_loop().create_future()
    closing.set_result(None)
    await connection._on_connection_close(closing)
    assert connection.url.host == "h2"


# --- the publisher when its node goes away ------------------------------------------------------


class Closable:
    is_closed = False

    async def close(self) -> None:
        self.is_closed = True


class Exchange:
    name = "jobrelay.jobs"


class UnderlayChannel:
    """aiormq's channel under aio-pika's, where the relay's publishes go."""

    def __init__(self, error: BaseException | None) -> None:
        self.error = error

    async def basic_publish(self, *args: Any, **kwargs: Any) -> None:
        if self.error is not None:
            raise self.error


def publisher_on(channel: UnderlayChannel) -> tuple[Publisher, Closable]:
    publisher = Publisher("amqp://h1/,amqp://h2/", publish_timeout=5, delivery_limit=50)
    connection = Closable()
    publisher._connection, publisher._channel = connection, Closable()  # type: ignore[assignment]
    publisher._exchange = Exchange()  # type: ignore[assignment]
    publisher._underlay = channel  # type: ignore[assignment]
    publisher._type_queues = {"demo.sleep"}  # its queue declared: only the publish is tried
    return publisher, connection


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        # aiormq cancels the confirms it waits for when the node stops answering (heartbeats).
        (asyncio.CancelledError(), CONNECTION_LOST),
        # A channel nacked for good (a quorum queue that had no leader when it first published).
        (aiormq.exceptions.DeliveryError(None, None), NACKED),  # type: ignore[arg-type]
    ],
)
async def test_the_publisher_leaves_a_connection_whose_publishes_were_cancelled_or_nacked(
    error: BaseException, reason: str
) -> None:
    publisher, connection = publisher_on(UnderlayChannel(error))
    row = OutboxRow(1, uuid.uuid4(), "demo.sleep", 0)

    (outcome,) = await publisher.publish_batch([row])

    assert outcome.reason == reason  # the row stays unpublished: published again later
    assert connection.is_closed and not publisher.ready  # the next connect() opens a new one
