"""The contract of a head graph: one of the code predictor's ``lm_head`` matrices as a graph of
its own (``hidden [1, H]`` -> ``logits [1, V]``), so that a CPU-placed step-form code predictor
reads its heads in low bits like its stack (fp32 they are 126 MB of the 1.30 GB an int4 frame
read at the published size: docs/estimate.md).  Stateless.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rkspeech.contracts.base import Contract
from rkspeech.core.errors import RkspeechError

CONTRACT_FORMAT = "rkspeech-head/1"
MODEL_NAME = "qwen3-tts-code-predictor-head"


@dataclass(frozen=True)
class HeadContract(Contract):
    FORMAT = CONTRACT_FORMAT
    KIND = "head"

    index: int  # the codebook j (1 .. G-1) whose logits the head gives: lm_head[j - 1]; 0: a language model's head
    hidden: int
    vocab_size: int
    fingerprint: str = ""  # the code predictor stack's weight fingerprint (HostWeights.cp_fingerprint)
    model: str = MODEL_NAME

    def input_shapes(self) -> dict[str, list[int]]:
        return {"hidden": [1, self.hidden]}

    def output_shapes(self) -> dict[str, list[int]]:
        return {"logits": [1, self.vocab_size]}

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONTRACT_FORMAT, "model": self.model, "j": self.index, "H": self.hidden,
                "V": self.vocab_size, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeadContract:
        try:
            c = cls(index=int(d["j"]), hidden=int(d["H"]), vocab_size=int(d["V"]),
                    fingerprint=str(d.get("fingerprint", "")), model=str(d.get("model", MODEL_NAME)))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise RkspeechError(f"head contract is malformed: {exc!r}") from None
        if c.index < 0 or c.hidden < 1 or c.vocab_size < 1:
            raise RkspeechError(f"head contract is malformed: j={c.index}, H={c.hidden}, V={c.vocab_size}")
        return c
