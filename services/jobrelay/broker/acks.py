"""Acks in groups: one ``basic.ack`` with ``multiple=True`` settles every delivery of a channel up
to a delivery tag, when each of them was to be acked.

A consumer's completions commit together (``db/group_commit.py``), so their acks come together
too. ``AckGroups`` gathers the acks asked for in one turn of the event loop and sends, for the
longest run of the oldest outstanding deliveries that are all to be acked, one frame for the
run; an ack above a delivery still in flight (or being nacked) goes alone, because a multiple
ack would settle that delivery too. A nack always goes alone, and its delivery stays outstanding
until its frame is written, so no multiple ack can cover it.

Delivery tags are per channel and start again at 1 on a new one (after a reconnect): a group
is per channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from jobrelay.core.execution import Delivery, ForwardingDelivery


class Acknowledgeable(Protocol):
    """What ``AckGroups`` needs of a delivery (``broker/deliveries.py``'s ``RawDelivery``)."""

    @property
    def delivery_tag(self) -> int | None: ...

    @property
    def channel(self) -> Any: ...

    async def ack(self, multiple: bool = False) -> None: ...


class AckGroups:
    """The outstanding deliveries of one channel, in the order the broker numbered them."""

    def __init__(self) -> None:
        # tag -> (the delivery, whether it is to be acked); dicts keep insertion order, and
        # tags ascend in the order deliveries arrive on a channel.
        self._outstanding: dict[int, tuple[Acknowledgeable, bool]] = {}
        self._flush: asyncio.Future[None] | None = None
        # One flush writes its frames at a time: a flush that computed its run while another's
        # single ack was still unwritten could cover that delivery with its multiple ack, and the
        # broker closes the channel on an ack of a tag already acked.
        self._sending = asyncio.Lock()
        self.frames = 0  # ack frames sent, for tests
        self.acks = 0

    def received(self, delivery: Acknowledgeable) -> None:
        tag = _tag(delivery)
        self._outstanding[tag] = (delivery, False)

    async def ack(self, delivery: Acknowledgeable) -> None:
        """Ack the delivery, with the others acked in this turn of the event loop; raises
        what sending the frame raised (the channel closed, say)."""
        tag = _tag(delivery)
        self._outstanding[tag] = (delivery, True)
        if self._flush is None:
            self._flush = asyncio.get_running_loop().create_future()
            asyncio.get_running_loop().call_soon(self._start_flush)
        await asyncio.shield(self._flush)

    async def settle_alone(
        self, delivery: Acknowledgeable, settle: Callable[[], Awaitable[None]]
    ) -> None:
        """Settle one delivery by itself (a nack): it stays outstanding, so that no multiple
        ack covers it, until ``settle`` has written its frame."""
        try:
            await settle()
        finally:
            self._outstanding.pop(_tag(delivery), None)

    def _start_flush(self) -> None:
        flush, self._flush = self._flush, None
        assert flush is not None
        task = asyncio.ensure_future(self._send())
        task.add_done_callback(lambda done: _settle_future(flush, done))

    async def _send(self) -> None:
        async with self._sending:
            await self._send_frames()

    async def _send_frames(self) -> None:
        run_end: Acknowledgeable | None = None
        run_length = 0
        for delivery, to_ack in self._outstanding.values():
            if not to_ack:
                break
            run_end, run_length = delivery, run_length + 1
        alone = [d for d, to_ack in list(self._outstanding.values())[run_length:] if to_ack]
        for delivery in ([run_end] if run_end is not None else []) + alone:
            # Forgotten before the frame is written: a later flush must not send it twice.
            self._outstanding.pop(_tag(delivery))
        if run_end is not None:
            # The run's tags are gone from the table, so its older deliveries are settled too.
            for tag in [t for t in self._outstanding if t < _tag(run_end)]:
                del self._outstanding[tag]
            await run_end.ack(multiple=run_length > 1)
            self.frames += 1
            self.acks += run_length
        for delivery in alone:
            await delivery.ack()
            self.frames += 1
            self.acks += 1


class GroupAcked(ForwardingDelivery):
    """A delivery whose ack goes with its channel's group and whose nack goes alone (through
    ``delivery``, which may dead-letter by hand)."""

    def __init__(self, message: Acknowledgeable, groups: AckGroups, delivery: Delivery) -> None:
        super().__init__(delivery)
        self.message = message
        self.groups = groups
        groups.received(message)

    async def ack(self, multiple: bool = False) -> None:
        await self.groups.ack(self.message)

    async def nack(self, multiple: bool = False, requeue: bool = True) -> None:
        await self.groups.settle_alone(self.message, lambda: self.inner.nack(requeue=requeue))


class AckRouter:
    """One ``AckGroups`` per channel; a closed channel's group is dropped with the channel."""

    def __init__(self) -> None:
        self._groups: dict[int, tuple[Any, AckGroups]] = {}

    def groups_for(self, delivery: Acknowledgeable) -> AckGroups:
        channel = delivery.channel
        found = self._groups.get(id(channel))
        if found is not None and found[0] is channel:
            return found[1]
        self._groups = {
            key: (held, groups)
            for key, (held, groups) in self._groups.items()
            if not getattr(held, "is_closed", False)
        }
        groups = AckGroups()
        self._groups[id(channel)] = (channel, groups)
        return groups


def _tag(delivery: Acknowledgeable) -> int:
    tag = delivery.delivery_tag
    if tag is None:
        raise ValueError("a delivery without a delivery tag (consumed with no_ack?)")
    return tag


def _settle_future(flush: asyncio.Future[None], done: asyncio.Future[None]) -> None:
    if flush.done():
        return
    if done.cancelled():
        flush.cancel()
    elif (error := done.exception()) is not None:
        flush.set_exception(error)
    else:
        flush.set_result(None)
