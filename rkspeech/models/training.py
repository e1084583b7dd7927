"""What every trained synthetic root shares (Qwen3-TTS ``--trained``, Qwen3-ASR ``--trained``):
the optimizer's schedule, one step of it, and the cache of trained weights by the key of what
made them."""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError

CACHE_ENV = "RKSPEECH_CACHE"


def cache_root() -> Path:
    """``$RKSPEECH_CACHE`` or ``~/.cache/rkspeech`` (``$XDG_CACHE_HOME`` honoured)."""
    base = os.environ.get(CACHE_ENV) or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "rkspeech")
    return Path(base).expanduser()


@dataclass(frozen=True)
class TrainSchedule:
    """The optimizer's schedule every trained synthetic root shares (AdamW, warm-up then cosine:
    ``warmup_cosine``; deterministic in ``seed``); ``counts``: the whole-number fields that must be >= 1."""
    steps: int = 400
    batch: int = 8
    lr: float = 1e-2
    warmup: int = 20
    seed: int = 0
    #: torch threads; 1 because on the 2-core measuring host, shared with other jobs, a
    #: [300, 64] x [64, 3072] matmul took ~23 ms on 2 threads and ~2.3 ms on 1 (2026-12-01, load ~3)
    threads: int = 1
    counts = ("steps", "batch", "threads")

    def check(self) -> None:
        for name in self.counts:
            if getattr(self, name) < 1:
                raise RkspeechError(f"training {name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise RkspeechError("training lr must be > 0")


def cache_key(fields: dict) -> str:
    """16 hex digits naming a trained root's weights in the cache (``fields``: what made them)."""
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def optimizer_step(opt, params, loss, options, step: int) -> None:
    """One step of ``opt`` on ``loss`` at ``warmup_cosine``'s rate, gradients clipped to norm 1."""
    import torch

    for group in opt.param_groups:
        group["lr"] = warmup_cosine(options, step)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 1.0)
    opt.step()


def warmup_cosine(options, step: int) -> float:
    """The learning rate at ``step``: linear warm-up over ``options.warmup`` steps to ``options.lr``,
    then a cosine decay to 0 at ``options.steps``."""
    if step < options.warmup:
        return options.lr * (step + 1) / options.warmup
    frac = (step - options.warmup) / max(1, options.steps - options.warmup)
    return options.lr * 0.5 * (1 + math.cos(math.pi * frac))


def from_cache(cache_dir, key: str, weights: Path) -> dict | None:
    """Copy the cached trained weights ``key`` of ``cache_dir`` (None: no cache) to ``weights``;
    their training record with ``cached`` (where from), or None when they are not there."""
    import shutil

    from rkspeech.core.atomic import atomic_path

    if cache_dir is None:
        return None
    cached = Path(cache_dir) / f"{key}.safetensors"
    record_file = cached.with_suffix(".json")
    if not (cached.is_file() and record_file.is_file()):
        return None
    with atomic_path(weights) as tmp:
        shutil.copyfile(cached, tmp)
    return {**json.loads(record_file.read_text(encoding="utf-8")), "cached": str(cached)}


def to_cache(cache_dir, key: str, weights: Path, record: dict) -> dict:
    """Keep the trained ``weights`` and their ``record`` in ``cache_dir`` (None: no cache) under
    ``key``; returns the record with ``cached`` None (trained here)."""
    import shutil

    from rkspeech.core.atomic import atomic_path, write_json

    if cache_dir is not None:
        cached = Path(cache_dir) / f"{key}.safetensors"
        cached.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(cached) as tmp:
            shutil.copyfile(weights, tmp)
        write_json(cached.with_suffix(".json"), record)
    return {**record, "cached": None}
