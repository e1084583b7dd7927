"""Limits of the HTTP front end that uvicorn 0.54 does not have.

uvicorn offers ``timeout_keep_alive`` (idle time between requests on a kept-alive connection:
used, ``--keep-alive-timeout``) and ``h11_max_incomplete_event_size`` (a request head larger
than that is a 400: h11's 16 KB default kept).  Its ``limit_concurrency`` answers 503 only once a
request head has arrived, and never closes a connection that sends nothing, so idle
connections still hold descriptors; and there is no time limit for a request's head or body.
:func:`protocol_class` adds, per connection (uvicorn's own h11 protocol, subclassed):

* the cap on open connections (:class:`rkspeech.serve.limits.ConnectionGate`, shared with
  Wyoming): one more is answered ``503`` and closed at once;
* a header deadline: a connection that has not sent a whole request head within
  ``header_timeout_s`` of connecting (or of its last response) is answered ``408`` (or just
  closed when it sent nothing) -- a slow-header client cannot hold a descriptor for long;
* a write deadline: an answer must be taken by the client within ``request_timeout_s`` of its
  request head (``--request-timeout`` bounds the whole request, writing included).  uvicorn's
  ``send`` waits for the socket with no limit (``FlowControl.drain`` after the transport's
  ``pause_writing``), and a ``close`` with bytes still buffered waits for the client as well, so a
  client that stopped reading held its connection for good (the engine went back to the pool;
  the descriptor and the buffered answer did not).  When the transport's buffer is above its
  high-water mark at the deadline (or still holds bytes then, after the last ``send``), the
  connection is aborted: the app's ``receive`` says ``http.disconnect``, Starlette stops the
  streamed body, and its generation stops with it.

The body deadline is the app's (:func:`read_body`): a body not received within
``body_timeout_s`` is answered 408 and the connection closed; every byte read counts against the
memory budget (:class:`rkspeech.serve.limits.Lease`).
"""

from __future__ import annotations

import asyncio
import time

from rkspeech.serve.errors import ClientGone, RequestTimeout, TooLarge
from rkspeech.serve.limits import Every, abort

_REFUSED = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 2\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n%s")
_REFUSED_BODY = (b'{"error": {"message": "too many open connections (--max-connections); retry later", '
                 b'"type": "server_busy", "param": null, "code": "too-many-connections"}}')
#: one log line per interval for connections aborted at the write deadline (not one per client)
stalled = Every("aborted %d HTTP connection(s) whose client did not take the answer by the request's "
                 "deadline (--request-timeout) in the last interval")
_HEADER_TIMEOUT = (b"HTTP/1.1 408 Request Timeout\r\nconnection: close\r\ncontent-length: 0\r\n\r\n")


