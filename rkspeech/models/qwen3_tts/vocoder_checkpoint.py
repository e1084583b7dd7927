"""Find and load a Qwen3-TTS speech-tokenizer checkpoint into ``Vocoder``.

Accepted ``--model-dir`` forms (``QWEN3_TTS_MODEL`` is the default):

* a model root holding ``speech_tokenizer/`` (e.g. ``Qwen3-TTS-12Hz-0.6B-Base/``),
* the ``speech_tokenizer/`` folder itself (``config.json`` + ``model.safetensors``),
* a Hugging Face cache snapshot (``.../snapshots/<hash>/``) or the cache repo folder
  (``models--Qwen--.../``, resolved through ``refs/main`` or its only snapshot).

Only ``decoder.*`` keys are read (encoder keys are ignored); every mismatch is a clear
``RkspeechError`` naming the key (and both shapes for a shape mismatch).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.vocoder_config import MODEL_TYPE, VocoderConfig

ENV_VAR = "QWEN3_TTS_MODEL"
DECODER_PREFIX = "decoder."


@dataclass(frozen=True)
class CheckpointFiles:
    folder: Path  # the speech_tokenizer folder
    config: Path
    weights: Path


def _snapshot_of_cache_repo(path: Path) -> Path | None:
    snaps = path / "snapshots"
    if not snaps.is_dir():
        return None
    ref = path / "refs" / "main"
    if ref.is_file():
        cand = snaps / ref.read_text().strip()
        if cand.is_dir():
            return cand
    found = sorted(p for p in snaps.iterdir() if p.is_dir())
    if len(found) == 1:
        return found[0]
    if not found:
        raise RkspeechError(f"{path}: Hugging Face cache folder has no snapshot in snapshots/")
    raise RkspeechError(
        f"{path}: several snapshots ({', '.join(p.name[:12] for p in found)}) and no refs/main; "
        "pass the snapshot folder itself with --model-dir"
    )


def locate_model_folder(model_dir, *, env_var: str, make_one: str) -> Path:
    """The folder ``--model-dir`` names (else ``$env_var``), a Hugging Face cache repo folder
    resolved to its snapshot; one-line errors for none given (``make_one``: the command that writes
    one), a missing folder and a file."""
    if not model_dir:
        model_dir = os.environ.get(env_var, "")
    if not model_dir:
        raise RkspeechError(f"no model given: pass --model-dir DIR or set {env_var} (or make one: {make_one})")
    path = Path(model_dir).expanduser()
    if not path.is_dir():
        raise RkspeechError(f"model folder {path} does not exist" if not path.exists()
                            else f"{path} is a file; --model-dir wants the model folder")
    return _snapshot_of_cache_repo(path) or path


def resolve_checkpoint(model_dir: str | os.PathLike | None) -> CheckpointFiles:
    """Locate ``config.json`` and ``model.safetensors`` of the speech tokenizer."""
    if not model_dir:
        model_dir = os.environ.get(ENV_VAR, "")
    if not model_dir:
        raise RkspeechError(
            f"no checkpoint given: pass --model-dir DIR or set {ENV_VAR} "
            "(or make one: rkspeech synth-checkpoint qwen3-tts-vocoder --out-dir DIR)"
        )
    path = Path(model_dir).expanduser()
    if not path.exists():
        raise RkspeechError(f"model folder {path} does not exist")
    if not path.is_dir():
        raise RkspeechError(f"{path} is a file; --model-dir wants the model folder")
    snapshot = _snapshot_of_cache_repo(path)
    if snapshot is not None:
        path = snapshot
    folder = path / "speech_tokenizer" if (path / "speech_tokenizer").is_dir() else path
    config, weights = folder / "config.json", folder / "model.safetensors"
    if not config.is_file():
        hint = "" if folder != path else " (and no speech_tokenizer/ subfolder)"
        raise RkspeechError(f"{folder}: config.json is missing{hint}; is this a Qwen3-TTS checkpoint?")
    if not weights.is_file():
        raise RkspeechError(f"{folder}: model.safetensors is missing")
    return CheckpointFiles(folder, config, weights)


def read_config(files: CheckpointFiles) -> VocoderConfig:
    try:
        raw = json.loads(files.config.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RkspeechError(f"{files.config}: cannot read JSON ({exc})") from None
    model_type = raw.get("model_type") if isinstance(raw, dict) else None
    if model_type != MODEL_TYPE:
        raise RkspeechError(
            f"{files.config}: model_type is {model_type!r}, expected {MODEL_TYPE!r} "
            "(the 12 Hz speech tokenizer); point --model-dir at the model root or its speech_tokenizer/"
        )
    dec = raw.get("decoder_config")
    if not isinstance(dec, dict):
        raise RkspeechError(f"{files.config}: no decoder_config section")
    try:
        cfg = VocoderConfig.from_dict(dec)
    except RkspeechError as exc:
        raise RkspeechError(f"{files.config}: decoder_config: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise RkspeechError(f"{files.config}: bad decoder_config ({exc})") from None
    for key in ("decode_upsample_rate", "output_sample_rate"):
        v = raw.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise RkspeechError(f"{files.config}: {key} must be a positive integer, got {v!r}")
    upsample = raw.get("decode_upsample_rate")
    if upsample is not None and upsample != cfg.samples_per_token:
        raise RkspeechError(
            f"{files.config}: decode_upsample_rate {upsample} disagrees with the decoder's rates "
            f"({cfg.samples_per_token} samples per token)"
        )
    out_rate = raw.get("output_sample_rate")
    if out_rate is not None:
        cfg = VocoderConfig.from_dict({**cfg.to_dict(), "sample_rate": out_rate})
    return cfg


def read_decoder_state(files: CheckpointFiles) -> dict:
    """The ``decoder.*`` tensors, prefix stripped, as fp32 torch tensors.

    A weight stored as an integer or bool tensor, or holding NaN / inf, is refused here (naming
    the key) rather than cast and blamed later on the step graph's numerics."""
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    import torch

    state = {}
    try:
        with safe_open(str(files.weights), framework="pt") as f:
            for key in f.keys():
                if key.startswith(DECODER_PREFIX):
                    t = f.get_tensor(key)
                    if not t.is_floating_point():
                        raise RkspeechError(f"{files.weights}: {key} is stored as {t.dtype}; weights must be "
                                            "floating point (a corrupt or wrongly exported checkpoint)")
                    t = t.to(torch.float32)
                    if not bool(torch.isfinite(t).all()):
                        raise RkspeechError(f"{files.weights}: {key} holds NaN or inf values; the checkpoint "
                                            "is corrupt (re-download or re-export it)")
                    state[key[len(DECODER_PREFIX):]] = t
    except (SafetensorError, OSError) as exc:
        raise RkspeechError(f"{files.weights}: not a readable safetensors file ({exc})") from None
    if not state:
        raise RkspeechError(f"{files.weights}: no decoder.* keys; is this the speech tokenizer's model.safetensors?")
    return state


