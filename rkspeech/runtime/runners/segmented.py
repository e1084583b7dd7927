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
"""

from __future__ import annotations

import os
import tempfile

import numpy as np

from rkspeech.runtime.runners.base import Runner, onnx_io_specs


class SegmentedSimulator(Runner):
    """``infer(feed)`` runs the ``parts`` pieces of ``onnx_path`` one after another, each built
    in its own :class:`SimulatorProcess` and freed before the next (``peak_rss_mb``: the
    largest child)."""

    name = "rknn-simulator-pieces"

    def __init__(self, onnx_path, parts: int = 4, target: str = "rk3588", dtype: str = "fp16",
                 work_dir=None, memory_limit_mb: float | None = None, log_path: str | None = None):
        super().__init__()
        from rkspeech.export.split import split_onnx

        self._inputs, self._outputs = onnx_io_specs(os.fspath(onnx_path))
        self._tmp = self._owned = None
        if work_dir is None:  # recorded in core.child: removed on an interrupt or SIGTERM too
            from rkspeech.core.child import own

            self._tmp = tempfile.TemporaryDirectory(prefix="rkspeech-pieces-")
            work_dir = self._tmp.name
            self._owned = own(paths=[work_dir])
        self.paths = split_onnx(onnx_path, parts, work_dir)
        self.target, self.dtype, self.memory_limit_mb = target, dtype, memory_limit_mb
        self.log_path = log_path
        self.peak_rss_mb = 0.0
        self.calls = 0

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
            self._tmp.cleanup()
            self._tmp = None
            release(self._owned)
