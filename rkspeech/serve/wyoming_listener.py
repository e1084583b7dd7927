"""The Wyoming listener: accepts connections (TCP or a Unix socket) up to Wyoming's share of the
connection cap and runs a :class:`rkspeech.serve.wyoming_server.WyomingHandler` per connection;
one over it gets one ``error`` event and is closed (:func:`refuse`)."""

from __future__ import annotations

import asyncio
import time

from rkspeech.serve.engines import ServePool
from rkspeech.serve.limits import ACCEPT_BATCH, ServerLimits, deepen
from rkspeech.serve.options import ServeOptions
from rkspeech.serve.wyoming_events import MAX_LINE
from rkspeech.serve.wyoming_info import info_event
from rkspeech.serve.wyoming_server import WyomingHandler

#: the answer to a connection over the cap: one ``error`` event (header line, then its data)
_TOO_MANY_DATA = b'{"text": "too many open connections (--max-connections); retry later", "code": "too-many-connections"}'
_TOO_MANY = b'{"type": "error", "data_length": %d}\n%s' % (len(_TOO_MANY_DATA), _TOO_MANY_DATA)
#: a refused connection is kept at most this long after its ``error`` event (and the end of our
#: side), reading and dropping what the client sends until it closes.  Closed at once, a client
#: that sends an event on connecting (Home Assistant sends ``describe``) got a reset, not the
#: event: its event met a closed socket, the reset came back, and its reader raised
#: ConnectionResetError before handing over the ``error`` it had already received.
REFUSED_LINGER_S = 0.5
#: refused connections kept so at once at most; more are closed at once (each holds a descriptor,
#: and :data:`rkspeech.serve.limits.FD_RESERVE` keeps 160 for everything besides the connections),
#: so in a burst of refusals past this many a client that sends at once may still see a reset
REFUSED_LINGERING = 32


async def refuse(reader, writer, lingering: list) -> None:
    """Answer a connection over the cap with the ``error`` event and close it without a reset
    (``lingering``: a one-item count of the connections in here, shared by the listener)."""
    writer.write(_TOO_MANY)
    if lingering[0] >= REFUSED_LINGERING or not writer.can_write_eof():
        writer.close()
        return
    lingering[0] += 1
    try:
        writer.write_eof()
        end = asyncio.get_running_loop().time() + REFUSED_LINGER_S
        while await asyncio.wait_for(reader.read(65536), max(0.0, end - asyncio.get_running_loop().time())):
            pass  # the client's events are not read as events: dropped
    except (asyncio.TimeoutError, ConnectionError, OSError):
        pass
    finally:
        lingering[0] -= 1
        writer.close()


class WyomingServer:
    """``await start()`` binds (port 0: a free one, see :attr:`address`); ``await stop()`` closes
    the listener and every connection."""

    def __init__(self, uri: str, pool: ServePool, options: ServeOptions, metrics=None, limits=None):
        self.uri, self.pool, self.options, self.metrics = uri, pool, options, metrics
        self.limits = limits or ServerLimits.from_options(options, metrics)
        self._server = None
        self._tasks: dict[asyncio.Task, WyomingHandler] = {}
        self.address: str | None = None
        self._lingering = [0]

    async def start(self) -> None:
        from urllib.parse import urlparse

        import functools

        describe = functools.partial(info_event, self.pool, self.options)
        describe()  # built once now too: an engine that cannot describe itself stops the start

        async def on_connect(reader, writer):
            if not self.limits.gate.admit("wyoming"):  # over its share of --max-connections: say so, close
                await refuse(reader, writer, self._lingering)
                return
            handler = WyomingHandler(reader, writer, self.pool, self.options, self.metrics, describe, self.limits)
            task = asyncio.current_task()
            self._tasks[task] = handler
            try:
                await handler.run()
            except asyncio.CancelledError:
                pass  # shutdown past the grace time
            finally:
                self._tasks.pop(task, None)
                self.limits.gate.leave("wyoming")

        parsed = urlparse(self.uri)
        if parsed.scheme == "unix":
            self._server = await asyncio.start_unix_server(on_connect, path=parsed.path, limit=MAX_LINE,
                                                           backlog=ACCEPT_BATCH)
            self.address = self.uri
        else:
            self._server = await asyncio.start_server(on_connect, host=parsed.hostname or "127.0.0.1",
                                                      port=parsed.port or 0, limit=MAX_LINE, backlog=ACCEPT_BATCH)
            host, port = self._server.sockets[0].getsockname()[:2]
            self.address = f"tcp://{host}:{port}"  # tcp only: a unix:// listener is named by its URI
        for sock in self._server.sockets:
            deepen(sock)

    async def stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening; close idle connections now and busy ones when their request is answered
        (at most ``grace_s``)."""
        await self.stop_listening()
        end = time.monotonic() + grace_s
        while self._tasks:
            for handler in list(self._tasks.values()):
                if not handler.busy:
                    handler.reader.feed_eof()  # the read loop ends as at end of stream
            if time.monotonic() > end:
                break
            await asyncio.sleep(0.02)
        for task in list(self._tasks):
            task.cancel()
