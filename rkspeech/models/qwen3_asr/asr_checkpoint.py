"""Find a Qwen3-ASR model root and read its config; the official tensor names and shapes.

Accepted forms (``QWEN3_ASR_MODEL`` is the default): a model root (``config.json`` with
``model_type`` qwen3_asr, the weights as ``model.safetensors`` or as shards listed in
``model.safetensors.index.json`` (the published 1.7B), the text tokenizer files and
``preprocessor_config.json``), or a Hugging Face cache snapshot / cache repo folder (as the TTS
roots, ``vocoder_checkpoint.locate_model_folder``).  Every missing piece is a one-line
``RkspeechError`` naming the file.  Standard library only.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.atomic import read_json_object
from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_asr.asr_config import ASRConfig, check_model_type
from rkspeech.models.qwen3_tts.text_tokenizer import FILES as TOKENIZER_FILES
from rkspeech.models.qwen3_tts.text_tokenizer import missing_files
from rkspeech.models.qwen3_tts.vocoder_checkpoint import locate_model_folder

ENV_VAR = "QWEN3_ASR_MODEL"
WEIGHTS = "model.safetensors"
WEIGHT_INDEX = "model.safetensors.index.json"
PREPROCESSOR = "preprocessor_config.json"
GENERATION = "generation_config.json"


@dataclass(frozen=True)
class ASRFiles:
    root: Path
    config: Path
    weights: tuple[Path, ...]  # model.safetensors, or the shards of model.safetensors.index.json
    tokenizer: tuple[Path, ...]  # tokenizer.json, or vocab.json + merges.txt + tokenizer_config.json
    preprocessor: Path
    generation: Path | None = None


def resolve_asr_root(model_dir) -> ASRFiles:
    path = locate_model_folder(model_dir, env_var=ENV_VAR,
                               make_one="rkspeech synth-checkpoint qwen3-asr --out-dir DIR")
    config = path / "config.json"
    if not config.is_file():
        raise RkspeechError(f"{path}: config.json is missing; is this a Qwen3-ASR model root?")
    try:  # another model's root is named before any of its files is missed
        check_model_type(read_json_object(config, "config"))
    except RkspeechError as exc:
        raise RkspeechError(f"{path}: {exc}") from None
    weights = _weights(path)
    missing = missing_files(path)
    if missing:
        raise RkspeechError(f"{path}: text tokenizer file(s) missing: {', '.join(missing)}")
    tokenizer = (path / "tokenizer.json",) if (path / "tokenizer.json").is_file() else \
        tuple(path / name for name in TOKENIZER_FILES)
    if not (path / PREPROCESSOR).is_file():
        raise RkspeechError(f"{path}: {PREPROCESSOR} is missing (the log-mel settings of the audio input)")
    generation = path / GENERATION
    return ASRFiles(path, config, weights, tokenizer, path / PREPROCESSOR,
                    generation if generation.is_file() else None)


def _weights(path: Path) -> tuple[Path, ...]:
    if (path / WEIGHTS).is_file():
        return (path / WEIGHTS,)
    index = path / WEIGHT_INDEX
    if not index.is_file():
        raise RkspeechError(f"{path}: {WEIGHTS} (or {WEIGHT_INDEX} with its shards) is missing")
    weight_map = read_json_object(index, "weight index").get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map or not all(
            isinstance(v, str) and v and os.path.basename(v) == v for v in weight_map.values()):
        raise RkspeechError(f"{index}: weight_map must map tensor names to shard file names in this folder")
    shards = tuple(path / name for name in sorted(set(weight_map.values())))
    for shard in shards:
        if not shard.is_file():
            raise RkspeechError(f"{path}: shard {shard.name} named in {WEIGHT_INDEX} is missing")
    return shards


def _json(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RkspeechError(f"{path}: cannot read JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise RkspeechError(f"{path}: must hold a JSON object")
    return raw


def read_asr_config(files) -> ASRConfig:
    """The validated config of ``files`` (an ``ASRFiles``, or a model folder to resolve first)."""
    if not isinstance(files, ASRFiles):
        files = resolve_asr_root(files)
    raw = _json(files.config)
    generation = _json(files.generation) if files.generation is not None else None
    try:
        return ASRConfig.from_dict(raw, generation)
    except RkspeechError as exc:
        raise RkspeechError(f"{files.config}: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise RkspeechError(f"{files.config}: bad config ({exc})") from None


def tensor_shapes(cfg: ASRConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the official ``Qwen3ASRForConditionalGeneration`` state dict (qwen-asr 0.0.6)
    and its shape, in module order: ``thinker.audio_tower.*``, ``thinker.model.*``,
    ``thinker.lm_head.weight`` (present in the state dict also when tied to the embeddings)."""
    a, t = cfg.audio, cfg.text
    c, d, f = a.downsample_hidden_size, a.d_model, a.encoder_ffn_dim
    freq = (((a.num_mel_bins + 1) // 2 + 1) // 2 + 1) // 2  # mel bins after three stride-2 convolutions
    out: dict[str, tuple[int, ...]] = {}
    at = "thinker.audio_tower."
    for i, cin in ((1, 1), (2, c), (3, c)):
        out[f"{at}conv2d{i}.weight"], out[f"{at}conv2d{i}.bias"] = (c, cin, 3, 3), (c,)
    out[f"{at}conv_out.weight"] = (d, c * freq)
    for i in range(a.encoder_layers):
        p = f"{at}layers.{i}."
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            out[f"{p}self_attn.{proj}.weight"], out[f"{p}self_attn.{proj}.bias"] = (d, d), (d,)
        out[f"{p}self_attn_layer_norm.weight"], out[f"{p}self_attn_layer_norm.bias"] = (d,), (d,)
        out[f"{p}fc1.weight"], out[f"{p}fc1.bias"] = (f, d), (f,)
        out[f"{p}fc2.weight"], out[f"{p}fc2.bias"] = (d, f), (d,)
        out[f"{p}final_layer_norm.weight"], out[f"{p}final_layer_norm.bias"] = (d,), (d,)
    out[f"{at}ln_post.weight"], out[f"{at}ln_post.bias"] = (d,), (d,)
    out[f"{at}proj1.weight"], out[f"{at}proj1.bias"] = (d, d), (d,)
    out[f"{at}proj2.weight"], out[f"{at}proj2.bias"] = (a.output_dim, d), (a.output_dim,)
    h, hd = t.hidden_size, t.head_dim
    q, kv = t.num_attention_heads * hd, t.num_key_value_heads * hd
    out["thinker.model.embed_tokens.weight"] = (t.vocab_size, h)
    for i in range(t.num_hidden_layers):
        p = f"thinker.model.layers.{i}."
        for proj, shape in (("q_proj", (q, h)), ("k_proj", (kv, h)), ("v_proj", (kv, h)), ("o_proj", (h, q))):
            out[f"{p}self_attn.{proj}.weight"] = shape
            if t.attention_bias:
                out[f"{p}self_attn.{proj}.bias"] = shape[:1]
        out[f"{p}self_attn.q_norm.weight"], out[f"{p}self_attn.k_norm.weight"] = (hd,), (hd,)
        for proj, shape in (("gate_proj", (t.intermediate_size, h)), ("up_proj", (t.intermediate_size, h)),
                            ("down_proj", (h, t.intermediate_size))):
            out[f"{p}mlp.{proj}.weight"] = shape
        out[f"{p}input_layernorm.weight"], out[f"{p}post_attention_layernorm.weight"] = (h,), (h,)
    out["thinker.model.norm.weight"] = (h,)
    out["thinker.lm_head.weight"] = (t.vocab_size, h)
    return out
