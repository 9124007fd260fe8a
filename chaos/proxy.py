"""A small TCP proxy between the services and a server, with network faults on demand.

Modes, for every connection at once (both directions):
- ``pass``: bytes flow as they come;
- ``delay``: every chunk waits ``delay`` seconds before it is forwarded;
- ``blackhole``: nothing flows and new connections hang (a partition: TCP would retransmit, so
  held bytes flow again once the mode goes back to ``pass``, unless a side gave up meanwhile);
- ``reset``: every open connection is torn down with a RST, and new ones are reset at once.

The proxy runs its own event loop in a daemon thread, so a busy or blocking caller cannot stall
the traffic it relays; ``set_mode`` is safe to call from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from enum import StrEnum

CHUNK = 65536


class Mode(StrEnum):
    PASS = "pass"
    DELAY = "delay"
    BLACKHOLE = "blackhole"
    RESET = "reset"


class Proxy:
    def __init__(self, name: str, upstream_host: str, upstream_port: int) -> None:
        self.name = name
        self.upstream = (upstream_host, upstream_port)
        self.port = 0
        self.mode = Mode.PASS
        self.delay = 0.0
        self.connections_total = 0
        self.resets_total = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"proxy-{name}")
        self._thread.daemon = True
        self._server: asyncio.Server | None = None
        self._flowing: asyncio.Event | None = None
        self._open: set[asyncio.StreamWriter] = set()

    # --- control (any thread) ---------------------------------------------------------------

    def start(self) -> int:
        """Listen on a free loopback port and return it."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)
        return self.port

    def set_mode(self, mode: Mode, delay: float = 0.0) -> None:
        asyncio.run_coroutine_threadsafe(self._apply(mode, delay), self._loop).result(10)

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # --- the proxy's own loop ---------------------------------------------------------------

    async def _listen(self) -> None:
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _apply(self, mode: Mode, delay: float) -> None:
        assert self._flowing is not None
        self.mode, self.delay = mode, delay
        if mode is Mode.BLACKHOLE:
            self._flowing.clear()
        else:
            self._flowing.set()
        if mode is Mode.RESET:
            for writer in list(self._open):
                self._reset(writer)

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._open):
            self._reset(writer)

    def _reset(self, writer: asyncio.StreamWriter) -> None:
        """Close with a RST (SO_LINGER 0), not a polite FIN."""
        self._open.discard(writer)
        self.resets_total += 1
        sock = writer.get_extra_info("socket")
        with contextlib.suppress(OSError):
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    async def _serve(
        self, client_reader: asyncio.StreamReader, client: asyncio.StreamWriter
    ) -> None:
        assert self._flowing is not None
        self.connections_total += 1
        self._open.add(client)
        try:
            await self._flowing.wait()  # a new connection hangs while blackholed
            if self.mode is Mode.RESET or client not in self._open:
                self._reset(client)
                return
            try:
                upstream_reader, upstream = await asyncio.open_connection(*self.upstream)
            except OSError:
                self._reset(client)
                return
            self._open.add(upstream)
            await asyncio.gather(
                self._pump(client_reader, upstream, client),
                self._pump(upstream_reader, client, upstream),
            )
        finally:
            for writer in (client,):
                self._open.discard(writer)

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: asyncio.StreamWriter
    ) -> None:
        """Copy one direction until either side ends; then end the other side too."""
        assert self._flowing is not None
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                await self._flowing.wait()
                if self.mode is Mode.DELAY and self.delay > 0:
                    await asyncio.sleep(self.delay)
                if writer not in self._open or peer not in self._open:
                    break  # reset meanwhile
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for side in (writer, peer):
                if side in self._open:
                    self._open.discard(side)
                    side.close()
