"""A runner that opens its backend on the first ``infer`` and frees it on ``close``.

Why: a simulator runner holds a whole build (the reference-formulation published vocoder step at B=64: ~21 GB,
B=16: ~7 GB), so a check that needs two graphs (first and main) builds the first, runs it,
frees it, and only then builds the second: two lazy runners, the second closing the first
just before it builds (``before_build``).
"""

from __future__ import annotations

import gc
import os
from typing import Callable

import numpy as np

from rkspeech.runtime.runners.base import Runner, onnx_io_specs


class LazyRunner(Runner):
    """``factory()`` makes the backend runner on the first ``infer``.

    The specs are read from ``onnx_path`` (the graph the factory opens), so the feed is checked
    before anything is built.  ``label``: a progress stage shown while the backend opens.
    ``peak_rss_mb``: the largest ``peak_rss_mb`` of the backends it opened (simulator children).
    """

    def __init__(self, factory: Callable[[], Runner], onnx_path: str | os.PathLike, *,
                 before_build: Callable[[], None] | None = None, label: str | None = None):
        super().__init__()
        self._inputs, self._outputs = onnx_io_specs(onnx_path)
        self.factory, self.before_build, self.label = factory, before_build, label
        self.runner: Runner | None = None
        self.name = f"lazy:{os.path.basename(os.fspath(onnx_path))}"
        self.peak_rss_mb = 0.0

    def _open(self) -> Runner:
        if self.before_build is not None:
            self.before_build()
        if self.label is None:
            return self.factory()
        from rkspeech.core import progress

        with progress.stage(self.label):
            return self.factory()

    def _infer(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.runner is None:
            self.runner = self._open()
        return self.runner.infer(arrays)

    def close(self) -> None:
        if self.runner is not None:
            self.peak_rss_mb = max(self.peak_rss_mb, getattr(self.runner, "peak_rss_mb", 0.0))
            self.runner.close()
            self.runner = None
            gc.collect()  # drop the closed backend's buffers before the next build
