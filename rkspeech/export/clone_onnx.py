"""Export voice cloning's two graphs to ONNX (``contracts.clone``), through ``vocoder_onnx.export_traced``.

* the speaker encoder (``stepgraph.speaker_encoder.SpeakerEncoderGraph``): ``mel [1, frames, M]
  -> xvector [D]``, ``frames`` symbolic (``frames=N``: a fixed-length graph, for an NPU conversion);
* the speech tokenizer's encoder (``models.qwen3_tts.speech_encoder.SpeechEncoder``): ``audio [1, 1,
  samples], length [1] -> codes [1, G, codes]``, ``samples`` and ``codes`` symbolic.

Each runs once per request; on the CPU (onnxruntime) one graph serves every length.
"""

from __future__ import annotations

import os
from pathlib import Path

from rkspeech.contracts.clone import CODES, FRAMES, SAMPLES, SpeakerEncoderContract, SpeechEncoderContract
from rkspeech.export.vocoder_onnx import export_traced


def export_speaker_encoder_onnx(encoder, contract: SpeakerEncoderContract, output: str | os.PathLike,
                                *, trace_frames: int = 200) -> Path:
    """``encoder``: the checkpoint's ``SpeakerEncoder`` (torch); traced at ``contract.frames`` (a
    fixed graph) or ``trace_frames`` frames with ``frames`` left symbolic."""
    import torch

    from rkspeech.stepgraph.speaker_encoder import SpeakerEncoderGraph

    frames = contract.frames or trace_frames
    dummy = (torch.randn(1, frames, contract.mel_dim, generator=torch.Generator().manual_seed(0)),)
    axes = None if contract.frames else {"mel": {1: FRAMES}}
    return export_traced(SpeakerEncoderGraph(encoder).eval(), dummy, Path(output), input_names=contract.input_names,
                         output_names=contract.output_names, contract=contract, dynamic_axes=axes)


def export_speech_encoder_onnx(encoder, contract: SpeechEncoderContract, output: str | os.PathLike,
                               *, trace_codes: int = 4) -> Path:
    """``encoder``: ``SpeechEncoder``; traced on ``trace_codes`` codes of audio, one sample short
    (so the trace covers a partial last code), lengths symbolic."""
    import torch

    n = trace_codes * contract.samples_per_code
    audio = torch.randn(1, 1, n, generator=torch.Generator().manual_seed(0)) * 0.1
    audio[..., n - 1:] = 0
    dummy = (audio, torch.tensor([n - 1], dtype=torch.int64))
    return export_traced(encoder.eval(), dummy, Path(output), input_names=contract.input_names,
                         output_names=contract.output_names, contract=contract,
                         dynamic_axes={"audio": {2: SAMPLES}, "codes": {2: CODES}})
