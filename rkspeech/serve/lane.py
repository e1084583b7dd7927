"""A lane: the engines of one kind, and a wait line shared fairly between clients.

A request carries a *client* key (the front ends pass the peer's address: every connection
from one host is one client, so a batch job's parallel uploads take one turn, as one Home
Assistant does).  A free engine goes to the waiting client that was served least recently
(first come, first served between clients never served, and within one client): a client that
re-queues as fast as it can, or keeps several requests waiting, is served once per round, so
another client's request waits at most for the requests already running -- one service time
with one engine -- instead of for everything queued before it.

The wait line is bounded (``max_queue``, over all clients).  When it is full, a client with
nothing waiting takes the place of the newest request of the client with the most waiting (at
least two), which is refused with :class:`~rkspeech.serve.errors.Busy` as if it had arrived
then; otherwise the newcomer is refused.  So a client that fills the line cannot keep the
others out.  Event-loop thread only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
from collections.abc import Hashable, Sequence

from rkspeech.serve.errors import Busy, ShuttingDown

#: clients remembered for "served least recently" beyond those waiting
_HISTORY = 1024


class Lane:
    def __init__(self, kind: str, engines: Sequence, max_queue: int, retry_after_s: int, metrics):
        self.kind, self.engines = kind, list(engines)
        self.max_queue, self.retry_after_s = max_queue, retry_after_s
        self.metrics = metrics
        self._free: collections.deque = collections.deque(self.engines)
        self._queues: dict[Hashable, collections.deque[asyncio.Future]] = {}
        self._served_at: dict[Hashable, int] = {}
        self._clock = itertools.count()
        self.closed = False

    @property
    def waiting(self) -> int:
        return sum(self._live(c) for c in self._queues)

    @property
    def busy(self) -> int:
        return len(self.engines) - len(self._free)

    def _live(self, client) -> int:
        return sum(not f.done() for f in self._queues.get(client, ()))

    def _gauges(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.labels(self.kind).set(self.waiting)
            self.metrics.engines_busy.labels(self.kind).set(self.busy)

    def _served(self, client) -> None:
        self._served_at.pop(client, None)
        self._served_at[client] = next(self._clock)
        if len(self._served_at) > _HISTORY:
            for old in [c for c in self._served_at if c not in self._queues][:len(self._served_at) - _HISTORY]:
                del self._served_at[old]

    def _victim(self, client):
        """The client whose newest waiter gives its place to ``client`` (None: no one)."""
        if self._live(client):
            return None
        counts = {c: self._live(c) for c in self._queues if c != client}
        victim = max(counts, key=counts.get, default=None)
        return victim if victim is not None and counts[victim] >= 2 else None

    def has_room(self, client=None) -> bool:
        return bool(self._free) or self.waiting < self.max_queue or self._victim(client) is not None

    async def acquire(self, client: Hashable = None):
        if self.closed:
            raise ShuttingDown()
        if self._free:
            engine = self._free.popleft()
            self._served(client)
            self._gauges()
            return engine
        if self.waiting >= self.max_queue:
            victim = self._victim(client)
            if victim is None:
                raise Busy(self.kind, self.retry_after_s)
            newest = next(f for f in reversed(self._queues[victim]) if not f.done())
            newest.set_exception(Busy(self.kind, self.retry_after_s))
        fut = asyncio.get_running_loop().create_future()
        self._queues.setdefault(client, collections.deque()).append(fut)
        self._gauges()
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self.release(fut.result())  # handed an engine just as the request gave up
            raise
        finally:
            queue = self._queues.get(client)
            if queue is not None:
                with contextlib.suppress(ValueError):
                    queue.remove(fut)
                if not queue:
                    del self._queues[client]
            self._gauges()

    def release(self, engine) -> None:
        for queue in self._queues.values():
            while queue and queue[0].done():
                queue.popleft()
        waiting = [c for c, q in self._queues.items() if q]
        if waiting:
            client = min(waiting, key=lambda c: self._served_at.get(c, -1))  # ties: first queued
            self._queues[client].popleft().set_result(engine)
            self._served(client)
            self._gauges()
            return
        self._free.append(engine)
        self._gauges()

    def close(self) -> None:
        """Refuse new requests and everything waiting."""
        self.closed = True
        for queue in self._queues.values():
            while queue:
                fut = queue.popleft()
                if not fut.done():
                    fut.set_exception(ShuttingDown())
        self._gauges()

    def idle(self) -> bool:
        return len(self._free) == len(self.engines)
