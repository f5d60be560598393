"""A small TCP proxy for failure tests: put it between one replica and its database, then cut it.

It runs its own asyncio loop in a daemon thread, so sync tests drive it with plain calls::

    with TcpProxy("127.0.0.1", 5432) as proxy:      # listens on a free 127.0.0.1 port
        url = f"postgresql+asyncpg://postgres@127.0.0.1:{proxy.port}/test"
        ...
        proxy.cut()       # close every live connection; new ones are refused
        proxy.restore()   # accept and forward again, on the same port
        proxy.freeze()    # a silent network: connections stay open, no byte gets through

"Refused" means the listening socket is closed, so a client's connect fails at once with
``ECONNREFUSED`` — the way a database that went away, or a partitioned network with an active
reject, looks to a driver. ``freeze()`` is the other partition: every connection, live or new,
stays open but the bytes are held, so a client hears nothing until its own timeouts fire.
``restore()`` listens again on the same port and lets held bytes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, TypeVar

import pytest

_T = TypeVar("_T")
_CHUNK = 65536


class TcpProxy:
    def __init__(self, target_host: str, target_port: int, *, listen_port: int = 0) -> None:
        self.target = (target_host, target_port)
        self.port = listen_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._flowing: asyncio.Event | None = None
        self.accepted = 0
        """Connections accepted and forwarded so far (all time)."""

    # -- sync API (any thread) ---------------------------------------------------------------

    def start(self) -> TcpProxy:
        self._thread.start()
        if not self.port:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = int(sock.getsockname()[1])
        self._call(self._listen())
        return self

    def cut(self) -> None:
        """Close every live connection (both sides) and refuse new ones."""
        self._call(self._cut())

    def restore(self) -> None:
        """Accept and forward connections again, on the same port (after cut or freeze)."""
        self._call(self._listen())

    def freeze(self) -> None:
        """Hold every byte in both directions; connections stay open and new ones are
        accepted (a silent network, not a refusing one)."""
        self._call(self._freeze())

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        self._call(self._cut())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    @property
    def live_connections(self) -> int:
        return len(self._writers) // 2

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- on the proxy's loop ---------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    async def _freeze(self) -> None:
        self._flow().clear()

    def _flow(self) -> asyncio.Event:
        if self._flowing is None:
            self._flowing = asyncio.Event()
            self._flowing.set()
        return self._flowing

    async def _listen(self) -> None:
        self._flow().set()
        if self._server is None:
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", self.port, reuse_address=True
            )

    async def _cut(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.close()
        for writer in list(self._writers):
            _abort(writer)
        self._writers.clear()
        for task in list(self._tasks):
            task.cancel()
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        # Known to a cut from its first moment: a connection cut while its upstream is still
        # being opened must not be left open (and leak its socket) either.
        self._writers.add(client_w)
        try:
            upstream_r, upstream_w = await asyncio.open_connection(*self.target)
        except (OSError, asyncio.CancelledError):
            self._writers.discard(client_w)
            _abort(client_w)
            return
        if self._server is None or client_w not in self._writers:  # cut while connecting
            _abort(client_w)
            _abort(upstream_w)
            return
        self.accepted += 1
        self._writers |= {client_w, upstream_w}
        pumps = [
            asyncio.ensure_future(self._pump(client_r, upstream_w, self._flow())),
            asyncio.ensure_future(self._pump(upstream_r, client_w, self._flow())),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
                self._tasks.discard(pump)
            for writer in (client_w, upstream_w):
                self._writers.discard(writer)
                _abort(writer)

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, flowing: asyncio.Event
    ) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(_CHUNK):
                await flowing.wait()
                writer.write(data)
                await writer.drain()


def _abort(writer: asyncio.StreamWriter) -> None:
    transport = writer.transport
    if not transport.is_closing():
        transport.abort()
    else:
        with contextlib.suppress(Exception):
            transport.abort()


CUT_LINK_WARNINGS = pytest.mark.filterwarnings("ignore:unclosed:ResourceWarning")
"""For the tests that cut a database link through the proxy. A statement or connect cancelled
by the store's timeout while the link is cut leaves the driver's socket (asyncpg, asyncmy: the
transport, or the bare socket of a connect in progress) to the garbage collector, which closes
it and warns ``unclosed …``. What the
tests assert — the store fails closed and recovers — does not depend on it; the warning is
expected there and stays an error everywhere else."""
