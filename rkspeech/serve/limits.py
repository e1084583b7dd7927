"""Process-wide limits shared by both front ends: open connections and one memory budget.

* :class:`ConnectionGate`: connections open at once, each front end within its own share of one
  cap (they share the process's descriptors; with one shared count, 256 idle sockets to the
  keyless Wyoming port once made every HTTP request a 503 for the idle timeout).  One more is
  accepted and closed at once with a clear answer (a 503 over HTTP, an ``error`` event over
  Wyoming) -- accepting and closing keeps the listen queue draining, so no connection waits in
  it for a descriptor; refusals are logged once per :data:`LOG_EVERY_S` with their count, not
  per accept (1,100 idle connections once grew the log by 600 MB in 75 s of per-accept
  tracebacks).  :func:`connection_cap` keeps the cap below the descriptor limit
  (``RLIMIT_NOFILE`` minus :data:`FD_RESERVE` for models, logs, threads, pipes).
* :class:`MemoryBudget`: bytes held on behalf of clients -- bodies being read, decoded uploads,
  buffered Wyoming audio (and its float32 samples), streamed text, speech generated ahead of a
  slow client (at most :data:`RUN_AHEAD_BYTES` per stream) -- against one limit; work that would pass it is refused with
  :class:`OverBudget` (HTTP 503 + ``Retry-After``, a Wyoming ``error`` with code
  ``over-budget``).  Each request takes a :class:`Lease` and gives it back when it ends.  A
  request whose own share would pass the whole budget can never be served: :class:`NeverFits`
  (413), not "retry later" (a 1.3 MB FLAC of 2 h silence decodes to 460 MB of float32).  The
  budget is locked: an upload's decoder (a worker thread) takes its share block by block.
* :func:`quiet_accept_errors`: the event loop's "socket.accept() out of system resource"
  (EMFILE) report, once per interval with a count instead of a traceback per retry.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from rkspeech.serve.errors import ServeError, TooLarge

log = logging.getLogger("rkspeech.serve")

#: at most one log line per kind of refusal per this many seconds
LOG_EVERY_S = 10.0
#: asyncio accepts up to its ``backlog`` argument connections in one loop turn before any of them
#: is answered, and a refused one is closed a few turns later, so a burst passes the cap by a few
#: batches of descriptors: this many per listener per turn (the kernel's listen queue is made
#: :data:`LISTEN_QUEUE` long afterwards, see :func:`deepen`).  With 64, 2,000 connections at once
#: at a 1,024 descriptor limit still failed an accept; with 16, none (tests/serve/test_serve_limits.py).
ACCEPT_BATCH = 16
#: the kernel's queue of connections not yet accepted (asyncio's default of 100 made a burst
#: wait 1 s per SYN retry while the server could already answer)
LISTEN_QUEUE = 2048
#: speech generated ahead of a slow client, at most this many bytes per stream (float32 chunks:
#: 4 MiB is ~44 s of 24 kHz audio, longer than most answers, so a client that reads at its own
#: pace still frees the engine when the answer is made); past it the engine waits for the
#: client, up to the request's deadline.  Unbounded, a client that stopped reading once had a
#: whole answer queued for it (4,096 characters: minutes of audio, ~30 MB).
RUN_AHEAD_BYTES = 4 * 1024 * 1024
#: descriptors kept free of connections: bursts of accepts in flight (above), model and library
#: files, the log, executor threads' pipes.  Measured: the test's stand-in server held 8 besides
#: its connections, and 904 in all at the cap of 896 during 2,000 connections at once.
FD_RESERVE = 160


class OverBudget(ServeError):
    status = 503
    code = "over-budget"
    retry_after_s = 2

    def __init__(self, what: str, limit: int):
        super().__init__(f"the server's memory budget for client data ({limit / 2**20:g} MB, --memory-budget-mb) "
                         f"is in use; {what} refused, retry later")


class NeverFits(TooLarge):
    def __init__(self, what: str, limit: int):
        super().__init__(f"{what} needs more than the server's whole memory budget for client data "
                         f"({limit / 2**20:g} MB, --memory-budget-mb); send less")


class Every:
    """A counter logged at most once per ``LOG_EVERY_S`` (the first occurrence at once); what
    comes within the interval is logged with its count when the interval ends (a timer in the
    running event loop) or at :func:`flush_all` (the server's stop).  Logged only at the next
    hit, a burst of ~844 refusals once left one line that said 1."""

    _all: weakref.WeakSet = weakref.WeakSet()

    def __init__(self, message: str):
        self.message, self.count, self.last = message, 0, -float("inf")
        self.fields: dict = {}
        self._timer = None
        Every._all.add(self)

    def hit(self, **fields) -> None:
        self.count += 1
        self.fields = fields
        now = time.monotonic()
        if now - self.last >= LOG_EVERY_S:
            self.flush()
        elif self._timer is None:
            import asyncio

            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop: the next hit or flush_all logs it
                return
            self._timer = loop.call_later(self.last + LOG_EVERY_S - now, self.flush)

    def flush(self) -> None:
        """Log what was counted since the last line (nothing when nothing was)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.count:
            log.warning(self.message, self.count, *self.fields.values())
            self.count, self.last = 0, time.monotonic()


def flush_all() -> None:
    """Log every :class:`Every`'s pending count now (a server stopping)."""
    for every in list(Every._all):
        every.flush()


def deepen(sock) -> None:
    """Make ``sock``'s listen queue :data:`LISTEN_QUEUE` long (after asyncio set it to its accept
    batch); ``sock`` may be asyncio's TransportSocket, which has no ``listen``: a duplicate does it."""
    import socket

    dup = socket.socket(fileno=os.dup(sock.fileno()))
    try:
        dup.listen(LISTEN_QUEUE)
    finally:
        dup.close()


def abort(transport) -> None:
    """Drop a connection whose client does not take what is written: an RST, the kernel's send
    buffer discarded.  ``transport.abort()`` alone frees the descriptor, but the kernel then
    still sends what it holds (on loopback up to ~4 MB per socket) and the client, reading
    slowly, kept receiving the answer for seconds after it was dropped (measured:
    tests/serve/test_serve_limits.py, 80 KB/s).  SO_LINGER 0 makes the close abortive."""
    import socket
    import struct

    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered to stay :data:`FD_RESERVE` below the soft descriptor limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return wanted
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - FD_RESERVE))


