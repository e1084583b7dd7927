"""Several independent vocoder streams at once over a bounded set of execution contexts.

A *slot* is one execution context: a runner per role (``main``, optionally ``first``).  A
stream is an ordinary :class:`~rkspeech.runtime.tts.streaming.StreamingVocoder` that owns its cache,
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
Which graph a backend runs is the plan's answer (:meth:`~rkspeech.plan.plan.Plan.graphs`):
``ort`` the exact host graphs of a plan that has them (``host_onnx``), else its ``onnx``;
``sim`` the ONNX the .rknn was converted from; ``rknnlite`` the .rknn.

* ``ort`` (host): ONE onnxruntime session per role, shared by all slots.  onnxruntime documents
  ``InferenceSession.run`` as safe to call from several threads, and the session holds no
  stream state (the cache is a graph input/output owned by each StreamingVocoder), so sharing
  is safe and costs one copy of the weights.  The slots only bound how many runs overlap (each
  run already uses ``threads`` intra-op threads, default ``core.threads.default_threads()``;
  the default slot count is ``cpu_count // threads``, at least 1, so the cores are not
  oversubscribed).
* ``sim``: one simulator build per role (a conversion each, in a child process), one slot.

A stream's engines are runners (:class:`~rkspeech.runtime.runners.base.Runner`) with the specs
of the role's runners (every slot must run the same graph per role), so a bad feed is refused
before a slot is leased.

``engine_s`` in a stream's timings includes the time spent waiting for a slot.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.runners import BACKENDS, open_runner
from rkspeech.runtime.runners.base import Runner
from rkspeech.runtime.tts.streaming import Engine, StreamingVocoder
from rkspeech.contracts.vocoder import VocoderContract


@dataclass
class Slot:
    """One execution context: ``runners[role]`` for ``main`` (and ``first``)."""

    name: str
    runners: dict[str, Runner]
    steps: int = 0


class _Lease(Runner):
    """One role of the pool as a runner: the feed is checked against the role's specs, then
    runs on whichever slot is free."""

    def __init__(self, role: str, pool: "EnginePool"):
        super().__init__()
        self.role, self.pool = role, pool
        self.name = f"pool:{role}"
        self._inputs, self._outputs = pool.specs[role]

    def _infer(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with self.pool.lease() as slot:
            return slot.runners[self.role].infer(arrays)


class EnginePool:
    """A bounded set of slots shared by any number of streams."""

    def __init__(self, slots: Sequence[Slot], contracts: dict[str, VocoderContract], owned: Iterable = ()):
        if not slots:
            raise RkspeechError("an engine pool needs at least one slot")
        if "main" not in contracts:
            raise RkspeechError("an engine pool needs a main contract")
        for s in slots:
            missing = set(contracts) - set(s.runners)
            if missing:
                raise RkspeechError(f"slot {s.name} has no runner for {sorted(missing)}")
        self.specs: dict[str, tuple[dict, dict]] = {}
        for role in contracts:
            for s in slots:
                r = s.runners[role]
                if not isinstance(r, Runner):
                    raise TypeError(f"slot {s.name}: the {role} runner is a {type(r).__name__}, not a Runner")
                specs = (r.input_specs(), r.output_specs())
                if self.specs.setdefault(role, specs) != specs:
                    raise RkspeechError(f"slot {s.name} runs a different {role} graph than slot "
                                        f"{slots[0].name} (input/output specs differ)")
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

    def open_stream(self, *, eager: bool = False) -> StreamingVocoder:
        """A new independent stream whose steps run on whichever slot is free (``eager``: see
        ``StreamingVocoder``)."""
        main = Engine(_Lease("main", self), self.contracts["main"])
        first = Engine(_Lease("first", self), self.contracts["first"]) if "first" in self.contracts else None
        return StreamingVocoder(main, first, eager=eager)

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
              core_mask: Sequence[str] | None = None, target: str | None = None, spin: bool = True) -> EnginePool:
    """An :class:`EnginePool` over a loaded :class:`~rkspeech.plan.plan.Plan` (see module docstring);
    ``spin``: onnxruntime's (``OnnxRuntimeRunner``)."""
    if backend not in BACKENDS:
        raise RkspeechError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    contracts = {role: plan.contracts[role] for role in plan.roles()}
    graphs = plan.graphs(backend)  # the plan says which graph each backend runs
    missing = [role for role in contracts if role not in graphs]
    if missing:
        raise RkspeechError(f"plan {plan.path}: backend {backend} runs the vocoder's {plan.kind(backend)} graphs, "
                            f"which hold no {', '.join(missing)} graph")
    owned: list[Runner] = []
    try:
        if backend == "ort":
            from rkspeech.core.threads import default_threads

            threads = threads or default_threads()
            shared = {}
            for role in contracts:
                shared[role] = open_runner("ort", graphs[role], threads=threads, spin=spin)
                owned.append(shared[role])
            n = size or max(1, (os.cpu_count() or 1) // threads)
            slots = [Slot(f"ort{i}", dict(shared)) for i in range(n)]
        elif backend == "rknnlite":
            from rkspeech.core.targets import cores_for

            masks = tuple(core_mask) if core_mask else cores_for(target or plan.target)
            if size:
                masks = tuple(masks[i % len(masks)] for i in range(size))
            slots = []
            for i, mask in enumerate(masks):
                runners = {}
                for role in contracts:
                    runners[role] = open_runner("rknnlite", graphs[role], core_mask=mask)
                    owned.append(runners[role])
                slots.append(Slot(f"npu{mask}" if mask != "auto" else f"npu-auto{i}", runners))
        else:
            raw = plan.raw if isinstance(plan.raw, dict) else {}
            dtype = (raw.get("build") or {}).get("dtype", "fp16")
            runners = {}
            for role in contracts:
                runners[role] = open_runner("sim", graphs[role], target=target or plan.target, dtype=dtype)
                owned.append(runners[role])
            slots = [Slot("sim0", runners)]
        return EnginePool(slots, contracts, owned=owned)
    except BaseException:
        for r in owned:
            try:
                r.close()
            except Exception:  # noqa: BLE001 - the original error matters more
                pass
        raise
