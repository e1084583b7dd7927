"""The torch step as a runner (``infer(feed) -> outputs``), for checks against the graph runners."""

from __future__ import annotations

import numpy as np


class TorchStepRunner:
    name = "torch"

    def __init__(self, step):
        self.step = step.eval()

    def infer(self, feed: dict) -> dict:
        import torch

        with torch.no_grad():
            audio, cache = self.step(
                torch.from_numpy(np.asarray(feed["audio_codes"], dtype=self.step.contract.codes_dtype)),
                torch.from_numpy(np.asarray(feed["freqs_in"], dtype=np.float32)),
                torch.from_numpy(np.asarray(feed["cache_valid"], dtype=np.float32)),
                torch.from_numpy(np.asarray(feed["cache_in"], dtype=np.float32)),
            )
        return {"audio_values": audio.numpy(), "cache_out": cache.numpy()}

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
