"""The Whisper encoder record of a plan (``rkspeech build whisper-encoder``): its graphs, per window.

::

    "whisper_encoder": {"placement": "npu", "target": "rk3588", "custom_string": "{...}",
                        "artifacts": {"encoder": {"onnx": "encoder.onnx", "rknn": "encoder.rknn"},
                                      "10s": {"onnx": "encoder.10s.onnx", "rknn": "encoder.10s.rknn"}},
                        "windows": {"encoder": 30, "10s": 10}}

``windows`` (artifact role -> window in seconds) is written only by a build with buckets
(``--windows 10,30``); a plan without it -- every plan written before buckets -- holds one 30 s
window (role ``encoder``), or one 30 s encoder as consecutive pieces ``part0``, ``part1``, ...
(``--pieces N``).  ``placement`` is ``npu`` (the .rknn files) or ``cpu-fp32`` (built with
``--skip-convert``: the ONNX on onnxruntime).  :func:`load_whisper_plan` is the one reader (through
``plan.plan.read_plan``, so a format-1 plan is upgraded and the files' integrity checked first); the runtime picks a window per transcription
(``runtime.whisper.buckets``).  Standard library only.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import WINDOW_SECONDS
from rkspeech.plan.paths import plan_file

SECTION = "whisper_encoder"
WINDOWS_KEY = "windows"
#: the role of the full (30 s) window in a plan without ``windows``
FULL_ROLE = "encoder"
#: where the encoder may run: the NPU, or onnxruntime on the CPU in fp32
_PLACEMENTS = ("npu", "cpu-fp32")
_PART = re.compile(r"part(\d+)$")


@dataclass(frozen=True)
class EncoderGraph:
    """One encoder graph of the plan: its window, role and files (``rknn`` None when not built)."""

    seconds: int
    role: str
    onnx: Path
    rknn: Path | None


@dataclass(frozen=True)
class WhisperEncoderPlan:
    path: Path
    placement: str
    target: str | None
    #: one graph per window, shortest first; the last is the full 30 s window (empty with pieces)
    windows: tuple[EncoderGraph, ...]
    #: a ``--pieces`` build: the 30 s encoder as consecutive graphs, in order
    pieces: tuple[EncoderGraph, ...] = ()

    @property
    def on_npu(self) -> bool:
        return self.placement == "npu"

    @property
    def buckets(self) -> tuple[int, ...]:
        """The windows shorter than the full one, in seconds."""
        return tuple(g.seconds for g in self.windows if g.seconds != WINDOW_SECONDS)

    def files(self, kind: str) -> dict[int, Path]:
        """window seconds -> its ``kind`` ("onnx" or "rknn") file, each present."""
        out = {}
        for g in self.windows:
            p = getattr(g, kind)
            if p is None:
                raise RkspeechError(f"plan {self.path}: the {g.seconds} s encoder has no .{kind} (built with "
                                    "--skip-convert?); run it with --backend ort or sim, or rebuild")
            if not p.is_file():
                raise RkspeechError(f"plan {self.path}: the {g.seconds} s encoder's {p.name} is missing")
            out[g.seconds] = p
        return out


def windows_section(roles: dict[str, int]) -> dict:
    """The ``windows`` entry a build writes for ``roles`` (role -> seconds): none for the one
    30 s window, so a build without buckets writes the plan it wrote before them."""
    return {WINDOWS_KEY: dict(roles)} if len(roles) > 1 else {}


def is_whisper_plan(path: str | os.PathLike) -> bool:
    """Whether the JSON file at ``path`` is a plan with a Whisper encoder record (not, e.g.,
    an ``encoder-pieces.json`` manifest); False for anything unreadable."""
    from rkspeech.plan.record import file_has_record

    return file_has_record(path, SECTION)


def load_whisper_plan(path: str | os.PathLike) -> WhisperEncoderPlan:
    """Read and check the ``whisper_encoder`` record of the plan at ``path``."""
    from rkspeech.plan.plan import read_plan
    from rkspeech.plan.record import record_placement

    p = Path(path)
    raw = read_plan(p)
    sec = raw.get(SECTION)
    where = f"plan {p}: {SECTION}"
    if sec is None:
        raise RkspeechError(f"plan {p} has no {SECTION} record (build one with rkspeech build whisper-encoder)")
    placement = record_placement(sec, where, _PLACEMENTS)
    target = sec.get("target")
    if target is not None and not isinstance(target, str):
        raise RkspeechError(f"{where}.target must be a chip name, got {target!r}")
    arts = sec.get("artifacts")
    if not isinstance(arts, dict) or not arts:
        raise RkspeechError(f"{where}.artifacts must map roles to their files")
    files = {}
    for role, f in arts.items():
        if not isinstance(f, dict) or not isinstance(f.get("onnx"), str):
            raise RkspeechError(f"{where}.artifacts.{role} must name its onnx file (and rknn when built)")
        if placement == "npu" and not isinstance(f.get("rknn"), str):
            raise RkspeechError(f"{where} is placed on the NPU but {role} has no rknn file")
        files[role] = {k: plan_file(p.parent, f[k], f"{where}.artifacts.{role}.{k}") if isinstance(f.get(k), str)
                       else None for k in ("onnx", "rknn")}
    seconds = _windows(sec.get(WINDOWS_KEY), list(arts), where)
    if seconds is None:  # a --pieces build
        order = sorted(arts, key=lambda r: int(_PART.match(r).group(1)))
        pieces = tuple(EncoderGraph(WINDOW_SECONDS, r, files[r]["onnx"], files[r]["rknn"]) for r in order)
        return WhisperEncoderPlan(p, placement, target, (), pieces)
    graphs = sorted((EncoderGraph(seconds[r], r, files[r]["onnx"], files[r]["rknn"]) for r in arts),
                    key=lambda g: g.seconds)
    return WhisperEncoderPlan(p, placement, target, tuple(graphs))


def _windows(given, roles: list[str], where: str) -> dict[str, int] | None:
    """role -> seconds, checked; None for a plan of pieces."""
    if given is None:
        if roles == [FULL_ROLE]:
            return {FULL_ROLE: WINDOW_SECONDS}
        if all(_PART.match(r) for r in roles) and sorted(int(_PART.match(r).group(1)) for r in roles) == list(
                range(len(roles))):
            return None
        raise RkspeechError(f"{where}.artifacts holds {sorted(roles)}: without '{WINDOWS_KEY}' it must be one "
                            f"'{FULL_ROLE}' or pieces part0, part1, ...; rebuild the plan")
    if not isinstance(given, dict) or sorted(given) != sorted(roles):
        raise RkspeechError(f"{where}.{WINDOWS_KEY} must give the window of every artifact role {sorted(roles)}, "
                            f"got {given!r}; rebuild the plan")
    for role, s in given.items():
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= WINDOW_SECONDS:
            raise RkspeechError(f"{where}.{WINDOWS_KEY}.{role} is {s!r}, expected whole seconds from 1 to "
                                f"{WINDOW_SECONDS}")
    if len(set(given.values())) != len(given):
        raise RkspeechError(f"{where}.{WINDOWS_KEY} lists one window twice: {given!r}; rebuild the plan")
    if WINDOW_SECONDS not in given.values():
        raise RkspeechError(f"{where}.{WINDOWS_KEY} has no {WINDOW_SECONDS} s window (audio longer than every "
                            "bucket needs it); rebuild the plan")
    return dict(given)
