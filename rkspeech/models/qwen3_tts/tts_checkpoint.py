"""Find and load a full Qwen3-TTS 12 Hz model root: talker, code predictor, speaker encoder.

Accepted forms: a model root (``config.json`` with ``model_type`` qwen3_tts, ``model.safetensors``,
the text tokenizer files and ``speech_tokenizer/``), a Hugging Face cache snapshot or cache repo
folder (as ``checkpoint.resolve_checkpoint``).  Keys are the official ones (``talker.*``,
``speaker_encoder.*``); every missing, unexpected or mis-shaped tensor is an ``RkspeechError``
naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.vocoder_checkpoint import ENV_VAR, locate_model_folder
from rkspeech.models.qwen3_tts.text_tokenizer import missing_files
from rkspeech.models.qwen3_tts.tts_config import TTSConfig


@dataclass(frozen=True)
class ModelFiles:
    root: Path
    config: Path
    weights: Path


def resolve_model_root(model_dir) -> ModelFiles:
    path = locate_model_folder(model_dir, env_var=ENV_VAR,
                               make_one="rkspeech synth-checkpoint qwen3-tts --out-dir DIR")
    if path.name == "speech_tokenizer" and (path.parent / "config.json").is_file():
        path = path.parent
    config, weights = path / "config.json", path / "model.safetensors"
    if not config.is_file():
        raise RkspeechError(f"{path}: config.json is missing; is this a Qwen3-TTS model root?")
    if not weights.is_file():
        raise RkspeechError(f"{path}: model.safetensors is missing (the talker, code predictor and speaker "
                            "encoder weights)")
    missing = missing_files(path)
    if missing:
        raise RkspeechError(f"{path}: text tokenizer file(s) missing: {', '.join(missing)}")
    return ModelFiles(path, config, weights)


def read_tts_config(files: ModelFiles) -> TTSConfig:
    try:
        raw = json.loads(files.config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RkspeechError(f"{files.config}: cannot read JSON ({exc})") from None
    try:
        return TTSConfig.from_dict(raw)
    except RkspeechError as exc:
        raise RkspeechError(f"{files.config}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise RkspeechError(f"{files.config}: bad config ({exc})") from None


class TTSNet:
    """Holds ``talker`` (with the code predictor) and, for Base models, ``speaker_encoder``."""

    def __init__(self, cfg: TTSConfig):
        from torch import nn

        from rkspeech.models.qwen3_tts.speaker_encoder import SpeakerEncoder
        from rkspeech.models.qwen3_tts.talker import Talker

        self.module = nn.Module()
        self.module.talker = Talker(cfg.talker, cfg.code_predictor)
        if cfg.tts_model_type == "base":
            self.module.speaker_encoder = SpeakerEncoder(cfg.speaker_encoder)
        self.talker = self.module.talker
        self.speaker_encoder = getattr(self.module, "speaker_encoder", None)


def _list(keys, what: str, files: ModelFiles) -> str:
    more = f" (+{len(keys) - 3} more)" if len(keys) > 3 else ""
    return f"{files.weights}: {what} key {', '.join(keys[:3])}{more}"


def load_tts_net(files: ModelFiles, cfg: TTSConfig) -> TTSNet:
    """The model of a root, in fp32: each tensor read from the file and copied into its parameter
    in turn, so no second fp32 copy of the weights is held (a state dict read whole and then
    loaded peaked at 18.1 GiB for the 1.7B talker, which is 7.6 GB in fp32)."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    net = TTSNet(cfg)
    expected = net.module.state_dict()  # shares the parameters' storage
    try:
        with safe_open(str(files.weights), framework="pt") as f:
            # a custom-voice/voice-design file may carry speaker_encoder.*; the official class ignores them
            skip = "speaker_encoder." if net.speaker_encoder is None else None
            keys = [k for k in f.keys() if not (skip and k.startswith(skip))]  # noqa: SIM118 (no __iter__)
            missing = sorted(set(expected) - set(keys))
            unexpected = sorted(set(keys) - set(expected))
            if missing:
                raise RkspeechError(_list(missing, "missing", files) + " (does config.json match the weights?)")
            if unexpected:
                raise RkspeechError(_list(unexpected, "unexpected", files) + " (does config.json match the weights?)")
            with torch.no_grad():
                for key in keys:
                    got, tensor = f.get_tensor(key), expected[key]
                    if tuple(got.shape) != tuple(tensor.shape):
                        raise RkspeechError(f"{files.weights}: {key} has shape {tuple(got.shape)}, config.json "
                                            f"implies {tuple(tensor.shape)}")
                    if not got.is_floating_point():
                        raise RkspeechError(f"{files.weights}: {key} is stored as {got.dtype}; weights must be "
                                            "floating point")
                    tensor.copy_(got)
    except (SafetensorError, OSError) as exc:
        raise RkspeechError(f"{files.weights}: not a readable safetensors file ({exc})") from None
    net.module.eval()
    return net