class ConnectionGate:
    """Open connections, each front end within its own share of ``limit`` (``front_ends``: those
    served; the cap split evenly, so no front end's clients -- idle sockets to the keyless
    Wyoming port -- can lock the other out); :meth:`admit` False = refuse this one."""

    def __init__(self, limit: int, metrics=None, front_ends=("wyoming", "http")):
        self.limit, self.metrics = limit, metrics
        n = max(1, len(front_ends))
        self.shares = {fe: max(1, limit // n + (i < limit % n)) for i, fe in enumerate(front_ends)}
        self._open = dict.fromkeys(self.shares, 0)
        self._refused = {fe: Every(f"refused %d {fe} connection(s) over its share of %d open "
                                   f"(--max-connections {limit} over {n} front end(s)) in the last interval")
                         for fe in self.shares}

    @property
    def open(self) -> int:
        """Connections open over every front end."""
        return sum(self._open.values())

    def admit(self, front_end: str) -> bool:
        if self._open[front_end] >= self.shares[front_end]:
            self._refused[front_end].hit(share=self.shares[front_end])
            if self.metrics is not None:
                self.metrics.count(f"{front_end} connect", "refused")
            return False
        self._open[front_end] += 1
        return True

    def leave(self, front_end: str) -> None:
        self._open[front_end] -= 1


class MemoryBudget:
    """``limit`` bytes of client data at once (any thread: one lock)."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self.lock = threading.Lock()
        self._refused = Every("refused %d request(s) over the memory budget of %d bytes in the last interval")

    def lease(self) -> Lease:
        return Lease(self)


class Lease:
    """One request's share of a :class:`MemoryBudget`: :meth:`add` grows it (``OverBudget`` when
    the budget would be passed), :meth:`release` gives it all back (idempotent)."""

    def __init__(self, budget: MemoryBudget):
        self.budget, self.held, self.closed = budget, 0, False

    def add(self, n: int, what: str = "this request") -> None:
        """Hold ``n`` more bytes: :class:`NeverFits` when this lease alone would pass the limit,
        :class:`OverBudget` when the budget is in use."""
        budget = self.budget
        if self.held + n > budget.limit:
            raise NeverFits(what, budget.limit)
        if not self.try_add(n):
            budget._refused.hit(limit=budget.limit)
            raise OverBudget(what, budget.limit)

    def try_add(self, n: int) -> bool:
        """:meth:`add` that answers False instead of raising (nothing is logged)."""
        with self.budget.lock:
            if self.closed or self.budget.used + n > self.budget.limit:
                return False
            self.budget.used += n
            self.held += n
        return True

    def give_back(self, n: int) -> None:
        """Return ``n`` of the bytes held (a part of the request's data was let go)."""
        with self.budget.lock:
            n = min(n, self.held)
            self.budget.used -= n
            self.held -= n

    def release(self) -> None:
        with self.budget.lock:
            self.budget.used -= self.held
            self.held = 0

    def close(self) -> None:
        """:meth:`release` for good: the request has ended, and a worker still decoding its upload
        (a thread cannot be stopped) is refused what it asks for after that, so the budget is not
        charged for a request that is gone."""
        with self.budget.lock:
            self.closed = True
        self.release()

    def __enter__(self) -> Lease:
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def quiet_accept_errors(loop) -> None:
    """Install an exception handler on ``loop`` that reports descriptor exhaustion on accept once
    per interval (asyncio retries the accept every second and reports each retry with a traceback)."""
    previous = loop.get_exception_handler()
    exhausted = Every("%d accept(s) failed: out of file descriptors (raise LimitNOFILE or lower "
                       "--max-connections)")

    def handler(loop, context):
        if context.get("message", "").startswith("socket.accept() out of system resource"):
            exhausted.hit()
            return
        if previous is not None:
            previous(loop, context)
        else:
            loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


class ServerLimits:
    """The gate and the budget one server's front ends share."""

    def __init__(self, gate: ConnectionGate, budget: MemoryBudget):
        self.gate, self.budget = gate, budget

    @classmethod
    def from_options(cls, options, metrics=None) -> ServerLimits:
        served = tuple(fe for fe in ("wyoming", "http") if getattr(options, fe) is not None) or ("wyoming", "http")
        return cls(ConnectionGate(connection_cap(options.max_connections), metrics, served),
                   MemoryBudget(options.memory_budget_bytes))
