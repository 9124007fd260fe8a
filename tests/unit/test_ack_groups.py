"""Acks in groups (``broker/acks.py``) with stand-in deliveries: which frames go out, and that a
multiple ack never covers a delivery still in flight or being nacked."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from jobrelay.broker.acks import AckGroups, AckRouter, GroupAcked


class Channel:
    """Records frames as the broker receives them, and refuses as RabbitMQ does an ack of a
    tag that is no longer unacked (it closes the channel with PRECONDITION_FAILED)."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, int, bool]] = []  # (ack/nack, tag, multiple)
        self.unacked: set[int] = set()
        self.is_closed = False
        self.broken = False

    def receive(self, kind: str, tag: int, multiple: bool) -> None:
        if tag not in self.unacked:
            raise AssertionError(f"PRECONDITION_FAILED - unknown delivery tag {tag}")
        self.unacked -= {t for t in self.unacked if t <= tag} if multiple else {tag}
        self.frames.append((kind, tag, multiple))


class Message:
    def __init__(self, channel: Channel, tag: int, write_seconds: float = 0.0) -> None:
        self.channel = channel
        self.delivery_tag = tag
        self.body = b"{}"
        self.redelivered = False
        self.write_seconds = write_seconds
        channel.unacked.add(tag)

    async def ack(self, multiple: bool = False) -> None:
        if self.channel.broken:
            raise ConnectionError("channel closed")
        await asyncio.sleep(self.write_seconds)  # a frame write yields to the loop
        self.channel.receive("ack", self.delivery_tag, multiple)

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        await asyncio.sleep(0.01)
        self.channel.receive("nack", self.delivery_tag, multiple)


def deliveries(
    n: int, write_seconds: dict[int, float] | None = None
) -> tuple[Channel, AckGroups, list[GroupAcked]]:
    channel = Channel()
    groups = AckGroups()
    slow = write_seconds or {}
    messages: list[Any] = [Message(channel, tag, slow.get(tag, 0.0)) for tag in range(1, n + 1)]
    return channel, groups, [GroupAcked(m, groups, m) for m in messages]


async def test_acks_of_one_turn_go_as_one_multiple_ack() -> None:
    channel, groups, ds = deliveries(5)
    await asyncio.gather(*(d.ack() for d in ds))
    assert channel.frames == [("ack", 5, True)]
    assert (groups.frames, groups.acks) == (1, 5)


async def test_an_ack_above_a_delivery_in_flight_goes_alone() -> None:
    channel, _, ds = deliveries(4)
    await asyncio.gather(ds[0].ack(), ds[1].ack(), ds[3].ack())  # 3 is still running
    assert channel.frames == [("ack", 2, True), ("ack", 4, False)]
    await ds[2].ack()
    assert channel.frames[-1] == ("ack", 3, False)


async def test_a_delivery_being_nacked_is_never_covered_by_a_multiple_ack() -> None:
    channel, _, ds = deliveries(3)
    nack = asyncio.create_task(ds[1].nack(requeue=False))
    await asyncio.sleep(0)
    await asyncio.gather(ds[0].ack(), ds[2].ack())
    await nack
    assert ("ack", 3, True) not in channel.frames
    assert sorted(channel.frames) == [("ack", 1, False), ("ack", 3, False), ("nack", 2, False)]


async def test_a_multiple_ack_never_covers_a_single_ack_still_being_written() -> None:
    channel, _, ds = deliveries(3, write_seconds={2: 0.02})
    alone = asyncio.create_task(ds[1].ack())  # 1 and 3 in flight: 2 goes alone, slowly
    await asyncio.sleep(0.005)
    await asyncio.gather(ds[0].ack(), ds[2].ack(), alone)
    assert channel.unacked == set()
    assert channel.frames[0] == ("ack", 2, False)


async def test_after_a_nack_the_next_acks_group_again() -> None:
    channel, _, ds = deliveries(4)
    await ds[0].nack()
    await asyncio.gather(*(d.ack() for d in ds[1:]))
    assert channel.frames == [("nack", 1, False), ("ack", 4, True)]


async def test_a_failed_frame_fails_every_ack_of_its_group() -> None:
    channel, _, ds = deliveries(3)
    channel.broken = True
    results = await asyncio.gather(*(d.ack() for d in ds), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)


async def test_each_channel_has_its_own_group_and_a_closed_one_is_dropped() -> None:
    router = AckRouter()
    old, new = Channel(), Channel()
    first = router.groups_for(Message(old, 1))  # type: ignore[arg-type]
    assert router.groups_for(Message(old, 2)) is first  # type: ignore[arg-type]
    old.is_closed = True
    assert router.groups_for(Message(new, 1)) is not first  # type: ignore[arg-type]
    assert len(router._groups) == 1


async def test_a_delivery_without_a_tag_is_refused() -> None:
    message = Message(Channel(), 1)
    message.delivery_tag = None  # type: ignore[assignment]
    with pytest.raises(ValueError):
        GroupAcked(message, AckGroups(), message)  # type: ignore[arg-type]
