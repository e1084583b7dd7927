"""The code-predictor frame contract: one graph per frame, the 15-codebook loop unrolled inside.

The graph I/O it describes is in ``stepgraph/code_predictor_step.py`` (``CodePredictorFrame``).
Stateless between calls: the frame's KV history lives inside the graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rkspeech.contracts.base import Contract
from rkspeech.core.errors import RkspeechError

CONTRACT_FORMAT = "rkspeech-code-predictor/1"
MODEL_NAME = "qwen3-tts-code-predictor"
INPUT_NAMES = ("talker_hidden", "first_embed")
OUTPUT_NAMES = ("logits", "codes")  # "codes" only with embed="gather"
EMBED_MODES = ("gather", "onehot")


@dataclass(frozen=True)
class CodePredictorContract(Contract):
    FORMAT = CONTRACT_FORMAT
    KIND = "code-predictor"

    talker_hidden: int
    hidden: int
    vocab_size: int
    num_code_groups: int
    layers: int
    embed: str = "gather"
    model: str = MODEL_NAME

    @property
    def output_names(self) -> tuple[str, ...]:
        return OUTPUT_NAMES if self.embed == "gather" else OUTPUT_NAMES[:1]

    def input_shapes(self) -> dict[str, list[int]]:
        return {"talker_hidden": [1, self.talker_hidden], "first_embed": [1, self.talker_hidden]}

    def output_shapes(self) -> dict[str, list[int]]:
        g = self.num_code_groups - 1
        shapes = {"logits": [g, self.vocab_size], "codes": [g]}
        return {k: shapes[k] for k in self.output_names}

    def to_dict(self) -> dict[str, Any]:
        return {"format": CONTRACT_FORMAT, "model": self.model, "Ht": self.talker_hidden, "H": self.hidden,
                "V": self.vocab_size, "G": self.num_code_groups, "layers": self.layers, "embed": self.embed,
                "outputs": list(self.output_names)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodePredictorContract:
        try:
            contract = cls(talker_hidden=int(d["Ht"]), hidden=int(d["H"]), vocab_size=int(d["V"]),
                           num_code_groups=int(d["G"]), layers=int(d["layers"]), embed=str(d["embed"]),
                           model=str(d.get("model", MODEL_NAME)))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise RkspeechError(f"code-predictor contract is malformed: {exc!r}") from None
        if contract.embed not in EMBED_MODES:
            raise RkspeechError(f"code-predictor contract is malformed: embed {contract.embed!r} "
                                f"is not one of {EMBED_MODES}")
        return contract
