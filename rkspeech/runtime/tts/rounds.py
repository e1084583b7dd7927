"""The rounds of lanes' graph calls (``runtime.tts.lanes``): each thread's request waits until every
joined thread has asked, then one call serves them all."""

from __future__ import annotations

import contextlib
import threading

import numpy as np


class Rounds:
    """The threads of one :meth:`map` and the graph calls they wait on."""

    def __init__(self):
        self._cv = threading.Condition()
        self._live = 0
        self._pending: list[_Request] = []
        self._local = threading.local()
        #: rounds run and graph calls made (all groups), for the gate's timing record
        self.rounds = 0
        self.calls = 0

    def map(self, fn, items) -> list:
        """``[fn(item) for item in items]``, each call in a thread of its own, their lanes' graph
        calls gathered into rounds; the first exception raised by any ``fn`` is raised here, after
        every thread has ended."""
        items = list(items)
        results: list = [None] * len(items)
        errors: list[BaseException | None] = [None] * len(items)
        ready = threading.Barrier(len(items) + 1) if items else None

        def work(k):
            with self.joined():
                ready.wait()  # every thread joins before any asks: the first round holds them all
                try:
                    results[k] = fn(items[k])
                except BaseException as exc:  # noqa: BLE001 - re-raised by map
                    errors[k] = exc

        if not items:
            return []
        threads = [threading.Thread(target=work, args=(k,), name=f"lane-{k}", daemon=True) for k in range(len(items))]
        for t in threads:
            t.start()
        ready.wait()
        for t in threads:
            t.join()
        for exc in errors:
            if exc is not None:
                raise exc
        return results

    @contextlib.contextmanager
    def joined(self):
        """This thread's lane calls wait for the round (continuous batching: a stream joins the
        running batch at any step and leaves it when the block ends; a round runs when every
        joined thread has asked)."""
        if getattr(self._local, "worker", False):
            raise RuntimeError("this thread has joined these rounds already")
        with self._cv:
            self._live += 1
        self._local.worker = True
        try:
            yield self
        finally:
            self._local.worker = False
            with self._cv:
                self._live -= 1
                self._fire_if_ready()

    @contextlib.contextmanager
    def away(self):
        """A joined thread that waits on something other than a graph call (its listener, a full
        queue) steps out of the rounds meanwhile, so that the others' rounds go on without it."""
        if not getattr(self._local, "worker", False):
            yield
            return
        with self._cv:
            self._live -= 1
            self._fire_if_ready()
        try:
            yield
        finally:
            with self._cv:
                self._live += 1

    def request(self, group, lane: int, rows: np.ndarray) -> np.ndarray:
        """The last row's hidden state of ``rows`` appended to ``lane`` of ``group``: at once
        outside :meth:`map`, else when the round runs."""
        req = _Request(group, lane, rows)
        if not getattr(self._local, "worker", False):
            group.execute([req])
            return req.result()
        with self._cv:
            self._pending.append(req)
            self._fire_if_ready()
            while not req.done:
                self._cv.wait()
        return req.result()

    def _fire_if_ready(self) -> None:
        """Run the round when every live thread waits (the lock is held)."""
        if not self._pending or len(self._pending) < self._live:
            return
        pending, self._pending = self._pending, []
        try:
            by_group: dict[int, tuple[object, list]] = {}
            for r in pending:
                by_group.setdefault(id(r.group), (r.group, []))[1].append(r)
            for group, reqs in by_group.values():
                self.calls += group.execute(reqs)
        except BaseException as exc:  # noqa: BLE001 - each waiting thread raises it
            for r in pending:
                if not r.done:
                    r.error, r.done = exc, True
        self.rounds += 1
        self._cv.notify_all()


class _Request:
    __slots__ = ("group", "lane", "rows", "hidden", "error", "done")

    def __init__(self, group, lane: int, rows: np.ndarray):
        self.group, self.lane, self.rows = group, lane, rows
        self.hidden = self.error = None
        self.done = False

    def result(self) -> np.ndarray:
        if self.error is not None:
            raise self.error
        return self.hidden
