"""One pool of engines shared by both front ends: bounded waiting, refusal when full, time limits,
graceful shutdown.

An *engine* is one model instance that serves one request at a time: a transcription engine is a
:class:`rkspeech.runtime.whisper.model.WhisperModel` (on a host: its own onnxruntime session; on
a board: its own rknn-lite context pinned to one NPU core, see :func:`rkspeech.serve.transcribers.open_transcribers`), a
speech engine anything that satisfies :class:`SpeechEngine`.  Each engine has its own worker
thread (a one-thread executor), so blocking model calls never run on the event loop and a
context that prefers one thread always sees the same one.

Engines of one kind form a *lane* (:mod:`rkspeech.serve.lane`): a free list and a wait line of
at most ``max_queue`` requests.  A request that finds every engine busy and the wait line full
is refused at once with :class:`Busy` (HTTP 503 with ``Retry-After``, a Wyoming ``error``
event); it never waits unboundedly.  Free engines go to the waiting *client* (``client=``: the
front ends pass the peer's host) served least recently, so no client starves another.

Time limit: a request has ``request_timeout_s`` from arrival (waiting included).  When it runs
out the request is answered with :class:`TimedOut`; a model call already running in its thread
cannot be interrupted, so that engine returns to the lane when the call ends (nothing is ever
handed two requests at once).  A speech stream checks the limit between chunks and stops there.

Shutdown (:meth:`ServePool.shutdown`): new requests and everything still waiting are refused
with :class:`ShuttingDown`; requests already on an engine finish (up to ``grace_s``); then the
worker threads end and owned engines are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import (
    Any,
    Protocol,
    runtime_checkable,
)

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.serve.errors import Busy, ClientGone, ShuttingDown, TimedOut, Unavailable
from rkspeech.serve.lane import Lane as _Lane
from rkspeech.serve.limits import RUN_AHEAD_BYTES

TRANSCRIBE = "transcribe"
SPEECH = "speech"


#: the end of a stream in ``ServePool.stream``'s queue
_END = object()
#: how often a request waiting for an engine checks that its client is still there (``gone``)
GONE_POLL_S = 0.1


async def _give_up(lane: _Lane, waiter: asyncio.Future) -> None:
    """Take ``waiter`` (a ``lane.acquire``) out of the wait line; an engine it was handed (just
    now, or already: it is done) goes back."""
    waiter.cancel()  # no-op when done
    try:
        engine = await waiter
    except BaseException:  # noqa: BLE001 - cancelled (or refused) as wanted
        return
    lane.release(engine)


@runtime_checkable
class SpeechEngine(Protocol):
    """What the server needs from a text-to-speech engine (``rkspeech.runtime.tts.speak.Speaker``):
    ``stream`` yields float32 mono PCM chunks in [-1, 1] at ``sample_rate`` as they are decoded."""

    sample_rate: int
    speakers: list[str]
    languages: list[str]

    def stream(self, text: str, *, speaker: str | None = None, language: str | None = None,
               instruct: str | None = None) -> Iterator[np.ndarray]: ...


@dataclass(eq=False)
class ServedEngine:
    name: str
    model: Any
    executor: ThreadPoolExecutor = field(init=False)
    busy_s: float = 0.0
    served: int = 0

    def __post_init__(self):
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"engine-{self.name}")


class ServePool:
    """Transcription engines and speech engines behind one set of limits.

    ``ServePool(transcribers=[model, ...], speakers=[speaker], max_queue=8, request_timeout_s=300,
    retry_after_s=2, metrics=None, owned=True)``; use it from one event loop.  ``owned`` closes
    the models on :meth:`shutdown` (tests pass shared models with ``owned=False``).
    """

    def __init__(self, *, transcribers: Sequence[Any] = (), speakers: Sequence[SpeechEngine] = (),
                 max_queue: int = 8, request_timeout_s: float = 300.0, retry_after_s: int = 2,
                 metrics=None, owned: bool = True):
        if not transcribers and not speakers:
            raise RkspeechError("the server needs a transcription model (--asr-model-dir) or a speech "
                                "model (--tts-model-dir), or both")
        for s in speakers:
            if not isinstance(s, SpeechEngine):
                raise TypeError(f"{type(s).__name__} is not a SpeechEngine (sample_rate, speakers, languages, "
                                "stream)")
        self.timeout_s = request_timeout_s
        self.metrics = metrics
        self.owned = owned
        self.lanes: dict[str, _Lane] = {}
        if transcribers:
            self.lanes[TRANSCRIBE] = _Lane(TRANSCRIBE, [ServedEngine(f"whisper{i}", m) for i, m in enumerate(transcribers)],
                                           max_queue, retry_after_s, metrics)
        if speakers:
            # a speaker that generates N streams at once (``runtime.tts.batch``) is N served slots
            slots = [(f"speech{i}" + (f".{k}" if n > 1 else ""), s) for i, s in enumerate(speakers)
                     for n in (getattr(s, "streams", 1),) for k in range(n)]
            self.lanes[SPEECH] = _Lane(SPEECH, [ServedEngine(name, s) for name, s in slots],
                                       max_queue, retry_after_s, metrics)
        self.closing = False

    # -- what is served ---------------------------------------------------------------------

    def has(self, kind: str) -> bool:
        return kind in self.lanes

    def first_model(self, kind: str):
        """One engine's model (for describing what is served: languages, voices, sample rate)."""
        self._lane(kind)
        return self.lanes[kind].engines[0].model

    def _lane(self, kind: str) -> _Lane:
        if kind not in self.lanes:
            what = "transcription (start with --asr-model-dir)" if kind == TRANSCRIBE else \
                "speech (start with --tts-model-dir)"
            raise Unavailable(f"this server does not serve {what}")
        return self.lanes[kind]

    def check_capacity(self, kind: str, client=None) -> None:
        """Raise what :meth:`run` would raise at once (not served, shutting down, full), so a
        front end can refuse before reading or decoding a request."""
        lane = self._lane(kind)
        if lane.closed:
            raise ShuttingDown()
        if not lane.has_room(client):
            raise Busy(kind, lane.retry_after_s)

    def has_free(self, kind: str) -> bool:
        """An engine of ``kind`` is free and nobody waits: work that is worth doing only when it
        costs no one anything (a partial transcript) may start now."""
        lane = self._lane(kind)
        return not lane.closed and lane.busy < len(lane.engines) and lane.waiting == 0

    def status(self) -> dict:
        return {kind: {"engines": len(lane.engines), "busy": lane.busy, "waiting": lane.waiting,
                       "max_queue": lane.max_queue, "served": sum(e.served for e in lane.engines)}
                for kind, lane in self.lanes.items()}

    # -- running work -----------------------------------------------------------------------

    def deadline(self) -> float:
        return time.monotonic() + self.timeout_s

    def _left(self, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimedOut(self.timeout_s)
        return left

    async def _acquire(self, kind: str, deadline: float, client=None,
                       gone: Callable[[], bool] | None = None) -> ServedEngine:
        """A free engine of ``kind``, waiting in its lane until the deadline (:class:`TimedOut`);
        with ``gone``, checked every :data:`GONE_POLL_S` while waiting: a client that left is
        out of the wait line within that (:class:`ClientGone`), its request never computed (a
        Wyoming client's speech request once waited, then ran for nobody)."""
        lane = self._lane(kind)
        start = time.perf_counter()
        waiter = asyncio.ensure_future(lane.acquire(client))
        engine = None
        try:
            while True:
                left = self._left(deadline)  # TimedOut when the time is up
                done, _ = await asyncio.wait({waiter}, timeout=left if gone is None else min(left, GONE_POLL_S))
                if done:
                    engine = waiter.result()
                    break
                if gone is not None and gone():
                    raise ClientGone()
        finally:
            if engine is None:
                # leaving without the engine: also when the waiter was handed one and this request
                # was cancelled before it woke up (a client that left just as its request reached a
                # free engine) -- that engine goes back, or the lane stays busy for good
                await _give_up(lane, waiter)
        if self.metrics is not None:
            self.metrics.stage_seconds.labels(f"{kind}_queue").observe(time.perf_counter() - start)
        return engine

    def _timed(self, kind: str, engine: ServedEngine, fn: Callable, *args):
        def call():
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                spent = time.perf_counter() - start
                engine.busy_s += spent
                if self.metrics is not None:
                    self.metrics.engine_busy.labels(kind, engine.name).inc(spent)
        return call

    async def run(self, kind: str, fn: Callable, *args, deadline: float | None = None, client=None):
        """``fn(model, *args)`` on a free engine of ``kind``, in that engine's thread."""
        deadline = deadline or self.deadline()
        lane = self._lane(kind)
        engine = await self._acquire(kind, deadline, client)
        loop = asyncio.get_running_loop()
        try:
            fut = loop.run_in_executor(engine.executor, self._timed(kind, engine, fn, engine.model, *args))
        except BaseException:
            lane.release(engine)
            raise
        engine.served += 1
        fut.add_done_callback(lambda _: lane.release(engine))  # only when the call really ended
        try:
            return await asyncio.wait_for(asyncio.shield(fut), self._left(deadline))
        except asyncio.TimeoutError:
            raise TimedOut(self.timeout_s) from None

    async def stream(self, kind: str, open_iter: Callable, *args, deadline: float | None = None,
                     client=None, gone: Callable[[], bool] | None = None, budget=None,
                     ahead_bytes: int = RUN_AHEAD_BYTES) -> AsyncIterator:
        """Items of ``open_iter(model, *args)`` (an iterator) as they come, each ``next`` in the
        engine's thread.  Generation runs ahead of the consumer into a queue, so the engine is
        freed when the iterator ends, not when a client has read it all, as long as what runs
        ahead stays within ``ahead_bytes`` (items' ``nbytes``: audio chunks; transcript segments
        count 0) and ``budget`` (:class:`rkspeech.serve.limits.MemoryBudget`, charged while an item
        waits in the queue).  Past either, the engine waits for the consumer, at most until the
        deadline (:class:`TimedOut`); a client that stops reading is dropped by then by its front
        end's write deadline, which ends the stream and frees the engine.  The item the consumer
        is waiting for is handed over whatever the budget (it is not ahead).  A consumer
        that stops early stops the generation; so does ``gone()`` (the front end's "the client
        closed the connection"), checked before each item: a consumer that has nothing to send yet
        (a transcription of silence has no partial text) never writes, so it would not find out
        that its client left -- the whole input was decoded for nobody.  The stream then ends
        with :class:`ClientGone`."""
        queue = _RunAhead(ahead_bytes, budget.lease() if budget is not None else None)
        producer = asyncio.ensure_future(self._produce(kind, open_iter, args, deadline or self.deadline(), queue,
                                                   client, gone))
        try:
            while True:
                item = await queue.get()
                if item is _END:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if not producer.done():
                producer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await producer
            queue.close()

    async def _produce(self, kind: str, open_iter: Callable, args: tuple, deadline: float,
                       queue: _RunAhead, client=None, gone: Callable[[], bool] | None = None) -> None:
        lane = self._lane(kind)
        try:
            engine = await self._acquire(kind, deadline, client, gone)
        except Exception as exc:  # noqa: BLE001 - handed to the consumer
            queue.put_nowait(exc)
            return
        loop = asyncio.get_running_loop()
        done = object()
        iterator = None
        pending = None
        try:
            if gone is not None and gone():  # it left while waiting for the engine
                raise ClientGone()
            engine.served += 1
            pending = loop.run_in_executor(engine.executor, self._timed(kind, engine, lambda: iter(open_iter(engine.model, *args))))
            iterator = await asyncio.shield(pending)
            while True:
                if gone is not None and gone():
                    raise ClientGone()
                pending = loop.run_in_executor(engine.executor, self._timed(kind, engine, next, iterator, done))
                try:
                    item = await asyncio.wait_for(asyncio.shield(pending), self._left(deadline))
                except asyncio.TimeoutError:
                    raise TimedOut(self.timeout_s) from None
                if item is done:
                    queue.put_nowait(_END)
                    return
                await queue.put(item, lambda: self._left(deadline), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the consumer
            queue.put_nowait(exc)
        finally:
            # close the iterator in its thread after any running next(), then free the engine
            close = getattr(iterator, "close", None)
            try:
                tail = loop.run_in_executor(engine.executor, close) if close else pending
            except RuntimeError:  # the executor is already shut down
                tail = None
            if tail is not None:
                tail.add_done_callback(lambda _: lane.release(engine))
            else:
                lane.release(engine)

    # -- shutdown ---------------------------------------------------------------------------

    async def shutdown(self, grace_s: float = 30.0) -> bool:
        """Refuse new and waiting requests, let running ones finish (at most ``grace_s``), stop the
        worker threads, close owned models.  True when every engine was idle at the end."""
        self.closing = True
        for lane in self.lanes.values():
            lane.close()
        end = time.monotonic() + grace_s
        while not all(lane.idle() for lane in self.lanes.values()) and time.monotonic() < end:
            await asyncio.sleep(0.02)
        idle = all(lane.idle() for lane in self.lanes.values())
        closed: set[int] = set()  # a batching engine serves several slots: closed once
        for lane in self.lanes.values():
            for engine in lane.engines:
                engine.executor.shutdown(wait=False, cancel_futures=True)
                if self.owned and idle and id(engine.model) not in closed:
                    closed.add(id(engine.model))
                    close = getattr(engine.model, "close", None)
                    if close is not None:
                        with contextlib.suppress(Exception):
                            close()
        return idle


class _RunAhead:
    """The queue between a stream's producer and its consumer: items not yet taken, at most
    ``limit`` bytes of them (``nbytes``), charged to ``lease`` while queued (None: not charged)."""

    def __init__(self, limit: int, lease=None):
        self.limit, self.lease = limit, lease
        self._queue: asyncio.Queue = asyncio.Queue()
        self._taken = asyncio.Event()
        self.bytes = 0

    def put_nowait(self, item) -> None:
        """An end or an error: no size, no wait."""
        self._queue.put_nowait((item, 0, 0))

    async def put(self, item, left: Callable[[], float], timeout_s: float) -> None:
        """Queue ``item`` once there is room in the limit and the budget; the wait ends at the
        deadline (``left()`` raises or gives the seconds left)."""
        n = int(getattr(item, "nbytes", 0))
        while not self._queue.empty():
            if self.bytes + n <= self.limit and (self.lease is None or self.lease.try_add(n)):
                self._queue.put_nowait((item, n, n if self.lease is not None else 0))
                self.bytes += n
                return
            self._taken.clear()
            try:
                await asyncio.wait_for(self._taken.wait(), left())
            except asyncio.TimeoutError:
                raise TimedOut(timeout_s) from None
        # the consumer waits for this one: handed over (charged when the budget allows)
        charged = n if self.lease is not None and self.lease.try_add(n) else 0
        self._queue.put_nowait((item, n, charged))
        self.bytes += n

    async def get(self):
        item, n, charged = await self._queue.get()
        self.bytes -= n
        if charged:
            self.lease.give_back(charged)
        self._taken.set()
        return item

    def close(self) -> None:
        """Give back what is still queued (the consumer stopped early)."""
        if self.lease is not None:
            self.lease.release()
