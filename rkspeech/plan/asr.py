"""The Qwen3-ASR records of a plan (``rkspeech build qwen3-asr``): encoder windows and decoder.

::

    "asr_encoder": {"placement": "npu", "target": "rk3588",
                    "artifacts": {"k8": {"onnx": "asr/encoder/window_k8.onnx", "rknn": "...rknn"}}},
    "asr_decoder": {"placement": "cpu-int4", "capacity": 1024, "eos_token_ids": [151645, 151643],
                    "artifacts": {"prefill": {"onnx": ...}, "decode": {"onnx": ...}, "head": {"onnx": ...},
                                  "host:embed": {"host": "asr/decoder/host/embed_tokens.npy"},
                                  "host:vocab.json": {"host": ...}, ...}}

An encoder role ``kN`` is a window graph of N chunks of 100 mel frames.  :func:`load_asr_plan` is
the one reader (through ``plan.plan.read_plan``: integrity first).  Standard library only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.paths import plan_file

ENCODER, DECODER = "asr_encoder", "asr_decoder"
ENCODER_PLACEMENTS = ("npu", "cpu-fp32")
DECODER_PLACEMENTS = ("cpu-int4", "cpu-int8", "cpu-fp32")
DECODER_ROLES = ("prefill", "decode", "head")
HOST_PREFIX = "host:"
_WINDOW = re.compile(r"k(\d+)$")


@dataclass(frozen=True)
class ASRPlan:
    path: Path
    encoder_placement: str
    target: str | None
    #: chunks -> {"onnx": Path, "rknn": Path | None}
    windows: dict[int, dict[str, Path | None]]
    decoder_placement: str
    decoder: dict[str, Path]
    #: host file name ("embed", "vocab.json", ...) -> Path
    host: dict[str, Path]
    capacity: int
    eos_token_ids: tuple[int, ...]

    def window_file(self, chunks: int, backend: str) -> Path:
        files = self.windows[chunks]
        if backend == "rknnlite":
            if files.get("rknn") is None:
                raise RkspeechError(f"plan {self.path}: the encoder is not built for the NPU (placement "
                                    f"{self.encoder_placement}); use --backend ort")
            return files["rknn"]
        return files["onnx"]


def is_asr_plan(path: str | os.PathLike) -> bool:
    """Whether the JSON file at ``path`` holds an ``asr_decoder`` record; False for anything unreadable."""
    from rkspeech.plan.record import file_has_record

    return file_has_record(path, DECODER)


def load_asr_plan(path: str | os.PathLike) -> ASRPlan:
    """Read and check the Qwen3-ASR records of the plan at ``path``."""
    from rkspeech.plan.plan import read_plan
    from rkspeech.plan.record import record_placement

    p = Path(path)
    raw = read_plan(p)
    if not isinstance(raw.get(ENCODER), dict) or not isinstance(raw.get(DECODER), dict):
        raise RkspeechError(f"plan {p} has no Qwen3-ASR records (build one with rkspeech build qwen3-asr)")
    enc, dec = raw[ENCODER], raw[DECODER]
    ew, dw = f"plan {p}: {ENCODER}", f"plan {p}: {DECODER}"
    enc_place = record_placement(enc, ew, ENCODER_PLACEMENTS)
    dec_place = record_placement(dec, dw, DECODER_PLACEMENTS)
    windows = {}
    for role, f in _artifacts(enc, ew).items():
        m = _WINDOW.match(role)
        if not m or not isinstance(f.get("onnx"), str):
            raise RkspeechError(f"{ew}.artifacts.{role}: expected a window role kN naming its onnx file")
        if enc_place == "npu" and not isinstance(f.get("rknn"), str):
            raise RkspeechError(f"{ew} is placed on the NPU but {role} has no rknn file")
        windows[int(m.group(1))] = {k: plan_file(p.parent, f[k], f"{ew}.artifacts.{role}.{k}")
                                    if isinstance(f.get(k), str) else None for k in ("onnx", "rknn")}
    decoder, host = {}, {}
    for role, f in _artifacts(dec, dw).items():
        if role.startswith(HOST_PREFIX) and isinstance(f.get("host"), str):
            host[role[len(HOST_PREFIX):]] = plan_file(p.parent, f["host"], f"{dw}.artifacts.{role}")
        elif role in DECODER_ROLES and isinstance(f.get("onnx"), str):
            decoder[role] = plan_file(p.parent, f["onnx"], f"{dw}.artifacts.{role}")
        else:
            raise RkspeechError(f"{dw}.artifacts.{role} is not a decoder graph or host file; rebuild the plan")
    missing = [r for r in DECODER_ROLES if r not in decoder] + [h for h in ("embed", "config.json") if h not in host]
    if missing:
        raise RkspeechError(f"{dw}.artifacts lacks {', '.join(missing)}; rebuild the plan")
    cap, eos = dec.get("capacity"), dec.get("eos_token_ids")
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 2:
        raise RkspeechError(f"{dw}.capacity must be a whole number of positions, got {cap!r}")
    if not isinstance(eos, list) or not eos or not all(isinstance(e, int) and not isinstance(e, bool) for e in eos):
        raise RkspeechError(f"{dw}.eos_token_ids must be a list of token ids, got {eos!r}")
    target = enc.get("target")
    return ASRPlan(p, enc_place, target if isinstance(target, str) else None, dict(sorted(windows.items())),
                   dec_place, decoder, host, cap, tuple(eos))


def _artifacts(record: dict, where: str) -> dict[str, dict]:
    arts = record.get("artifacts")
    if not isinstance(arts, dict) or not arts or not all(isinstance(f, dict) for f in arts.values()):
        raise RkspeechError(f"{where}.artifacts must map roles to their files")
    return arts
