"""Several independent vocoder streams at once over a bounded set of execution contexts.

A *slot* is one execution context: a runner per role (``main``, optionally ``first``).  A
stream is an ordinary :class:`~rkspeech.runtime.streaming.StreamingVocoder` that owns its cache,
position and pending tokens; its engines are proxies that lease a free slot for the duration
of one ``infer`` call and give it back.  Nothing about a stream lives in a slot, so any step of
any stream may run on any slot, and streams never see each other's state.

Slots are leased first-in first-out from a queue: a slot goes to the back when it is returned,
so one thread stepping one stream visits the slots round robin (0, 1, 2, 0, ...), and several
threads get whichever slot has been free longest.  The queue is also the concurrency bound:
at most ``len(slots)`` steps run at the same time; other callers block in ``infer``.

What a slot is, per backend (see :func:`open_pool`):

* ``rknnlite`` (board): one RKNNLite context per NPU core, pinned with core masks "0", "1", "2"
  (rk3588; "0", "1" on rk3576; "auto" on single-core chips).  An RKNNLite context is not
  documented as thread-safe, so each slot has its own, and the lease keeps one caller per
  context.  Each context loads the model (a published-size B=64 fp16 .rknn is 655 MB, field
  notes), so three slots cost three copies.
* ``ort`` (host): ONE onnxruntime session per role, shared by all slots.  onnxruntime documents
  ``InferenceSession.run`` as safe to call from several threads, and the session holds no
  stream state (the cache is a graph input/output owned by each StreamingVocoder), so sharing
  is safe and costs one copy of the weights.  The slots only bound how many runs overlap (each
  run already uses ``threads`` intra-op threads; the default is ``cpu_count // threads``, at
  least 1, so the cores are not oversubscribed).
* ``sim``: one simulator build per role (a conversion each), one slot.

``engine_s`` in a stream's timings includes the time spent waiting for a slot.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import numpy as np

from ..errors import RkspeechError
from ..streaming.contract import StepContract
from .streaming import Engine, StreamingVocoder

#: NPU core masks per chip for one context per core (rknn-toolkit-lite2 names)
CORES_BY_TARGET = {"rk3588": ("0", "1", "2"), "rk3576": ("0", "1")}


@dataclass
class Slot:
    """One execution context: ``runners[role]`` for ``main`` (and ``first``)."""

    name: str
    runners: dict[str, object]
    steps: int = 0


@dataclass
class _Lease:
    role: str
    pool: "EnginePool"
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = f"pool:{self.role}"

    def infer(self, feed):
        with self.pool.lease() as slot:
            return slot.runners[self.role].infer(feed)


class EnginePool:
    """A bounded set of slots shared by any number of streams."""

    def __init__(self, slots: Sequence[Slot], contracts: dict[str, StepContract], owned: Iterable = ()):
        if not slots:
            raise RkspeechError("an engine pool needs at least one slot")
        if "main" not in contracts:
            raise RkspeechError("an engine pool needs a main contract")
        for s in slots:
            missing = set(contracts) - set(s.runners)
            if missing:
                raise RkspeechError(f"slot {s.name} has no runner for {sorted(missing)}")
        self.slots = list(slots)
        self.contracts = dict(contracts)
        self._free: queue.Queue[Slot] = queue.Queue()
        for s in self.slots:
            self._free.put(s)
        self._owned = list(owned)  # runners to close (shared ones appear once)
        self._lock = threading.Lock()
        self.history: list[str] = []  # slot name per step, in lease order

    @property
    def size(self) -> int:
        return len(self.slots)

    @contextlib.contextmanager
    def lease(self):
        slot = self._free.get()
        try:
            with self._lock:
                slot.steps += 1
                self.history.append(slot.name)
            yield slot
        finally:
            self._free.put(slot)

    def open_stream(self) -> StreamingVocoder:
        """A new independent stream whose steps run on whichever slot is free."""
        main = Engine(_Lease("main", self), self.contracts["main"])
        first = Engine(_Lease("first", self), self.contracts["first"]) if "first" in self.contracts else None
        return StreamingVocoder(main, first)

    def decode_many(self, streams: Sequence, *, piece: int | None = None,
                    workers: int | None = None) -> list[np.ndarray]:
        """Decode several code arrays at once, one thread per stream (at most ``workers``).

        Each thread pushes its codes in pieces of ``piece`` tokens (default: the main B) and
        flushes; the result list is in input order.
        """
        step = piece or self.contracts["main"].codes_length

        def one(codes) -> np.ndarray:
            sv = self.open_stream()
            arr = np.asarray(codes)
            tq = arr if arr.ndim == 2 and arr.shape[-1] == sv.contract.num_quantizers else None
            if tq is None:  # let push validate/normalize other layouts in one go
                return sv.decode(codes)
            out = [sv.push(tq[i:i + step]) for i in range(0, len(tq), step)]
            out.append(sv.flush())
            return np.concatenate(out)

        with ThreadPoolExecutor(max_workers=workers or max(1, len(streams))) as ex:
            return list(ex.map(one, streams))

    def close(self) -> None:
        for r in self._owned:
            try:
                r.close()
            except Exception:  # noqa: BLE001 - closing is best effort
                pass
        self._owned = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_pool(plan, backend: str = "ort", *, size: int | None = None, threads: int | None = None,
              core_masks: Sequence[str] | None = None, target: str | None = None) -> EnginePool:
    """An :class:`EnginePool` over a loaded :class:`~rkspeech.plan.Plan` (see module docstring)."""
    contracts = {role: plan.contracts[role] for role in plan.roles()}
    if backend == "ort":
        from .runners import OnnxRuntimeRunner

        threads = threads or int(os.environ.get("RKSPEECH_THREADS", "0")) or None
        shared = {role: OnnxRuntimeRunner(plan.onnx[role], threads=threads) for role in contracts}
        n = size or max(1, (os.cpu_count() or 1) // (threads or (os.cpu_count() or 1)))
        slots = [Slot(f"ort{i}", dict(shared)) for i in range(n)]
        return EnginePool(slots, contracts, owned=shared.values())
    if backend == "rknnlite":
        from .runners import RknnLiteRunner

        chip = (target or plan.target or "").lower()
        masks = tuple(core_masks) if core_masks else CORES_BY_TARGET.get(chip, ("auto",))
        if size:
            masks = tuple(masks[i % len(masks)] for i in range(size))
        slots, owned = [], []
        try:
            for i, mask in enumerate(masks):
                runners = {role: RknnLiteRunner(plan.artifacts[role], core_mask=mask) for role in contracts}
                owned += runners.values()
                slots.append(Slot(f"npu{mask}" if mask != "auto" else f"npu-auto{i}", runners))
        except BaseException:
            for r in owned:
                r.close()
            raise
        return EnginePool(slots, contracts, owned=owned)
    if backend == "sim":
        from .sim_process import SimulatorProcess

        chip = target or plan.target or "rk3588"
        dtype = (plan.raw.get("build") or {}).get("dtype", "fp16") if isinstance(plan.raw, dict) else "fp16"
        runners = {}
        try:
            for role in contracts:
                runners[role] = SimulatorProcess(plan.onnx[role], target=chip, dtype=dtype)
        except BaseException:
            for r in runners.values():
                r.close()
            raise
        return EnginePool([Slot("sim0", runners)], contracts, owned=runners.values())
    raise RkspeechError(f"unknown backend {backend!r}; choose ort, sim or rknnlite")
