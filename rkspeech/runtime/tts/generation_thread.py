"""A frame generator run in a thread of its own while the caller vocodes (``Speaker.stream``)."""

from __future__ import annotations

import contextlib
import time

import numpy as np


class Generation:
    """Runs the frame generator in its own thread (holding ``lock``: one generation per Speaker)
    while the caller's thread runs the vocoder, so the two overlap: on a board the NPU vocodes
    while the CPU generates; here onnxruntime and torch release the GIL in their kernels.
    Frames come out in order, through a bounded queue (``QUEUE_FRAMES``: a vocoder slower than
    generation holds back the generator, not memory).  An exception in the generator is raised
    in the caller's thread; a caller that stops early (a client gone) stops the generator
    before its next frame.  ``timing``: the stream's ``SpeechTiming`` (frames, generation seconds).
    ``rounds``: a batch's (``runtime.tts.batch``), which the generating
    thread joins while it generates and steps out of while the queue is full."""

    QUEUE_FRAMES = 32
    _DONE = object()

    def __init__(self, frames, lock, timing, codes_out: list | None, rounds=None):
        import queue
        import threading

        self._frames, self._lock, self._timing, self._codes_out = frames, lock, timing, codes_out
        self._rounds = rounds
        self._queue: queue.Queue = queue.Queue(self.QUEUE_FRAMES)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rkspeech-generate", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self._drain()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:  # unblock a producer waiting on a full queue
                self._queue.get_nowait()
            except Exception:  # noqa: BLE001 - queue.Empty
                pass
            self._thread.join(timeout=0.05)

    def _put(self, item) -> bool:
        import queue

        try:
            self._queue.put_nowait(item)
            return True
        except queue.Full:
            pass
        with self._rounds.away() if self._rounds is not None else contextlib.nullcontext():
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.05)
                    return True
                except queue.Full:
                    continue
        return False

    def _run(self) -> None:
        timing = self._timing
        try:
            with self._lock, self._rounds.joined() if self._rounds is not None else contextlib.nullcontext():
                it = iter(self._frames)
                try:
                    while not self._stop.is_set():
                        t0 = time.perf_counter()
                        try:
                            frame = next(it)
                        except StopIteration:
                            timing.generate_s += time.perf_counter() - t0
                            break
                        timing.generate_s += time.perf_counter() - t0
                        frame = np.asarray(frame, dtype=np.int64).reshape(1, -1)
                        timing.frames += 1
                        if self._codes_out is not None:
                            self._codes_out.append(frame[0].copy())
                        if not self._put(frame):
                            break
                finally:
                    close = getattr(it, "close", None)
                    if close is not None:
                        close()
            self._put(self._DONE)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._put(exc)

    def _drain(self):
        while True:
            item = self._queue.get()
            if item is self._DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