def load_vocoder(model_dir: str | os.PathLike | None = None):
    """Load and fold the decoder. Returns ``(Vocoder, VocoderConfig, CheckpointFiles)``."""
    import torch

    from rkspeech.models.qwen3_tts.vocoder import Vocoder

    files = resolve_checkpoint(model_dir)
    cfg = read_config(files)
    state = read_decoder_state(files)
    model = Vocoder(cfg)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing:
        more = f" (+{len(missing) - 3} more)" if len(missing) > 3 else ""
        raise RkspeechError(f"{files.weights}: missing key decoder.{missing[0]}" + (
            f", decoder.{', decoder.'.join(missing[1:3])}" if len(missing) > 1 else "") + more)
    if unexpected:
        more = f" (+{len(unexpected) - 3} more)" if len(unexpected) > 3 else ""
        raise RkspeechError(f"{files.weights}: unexpected key decoder.{unexpected[0]}" + (
            f", decoder.{', decoder.'.join(unexpected[1:3])}" if len(unexpected) > 1 else "") + more
            + " (does config.json match the weights?)")
    for key, tensor in expected.items():
        if tuple(state[key].shape) != tuple(tensor.shape):
            raise RkspeechError(
                f"{files.weights}: decoder.{key} has shape {tuple(state[key].shape)}, "
                f"config.json implies {tuple(tensor.shape)}"
            )
    with torch.no_grad():
        model.load_state_dict(state, strict=True)
    model.eval().fold()
    return model, cfg, files
