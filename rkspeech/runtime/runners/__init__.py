"""Runners: one interface (:class:`~rkspeech.runtime.runners.base.Runner`) over onnxruntime, the
rknn-toolkit2 x86 simulator and rknn-toolkit-lite2 on a board, and :func:`open_runner` to open
one by backend name.

One file per backend: ``onnxruntime``, ``simulator`` (in-process, used inside the simulator
child), ``sim_process`` (the simulator in a child process), ``segmented`` (the simulator in
pieces), ``rknnlite``, ``torch_step`` (the torch vocoder step, for checks), ``lazy`` (opens its
backend on the first call).

Standard library only at import time (the CLI imports :data:`BACKENDS` for its argument
parser); numpy and the backends are imported when a runner is opened.
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: Backend names, as the CLI and :func:`open_runner` spell them.
BACKENDS = ("ort", "sim", "rknnlite")

_KIND = {"ort": ".onnx", "sim": ".onnx", "rknnlite": ".rknn"}
_WHY = {"ort": "onnxruntime runs the .onnx graph",
        "sim": "the x86 simulator builds from the .onnx graph; it cannot run a .rknn",
        "rknnlite": "rknn-toolkit-lite2 runs the converted .rknn on the board"}


def check_runner_file(backend: str, path: str | os.PathLike) -> Path:
    """``path`` as a Path when it exists and is the kind of file ``backend`` runs."""
    if backend not in BACKENDS:
        raise RkspeechError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    path = Path(path)
    if not path.is_file():
        raise RkspeechError(f"{path}: no such file (backend {backend} needs a {_KIND[backend]} file)")
    if path.suffix.lower() != _KIND[backend]:
        raise RkspeechError(f"backend {backend} needs a {_KIND[backend]} file, got {path.name} "
                            f"({_WHY[backend]})")
    return path


def open_runner(backend: str, path: str | os.PathLike, *, threads: int | None = None,
                target: str | None = None, dtype: str = "fp16", memory_limit_mb: float | None | str = "auto",
                log_path: str | None = None, pieces: int = 1, core_mask: str | None = None,
                dataset: str | None = None, hybrid: dict | None = None, pass_through: bool = False,
                reuse_outputs: bool = False, spin: bool = True):
    """Open ``path`` on ``backend`` (one of :data:`BACKENDS`); returns a Runner.

    * ``ort``: :class:`OnnxRuntimeRunner` with ``threads`` intra-op threads (default
      :func:`rkspeech.core.threads.default_threads`); ``spin=False``: its idle threads sleep.
    * ``sim``: the simulator, always in a child process (:class:`SimulatorProcess`; with
      ``pieces`` > 1 the graph in that many pieces, :class:`SegmentedSimulator`), built for
      ``target`` (default rk3588) and ``dtype``; ``memory_limit_mb``: kill the child above it
      ("auto": 90 % of the memory available now; None: leave it to the kernel); the toolkit's
      output goes to ``log_path`` (or is discarded); ``dataset``: the calibration list of an
      ``int8`` / ``int16-hybrid`` build, ``hybrid`` the latter's
      ``HybridInt16Options.to_dict()`` (one piece only).
    * ``rknnlite``: :class:`RknnLiteRunner` pinned to ``core_mask`` (default "auto");
      ``pass_through`` / ``reuse_outputs``: the runtime's own options, where the graph's inputs
      and the caller allow them (the class says when).

    Options that do not apply to ``backend`` are ignored.  A missing file, a wrong file kind or
    an unknown backend is a one-line RkspeechError.
    """
    path = check_runner_file(backend, path)
    if backend == "ort":
        from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner

        return OnnxRuntimeRunner(path, threads=threads, spin=spin)
    if backend == "rknnlite":
        from rkspeech.runtime.runners.rknnlite import RknnLiteRunner

        return RknnLiteRunner(path, core_mask=core_mask or "auto", pass_through=pass_through,
                              reuse_outputs=reuse_outputs)
    from rkspeech.core.targets import DEFAULT_TARGET, TARGETS

    if memory_limit_mb == "auto":
        from rkspeech.core.child import default_memory_limit_mb

        memory_limit_mb = default_memory_limit_mb()
    if pieces < 1:
        raise RkspeechError(f"the simulator runs a graph in >= 1 pieces, got {pieces}")
    target = (target or DEFAULT_TARGET).lower()
    if target not in TARGETS:
        raise RkspeechError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    if pieces > 1:
        from rkspeech.runtime.runners.segmented import SegmentedSimulator

        return SegmentedSimulator(path, n_pieces=pieces, target=target, dtype=dtype,
                                  memory_limit_mb=memory_limit_mb, log_path=log_path)
    from rkspeech.runtime.runners.sim_process import SimulatorProcess

    extra = {"dataset": os.path.abspath(dataset)} if dataset else {}
    if hybrid:
        extra["hybrid"] = hybrid
    return SimulatorProcess(path, target=target, dtype=dtype, memory_limit_mb=memory_limit_mb,
                            log_path=log_path, **extra)
