"""The contract of a Qwen3-ASR encoder window graph (``models.qwen3_asr.encoder.AudioEncoder.window_forward``).

``k`` chunks of 100 mel frames in, ``k * 13`` projected tokens out; stateless.  The host cuts the
utterance into windows and builds the inputs (``models.qwen3_asr.geometry.EncoderGeometry.window_inputs``):

==========  ======================  =========================================================
name        shape / dtype           meaning
==========  ======================  =========================================================
chunks      [k, 1, mels, 100] fp32  the window's chunks of log-mel, zero-padded
mask1       [k, 1, 1, 50] fp32      1 / 0 per time step after the first convolution
mask2       [k, 1, 1, 25] fp32      the same after the second (all 1 but for audio under 1 s)
key_mask    [1, 1, 1, k * 13] fp32  additive: 0 for a valid token, ``mask_value`` for padding
features    [k * 13, out] fp32      the encoder's output tokens (padding rows: to be dropped)
==========  ======================  =========================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rkspeech.contracts.base import Contract
from rkspeech.core.errors import RkspeechError

CONTRACT_FORMAT = "rkspeech-asr-encoder/1"
MODEL_NAME = "qwen3-asr-encoder"


@dataclass(frozen=True)
class ASREncoderContract(Contract):
    FORMAT = CONTRACT_FORMAT
    KIND = "asr-encoder"

    chunks: int
    mels: int
    d_model: int
    output_dim: int
    chunk_frames: int = 100
    chunk_tokens: int = 13
    conv1: int = 50
    conv2: int = 25
    mask_value: float = -30000.0
    fingerprint: str = ""
    model: str = MODEL_NAME

    @property
    def tokens(self) -> int:
        return self.chunks * self.chunk_tokens

    def input_shapes(self) -> dict[str, list[int]]:
        k = self.chunks
        return {"chunks": [k, 1, self.mels, self.chunk_frames], "mask1": [k, 1, 1, self.conv1],
                "mask2": [k, 1, 1, self.conv2], "key_mask": [1, 1, 1, self.tokens]}

    def output_shapes(self) -> dict[str, list[int]]:
        return {"features": [self.tokens, self.output_dim]}

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONTRACT_FORMAT, "model": self.model, "k": self.chunks, "mels": self.mels,
                "d": self.d_model, "out": self.output_dim, "F": self.chunk_frames, "T": self.chunk_tokens,
                "conv": [self.conv1, self.conv2], "mask_value": self.mask_value, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ASREncoderContract:
        try:
            conv = d["conv"]
            c = cls(chunks=int(d["k"]), mels=int(d["mels"]), d_model=int(d["d"]), output_dim=int(d["out"]),
                    chunk_frames=int(d["F"]), chunk_tokens=int(d["T"]), conv1=int(conv[0]), conv2=int(conv[1]),
                    mask_value=float(d["mask_value"]), fingerprint=str(d.get("fingerprint", "")),
                    model=str(d.get("model", MODEL_NAME)))
        except (KeyError, IndexError, TypeError, ValueError, OverflowError) as exc:
            raise RkspeechError(f"asr-encoder contract is malformed: {exc!r}") from None
        if min(c.chunks, c.mels, c.d_model, c.output_dim, c.chunk_frames, c.chunk_tokens, c.conv1, c.conv2) < 1:
            raise RkspeechError(f"asr-encoder contract is malformed: {c.to_dict()}")
        return c
