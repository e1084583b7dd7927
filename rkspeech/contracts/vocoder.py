"""The vocoder contract: the one description of a stateful vocoder step graph.

Everything downstream (ONNX export, the .rknn custom string, runtimes, plans, checks) reads
B, the cache layout, head_dim, the sliding window, samples per token and the sample rate from
a ``VocoderContract``; nobody restates them.  ``to_json()`` is ~800 bytes for the published
config (measured), inside the custom string's 1 KB.

Graph I/O (the names and shapes of the seed project's step graph, so its runtimes accept ours):

=============  ==========================  =======================================================
name           shape / dtype                meaning
=============  ==========================  =======================================================
audio_codes    [1, Q, B] ``codes_dtype``     Q=16 codebooks, B tokens; int64 (reference) or float32 (npu:
                                           an int64 input costs a CPU Cast; codes < 2048 are exact)
freqs_in       [B, head_dim/2] fp32        RoPE angles pos*inv_freq, reduced mod 2*pi on the host
cache_valid    [1] fp32                    count of real KV slots: min(pos, sliding_window-1)
cache_in       [N] fp32                    flat cache, layout = ``segments``
audio_values   [1, 1, B*samples_per_token]  fp32 PCM in [-1, 1]
cache_out      [N] fp32                    the updated cache
=============  ==========================  =======================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable

from rkspeech.contracts.base import Contract
from rkspeech.contracts.formulations import REFERENCE, canonical
from rkspeech.core.errors import RkspeechError

CONTRACT_FORMAT = "rkspeech-step/1"

INPUT_NAMES = ("audio_codes", "freqs_in", "cache_valid", "cache_in")
OUTPUT_NAMES = ("audio_values", "cache_out")
CODES_DTYPES = ("int64", "float32")


@dataclass(frozen=True)
class CacheSegment:
    """One named slice of the flat cache: a causal conv tail or the KV history."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def end(self) -> int:
        return self.offset + self.numel


def make_segments(named_shapes: Iterable[tuple[str, tuple[int, ...]]]) -> tuple[CacheSegment, ...]:
    """Lay out segments back to back; zero-sized ones are dropped."""
    out, offset = [], 0
    for name, shape in named_shapes:
        shape = tuple(int(s) for s in shape)
        if math.prod(shape) == 0:
            continue
        out.append(CacheSegment(name, shape, offset))
        offset += math.prod(shape)
    return tuple(out)


