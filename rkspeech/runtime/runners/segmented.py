"""The simulator for graphs too big for it: the ONNX cut into consecutive pieces
(:func:`rkspeech.export.split.split_onnx`), simulated one after another, each in its own child
process.

Why: the simulator keeps every intermediate tensor.  The npu formulation of the published
vocoder step at B=64 passed 15.3 GB in its first inference (and was killed by the kernel at
24.2 GB in-process), so on a 24 GB machine it cannot be simulated whole.  In K pieces, each
child holds about 1/K of the activations.

Each piece is built and run for every call, one at a time, so a call costs K builds: slow, but
bounded memory.  Numerics: the pieces meet in fp16 at the cuts, exactly where the whole graph
would hold fp16 too; fusions across a cut are lost (the SNR of whole vs pieces is measured in
the tests on the reduced step).

Pieces already on disk (the Whisper encoder a ``pieces > 1`` build wrote, listed in its
``encoder-pieces.json``) run the same way: :meth:`SegmentedSimulator.from_pieces` on the
simulator, :class:`PiecesRunner` over one open runner per piece (onnxruntime: one session per
piece; rknn-toolkit-lite2: one context per piece).  Either way a tensor goes from one piece to
the next by name, so pieces listed out of order are refused by :func:`chain_specs` before
anything runs.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET
from rkspeech.runtime.runners.base import Runner, Spec, onnx_io_specs


def chain_specs(pieces: list[tuple[dict[str, Spec], dict[str, Spec]]], names: list[str] | None = None
                ) -> tuple[dict[str, Spec], dict[str, Spec]]:
    """(inputs, outputs) of consecutive pieces, each given as its (input specs, output specs),
    run as one graph: the inputs no earlier piece produces (the first piece's, and graph inputs
    a later piece reads), the outputs no later piece reads.  A piece whose every input is one no
    earlier piece produces, after the first, is out of order: a one-line RkspeechError
    (``names``: how to call the pieces in it)."""
    if not pieces:
        raise RkspeechError("no pieces to chain")
    names = names or [f"piece {k}" for k in range(len(pieces))]
    inputs: dict[str, Spec] = {}
    produced: dict[str, int] = {}
    for k, (ins, outs) in enumerate(pieces):
        if k and ins and not any(n in produced for n in ins):
            raise RkspeechError(f"{names[k]} reads {', '.join(ins)}, which no earlier piece writes: the pieces are "
                                "out of order or from different builds")
        for n, spec in ins.items():
            if n not in produced:
                inputs.setdefault(n, spec)
        for n in outs:
            produced[n] = k
    read_after = {n: k for k, (ins, _) in enumerate(pieces) for n in ins}
    outputs = {n: spec for k, (_, outs) in enumerate(pieces) for n, spec in outs.items()
               if read_after.get(n, -1) <= k}
    return inputs, outputs


def _fit(a: np.ndarray, spec: Spec) -> np.ndarray:
    """``a`` reshaped to a piece's declared static shape when only the layout differs (a board
    .rknn may record the flat tensor crossing a cut as [1, N])."""
    shape = spec[0]
    if (all(isinstance(d, (int, np.integer)) and d > 0 for d in shape) and tuple(a.shape) != tuple(shape)
            and a.size == int(np.prod(shape, dtype=np.int64))):
        return a.reshape(shape)
    return a


class PiecesRunner(Runner):
    """Consecutive pieces, each open in its own runner (all held open), run in turn; a tensor
    crossing a cut is handed on by name.  ``infer`` takes and returns what the whole graph
    would (:func:`chain_specs`).  Closing it closes every piece."""

    name = "pieces"

    def __init__(self, runners: list[Runner], names: list[str] | None = None):
        super().__init__()
        self.runners = list(runners)
        self._inputs, self._outputs = chain_specs([(r.input_specs(), r.output_specs()) for r in self.runners],
                                                  names)

    def _infer(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        if not self.runners:
            raise RkspeechError(f"{self.name}: the runner is closed")
        env = dict(arrays)
        for runner in self.runners:
            env.update(runner.infer({n: _fit(env[n], spec) for n, spec in runner.input_specs().items()}))
        return [env[n] for n in self._outputs]

    def close(self) -> None:
        runners, self.runners = self.runners, []
        for runner in runners:
            runner.close()


class SegmentedSimulator(Runner):
    """``infer(feed)`` runs the ``n_pieces`` pieces of ``onnx_path`` one after another, each built
    in its own :class:`SimulatorProcess` and freed before the next (``peak_rss_mb``: the
    largest child)."""

    name = "rknn-simulator-pieces"

    def __init__(self, onnx_path, n_pieces: int = 4, target: str = DEFAULT_TARGET, dtype: str = "fp16",
                 work_dir=None, memory_limit_mb: float | None = None, log_path: str | None = None,
                 pieces: list | None = None):
        super().__init__()
        self._tmp = self._owned = None
        self.target, self.dtype, self.memory_limit_mb = target, dtype, memory_limit_mb
        self.log_path = log_path
        self.peak_rss_mb = 0.0
        self.calls = 0
        if pieces is not None:  # already cut (from_pieces): nothing to split, nothing to clean up
            self.paths = [os.fspath(p) for p in pieces]
            self._inputs, self._outputs = chain_specs([onnx_io_specs(p) for p in self.paths],
                                                      [os.path.basename(p) for p in self.paths])
            return
        from rkspeech.export.split import split_onnx

        self._inputs, self._outputs = onnx_io_specs(os.fspath(onnx_path))
        if work_dir is None:  # recorded in core.child: removed on an interrupt or SIGTERM too,
            # and owner-locked: one a SIGKILL left is swept by the next (core.workdirs.make_workdir)
            from rkspeech.core.child import own
            from rkspeech.core.workdirs import make_workdir

            self._tmp = make_workdir(tempfile.gettempdir(), prefix="rkspeech-pieces-")
            work_dir = str(self._tmp[0])
            self._owned = own(paths=[work_dir])
        self.paths = split_onnx(onnx_path, n_pieces, work_dir)

    @classmethod
    def from_pieces(cls, paths, **options) -> "SegmentedSimulator":
        """The ONNX pieces ``paths`` (consecutive, as :func:`~rkspeech.export.split.split_onnx`
        wrote them), each built in its own simulator child per call; ``options`` as for
        ``__init__`` (target, dtype, memory_limit_mb, log_path)."""
        return cls(None, pieces=list(paths), **options)

    def _infer(self, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
        from rkspeech.core import progress
        from rkspeech.runtime.runners.sim_process import SimulatorProcess

        env = dict(arrays)
        self.calls += 1
        for k, path in enumerate(self.paths):
            with progress.stage(f"simulator call {self.calls}, piece {k + 1}/{len(self.paths)}: build and run"), \
                    SimulatorProcess(path, target=self.target, dtype=self.dtype, log_path=self.log_path,
                                     memory_limit_mb=self.memory_limit_mb) as sim:
                try:
                    out = sim.infer({n: env[n] for n in sim.input_specs()})
                finally:
                    self.peak_rss_mb = max(self.peak_rss_mb, sim.peak_rss_mb)
            env.update(out)
        return [env[n] for n in self._outputs]

    def close(self) -> None:
        from rkspeech.core.child import release

        if self._tmp is not None:
            work, lock = self._tmp
            shutil.rmtree(work, ignore_errors=True)
            lock.close()
            self._tmp = None
            release(self._owned)
