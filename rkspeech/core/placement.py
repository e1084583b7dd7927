"""Where a Qwen3-TTS language-model stage (talker, code predictor) runs: one spelling everywhere.

* ``npu``: the step graph converted to .rknn (fp16, or the int16 hybrid where it exists);
* ``cpu-fp32`` / ``cpu-int8`` / ``cpu-int4``: the same ONNX step graph on onnxruntime's CPU
  provider, its MatMul weights as exported, int8 or 4-bit (``convert.cpu_quant``).

Standard library only: the CLI imports it for its flags.
"""

from __future__ import annotations

#: Every placement a stage may have, as flags and plans spell them.
PLACEMENTS = ("npu", "cpu-fp32", "cpu-int8", "cpu-int4")
#: The CPU placements and the weight variant each runs (``convert.cpu_quant.VARIANTS``).
CPU_VARIANTS = {"cpu-fp32": "fp32", "cpu-int8": "int8", "cpu-int4": "int4"}


def cpu_variant(placement: str) -> str | None:
    """The weight variant of a CPU placement (``"int4"`` for ``"cpu-int4"``), None for ``npu``;
    an unknown name is a one-line RkspeechError."""
    if placement not in PLACEMENTS:
        from rkspeech.core.errors import RkspeechError

        raise RkspeechError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)}")
    return CPU_VARIANTS.get(placement)