@dataclass(frozen=True)
class VocoderContract(Contract):
    """Shapes, cache layout and signal constants of one compiled vocoder step graph."""

    FORMAT = CONTRACT_FORMAT
    KIND = "step"

    codes_length: int  # B: tokens per step
    num_quantizers: int
    codebook_size: int
    head_dim: int
    sliding_window: int
    rope_theta: float
    samples_per_token: int
    sample_rate: int
    segments: tuple[CacheSegment, ...]
    formulation: str = REFERENCE
    codes_dtype: str = "int64"  # "float32" in the npu formulation; runners cast on the host
    model: str = "qwen3-tts-vocoder"
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    # ---- derived -------------------------------------------------------------------------
    @property
    def cache_numel(self) -> int:
        return self.segments[-1].end if self.segments else 0

    @property
    def state_numel(self) -> int:
        return self.cache_numel

    @property
    def kv_slots(self) -> int:
        """KV history slots carried between steps (sliding_window - 1)."""
        return self.sliding_window - 1

    @property
    def samples_per_step(self) -> int:
        return self.codes_length * self.samples_per_token

    def segment(self, name: str) -> CacheSegment:
        for seg in self.segments:
            if seg.name == name:
                return seg
        raise KeyError(name)

    def input_shapes(self) -> dict[str, list[int]]:
        B = self.codes_length
        return {
            "audio_codes": [1, self.num_quantizers, B],
            "freqs_in": [B, self.head_dim // 2],
            "cache_valid": [1],
            "cache_in": [self.cache_numel],
        }

    def output_shapes(self) -> dict[str, list[int]]:
        return {"audio_values": [1, 1, self.samples_per_step], "cache_out": [self.cache_numel]}

    def with_codes_length(self, codes_length: int) -> "VocoderContract":
        if codes_length < 1:
            raise RkspeechError(f"codes length must be >= 1, got {codes_length}")
        return VocoderContract(**{**self.__dict__, "codes_length": int(codes_length)})

    def compatible_cache(self, other: "VocoderContract") -> bool:
        """True when a cache written by ``other`` can be fed to this graph (first -> main)."""
        return self.segments == other.segments and self._signal() == other._signal()

    def _signal(self) -> tuple:
        return (self.num_quantizers, self.codebook_size, self.head_dim, self.sliding_window,
                self.rope_theta, self.samples_per_token, self.sample_rate, self.model)

    # ---- serialization -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "format": CONTRACT_FORMAT,
            "model": self.model,
            "formulation": self.formulation,
            "B": self.codes_length,
            "Q": self.num_quantizers,
            "codebook_size": self.codebook_size,
            "head_dim": self.head_dim,
            "sliding_window": self.sliding_window,
            "rope_theta": self.rope_theta,
            "samples_per_token": self.samples_per_token,
            "sample_rate": self.sample_rate,
            "codes_dtype": self.codes_dtype,
            "N": self.cache_numel,
            # offsets are implied by the order; shapes are enough to rebuild the layout
            "segments": [[s.name, list(s.shape)] for s in self.segments],
        }
        if self.extra:
            d["extra"] = self.extra
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "VocoderContract":
        if not isinstance(d, dict) or d.get("format") != CONTRACT_FORMAT:
            raise RkspeechError(
                f"not an rkspeech step contract (format {d.get('format') if isinstance(d, dict) else None!r}, "
                f"expected {CONTRACT_FORMAT!r})"
            )
        def whole(key: str, minimum: int = 1) -> int:
            if key not in d:
                raise RkspeechError(f"step contract is malformed: {key} is missing")
            v = d[key]
            if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
                raise RkspeechError(f"step contract is malformed: {key} must be an integer >= {minimum}, "
                                    f"got {v!r}")
            return v

        theta = d.get("rope_theta")
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not theta > 0 \
                or not math.isfinite(theta):
            raise RkspeechError(f"step contract is malformed: rope_theta must be a positive number, got {theta!r}")
        segs = d.get("segments")
        if not isinstance(segs, list) or not all(
                isinstance(s, (list, tuple)) and len(s) == 2 and isinstance(s[0], str)
                and isinstance(s[1], (list, tuple))
                and all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in s[1])
                for s in segs):
            raise RkspeechError("step contract is malformed: segments must be a list of "
                                "[name, [non-negative integer dims]]")
        if not isinstance(d.get("extra", {}), dict):
            raise RkspeechError("step contract is malformed: extra must be an object")
        for key in ("formulation", "codes_dtype", "model"):
            if key in d and not isinstance(d[key], str):
                raise RkspeechError(f"step contract is malformed: {key} must be a string, got {d[key]!r}")
        try:
            segments = make_segments((str(n), tuple(s)) for n, s in segs)
            contract = cls(
                codes_length=whole("B"),
                num_quantizers=whole("Q"),
                codebook_size=whole("codebook_size"),
                head_dim=whole("head_dim", 2),
                sliding_window=whole("sliding_window"),
                rope_theta=float(theta),
                samples_per_token=whole("samples_per_token"),
                sample_rate=whole("sample_rate"),
                segments=segments,
                formulation=canonical(str(d.get("formulation", REFERENCE))),
                codes_dtype=str(d.get("codes_dtype", "int64")),
                model=str(d.get("model", "qwen3-tts-vocoder")),
                extra=dict(d.get("extra", {})),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise RkspeechError(f"step contract is malformed: {exc!r}") from None
        if contract.codes_dtype not in CODES_DTYPES:
            raise RkspeechError(f"step contract is malformed: codes_dtype {contract.codes_dtype!r} "
                                f"is not one of {CODES_DTYPES}")
        if "N" in d and (isinstance(d["N"], bool) or not isinstance(d["N"], int)):
            raise RkspeechError(f"step contract is malformed: N must be an integer, got {d['N']!r}")
        if "N" in d and d["N"] != contract.cache_numel:
            raise RkspeechError(
                f"step contract is inconsistent: N={d['N']} but its segments add up to "
                f"{contract.cache_numel}"
            )
        return contract
