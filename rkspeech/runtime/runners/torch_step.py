"""The torch vocoder step as a runner, for checks against the graph runners.

Its specs come from the step's contract (``input_shapes`` / ``output_shapes``, ``codes_dtype``
for ``audio_codes``, float32 elsewhere), so a feed the graphs would refuse is refused here too.
"""

from __future__ import annotations

import numpy as np

from rkspeech.runtime.runners.base import Runner
from rkspeech.contracts.vocoder import INPUT_NAMES


class TorchStepRunner(Runner):
    name = "torch"

    def __init__(self, step):
        super().__init__()
        self.step = step.eval()
        c = step.contract
        for specs, shapes in ((self._inputs, c.input_shapes()), (self._outputs, c.output_shapes())):
            for n, shape in shapes.items():
                dtype = c.codes_dtype if n == "audio_codes" else "float32"
                specs[n] = (tuple(shape), np.dtype(dtype))

    def _infer(self, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        with torch.no_grad():
            audio, cache = self.step(*(torch.from_numpy(arrays[n]) for n in INPUT_NAMES))
        return {"audio_values": audio.numpy(), "cache_out": cache.numpy()}