def protocol_class(gate, header_timeout_s: float, request_timeout_s: float = 300.0):
    """uvicorn's H11Protocol with the connection cap, the header deadline and the write deadline
    (``Config(http=...)``)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class LimitedH11Protocol(H11Protocol):
        _refused = False
        _timer = None
        _head_of = None  # the request cycle whose head cancelled the timer
        _write_timer = None
        _write_deadline = None  # loop time by which the current answer must be taken

        def connection_made(self, transport):
            if not gate.admit("http"):
                self._refused = True
                transport.write(_REFUSED % (len(_REFUSED_BODY), _REFUSED_BODY))
                transport.close()
                return
            super().connection_made(transport)
            self._arm()

        def connection_lost(self, exc):
            if self._refused:
                return
            gate.leave("http")
            self._disarm()
            self._disarm_write()
            super().connection_lost(exc)

        def data_received(self, data):
            if self._refused:
                return
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._head_of:  # a whole request head arrived
                self._head_of = self.cycle
                self._write_deadline = self.loop.time() + request_timeout_s
                self._disarm()

        def on_response_complete(self):
            super().on_response_complete()
            if self.transport.get_write_buffer_size():
                self._arm_write()  # the answer's tail is still buffered: the same deadline
            if not self.transport.is_closing():
                self._arm()  # the next request's head has the same deadline

        def pause_writing(self):
            super().pause_writing()
            self._arm_write()

        def resume_writing(self):
            super().resume_writing()
            self._disarm_write()
            if self.cycle is not None and self.cycle.response_complete and self.transport.get_write_buffer_size():
                self._arm_write()  # the tail of a finished answer must still be taken by the deadline

        def _arm_write(self):
            if self._write_timer is None and not self._refused:
                left = (self._write_deadline or self.loop.time() + request_timeout_s) - self.loop.time()
                self._write_timer = self.loop.call_later(max(0.0, left), self._write_expired)

        def _disarm_write(self):
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None

        def _write_expired(self):
            self._write_timer = None
            if self.flow.write_paused or self.transport.get_write_buffer_size():
                stalled.hit()
                abort(self.transport)  # close() would wait for the client to read the buffer

        def _arm(self):
            self._disarm()
            self._timer = self.loop.call_later(header_timeout_s, self._header_expired)

        def _disarm(self):
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

        def _header_expired(self):
            self._timer = None
            if self.transport.is_closing() or (self.cycle is not None and not self.cycle.response_complete):
                return
            import h11

            if self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
                self.transport.write(_HEADER_TIMEOUT)  # part of a head came: say why
            self.transport.close()

    return LimitedH11Protocol


#: a body declared too large, but at most this many times the limit, is read and dropped (for at most
#: ``DRAIN_S``) before the 413: closing under a client still sending reset the connection, and the
#: official client saw a connection error instead of the 413 (seen once in a full run under load)
DRAIN_FACTOR, DRAIN_S = 4, 5.0


async def _drain(request, seconds: float) -> None:
    """Receive and drop the body until it ends, the client leaves, or ``seconds`` pass."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await asyncio.wait_for(request.receive(), left)
        except asyncio.TimeoutError:
            return
        if message["type"] == "http.disconnect" or not message.get("more_body", False):
            return


async def read_body(request, *, limit: int, timeout_s: float, lease) -> bytes:
    """The request body, at most ``limit`` bytes (413), received within ``timeout_s`` (408);
    each piece is added to ``lease`` before it is kept (``OverBudget``: 503)."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        if int(length) <= DRAIN_FACTOR * limit:
            await _drain(request, min(timeout_s, DRAIN_S))
        raise TooLarge(f"the request body is {int(length)} bytes, the server's limit is {limit}")
    deadline = time.monotonic() + timeout_s
    body = bytearray()
    while True:
        try:
            message = await asyncio.wait_for(request.receive(), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            raise RequestTimeout(f"the request body did not arrive within {timeout_s:g} s (--body-timeout); "
                                 f"{len(body)} bytes came") from None
        if message["type"] == "http.disconnect":
            raise ClientGone()
        piece = message.get("body", b"")
        if len(body) + len(piece) > limit:
            raise TooLarge(f"the request body is larger than the server's limit of {limit} bytes")
        lease.add(len(piece), "the request body")
        body += piece
        if not message.get("more_body", False):
            return bytes(body)


async def unless_gone(request, work, gone: asyncio.Future | None = None):
    """Await ``work`` (a coroutine) unless the client disconnects first: then it is cancelled --
    a request still waiting for an engine leaves the wait line and is never computed (a model
    call already running cannot be interrupted; its result is dropped) -- and :class:`ClientGone`
    is raised.  Call it once the whole body has been read: ``receive()`` then only returns at a
    disconnect.  ``gone``: such a ``receive()`` already running (:func:`watch_gone`), left running."""
    task = asyncio.ensure_future(work)
    watch = gone if gone is not None else watch_gone(request)
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        task.cancel()
        raise ClientGone()
    finally:
        if watch is not gone:
            watch.cancel()
        if not task.done():
            task.cancel()


def watch_gone(request) -> asyncio.Future:
    """A future done when the client disconnects (or the response is complete); call it once the
    whole body has been read.  ``watch_gone(request).done`` is the ``gone`` check of a stream
    (``ServePool.stream``)."""
    return asyncio.ensure_future(request.receive())
