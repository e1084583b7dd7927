"""Export a Qwen3-ASR encoder window graph (``AudioEncoder.window_forward`` over ``k`` chunks) to ONNX.

As the other step graphs: ``vocoder_onnx.export_traced`` (static shapes, ``OPSET``, the TorchScript
exporter), the ``ASREncoderContract`` in the metadata (``rkspeech convert`` copies it into the
.rknn custom string).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rkspeech.contracts.asr_encoder import ASREncoderContract
from rkspeech.export.vocoder_onnx import export_traced
from rkspeech.models.qwen3_asr.geometry import MASK_VALUE


class EncoderWindow(nn.Module):
    """``AudioEncoder.window_forward`` as a module of four inputs, for tracing."""

    def __init__(self, encoder, chunks: int):
        super().__init__()
        from rkspeech.models.qwen3_asr.asr_model import encoder_fingerprint

        self.encoder, self.chunks = encoder, chunks
        cfg, g = encoder.cfg, encoder.geometry
        t1, t2 = g.conv_lengths
        self._contract = ASREncoderContract(chunks=chunks, mels=cfg.num_mel_bins, d_model=cfg.d_model,
                                            output_dim=cfg.output_dim, chunk_tokens=g.chunk_tokens, conv1=t1,
                                            conv2=t2, mask_value=MASK_VALUE,
                                            fingerprint=encoder_fingerprint(encoder))

    def contract(self) -> ASREncoderContract:
        return self._contract

    def forward(self, chunks, mask1, mask2, key_mask):
        return self.encoder.window_forward(chunks, mask1, mask2, key_mask)

    def dummy_inputs(self, seed: int = 0) -> tuple[torch.Tensor, ...]:
        """Random log-mel-like chunks, a partial last chunk (a real key mask), conv masks all 1."""
        from rkspeech.models.qwen3_asr.geometry import CHUNK_FRAMES, Window, encoder_tokens

        rng = np.random.default_rng(seed)
        frames = self.chunks * CHUNK_FRAMES - 37
        mel = rng.uniform(-1.0, 1.0, (self._contract.mels, frames)).astype(np.float32)
        win = Window(0, frames, self.chunks, encoder_tokens(frames))
        arrays = self.encoder.geometry.window_inputs(mel, win, chunks=self.chunks, short=False)
        return tuple(torch.from_numpy(a) for a in arrays)


def export_window(step: EncoderWindow, output: str | os.PathLike) -> Path:
    """Trace the window graph ``step`` to ``output``; returns the path."""
    c = step.contract()
    return export_traced(step, step.dummy_inputs(), Path(output), input_names=c.input_names,
                         output_names=c.output_names, contract=c)
