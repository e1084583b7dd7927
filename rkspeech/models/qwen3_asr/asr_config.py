"""A Qwen3-ASR model root's ``config.json`` (audio encoder, text decoder, audio token ids).

Standard library only.  ``ASRConfig.from_dict`` reads the top-level ``config.json`` (``model_type``
qwen3_asr; the architecture sits in ``thinker_config.audio_config`` / ``thinker_config.text_config``)
and validates it before anything is built: integer keys must be JSON integers >= 1, heads must
divide ``d_model`` (the audio encoder) and be a multiple of the key/value heads (the decoder),
``head_dim`` even, the audio token ids inside the vocabulary, the audio encoder's output width the
decoder's hidden size.  Errors raise ``RkspeechError`` naming the key.

Defaults are those of qwen-asr 0.0.6 ``configuration_qwen3_asr.py`` (its class defaults, not the
published models'); the published values live in ``synthetic_asr.PUBLISHED`` with their sources.
``eos_token_ids`` come from ``generation_config.json`` when the root has one, else the ids the
official ``Qwen3ASRForConditionalGeneration.generate`` stops on ([151645, 151643]).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.tts_config import DecoderStackConfig, _check_transformer, _is_int

MODEL_TYPE = "qwen3_asr"
#: what the official ``generate`` passes as ``eos_token_id`` (<|im_end|>, <|endoftext|>)
DEFAULT_EOS_TOKEN_IDS = (151645, 151643)

_AUDIO_INT = ("num_mel_bins", "d_model", "encoder_layers", "encoder_attention_heads", "encoder_ffn_dim",
              "downsample_hidden_size", "output_dim", "n_window", "n_window_infer", "max_source_positions",
              "conv_chunksize")
_TEXT_INT = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "head_dim", "max_position_embeddings")
_TOKEN_IDS = ("audio_token_id", "audio_start_token_id", "audio_end_token_id")


@dataclass(frozen=True)
class AudioEncoderConfig:
    """``thinker_config.audio_config``: the Whisper-like audio encoder and its projector."""
    num_mel_bins: int = 128
    d_model: int = 1280
    encoder_layers: int = 32
    encoder_attention_heads: int = 20
    encoder_ffn_dim: int = 5120
    downsample_hidden_size: int = 480
    output_dim: int = 3584
    n_window: int = 100
    n_window_infer: int = 400
    max_source_positions: int = 1500
    activation_function: str = "gelu"
    conv_chunksize: int = 500

    @property
    def head_dim(self) -> int:
        return self.d_model // self.encoder_attention_heads


#: qwen-asr 0.0.6 ``Qwen3ASRTextConfig`` defaults
_TEXT_DEFAULTS = {"vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 22016, "num_hidden_layers": 32,
                  "num_attention_heads": 32, "num_key_value_heads": 32, "head_dim": 128,
                  "max_position_embeddings": 128000, "rope_theta": 5000000.0, "rms_norm_eps": 1e-6,
                  "attention_bias": False}


def check_model_type(raw: dict) -> None:
    """One line when config.json (``raw``) is not a Qwen3-ASR model's."""
    mtype = raw.get("model_type")
    if mtype != MODEL_TYPE:
        said = "has no model_type" if mtype is None else f"says model_type {mtype!r}"
        raise RkspeechError(f"config.json {said}: this is not a Qwen3-ASR root (model_type {MODEL_TYPE!r})")


@dataclass(frozen=True)
class ASRConfig:
    audio: AudioEncoderConfig
    text: DecoderStackConfig
    tie_word_embeddings: bool = False
    audio_token_id: int = 151646
    audio_start_token_id: int = 151647
    audio_end_token_id: int = 151670
    eos_token_ids: tuple = DEFAULT_EOS_TOKEN_IDS
    #: multimodal RoPE sections; audio and text positions are all equal in ASR (the official
    #: ``get_rope_index`` gives the three sections the same ids), so they rotate as 1-D RoPE.
    mrope_section: tuple = (24, 20, 20)

    @classmethod
    def from_dict(cls, raw: dict, generation: dict | None = None) -> ASRConfig:
        """``raw``: config.json; ``generation``: generation_config.json (or None)."""
        if not isinstance(raw, dict):
            raise RkspeechError("config.json must hold a JSON object")
        check_model_type(raw)
        thinker = raw.get("thinker_config")
        if not isinstance(thinker, dict):
            raise RkspeechError("config.json has no thinker_config object")
        a, t = thinker.get("audio_config"), thinker.get("text_config")
        if not isinstance(a, dict):
            raise RkspeechError("thinker_config has no audio_config object")
        if not isinstance(t, dict):
            raise RkspeechError("thinker_config has no text_config object")
        audio = _audio(a)
        text, rope = _text(t)
        if audio.output_dim != text.hidden_size:
            raise RkspeechError(f"thinker_config.audio_config.output_dim ({audio.output_dim}) must equal "
                                f"text_config.hidden_size ({text.hidden_size}): audio features replace token "
                                "embeddings")
        ids = {}
        for key in _TOKEN_IDS:
            v = thinker.get(key, getattr(cls, key))
            if not _is_int(v) or not 0 <= v < text.vocab_size:
                raise RkspeechError(f"thinker_config.{key} ({v!r}) must be an id below text_config.vocab_size "
                                    f"({text.vocab_size})")
            ids[key] = v
        tie = t.get("tie_word_embeddings", False)
        if tie not in (False, True):
            raise RkspeechError("thinker_config.text_config.tie_word_embeddings must be true or false")
        return cls(audio=audio, text=text, tie_word_embeddings=tie, eos_token_ids=_eos(generation, text.vocab_size),
                   mrope_section=rope, **ids)


def _audio(a: dict) -> AudioEncoderConfig:
    where = "thinker_config.audio_config"
    for key in _AUDIO_INT:
        if key in a and (not _is_int(a[key]) or a[key] < 1):
            raise RkspeechError(f"{where}.{key} must be a positive integer, got {a[key]!r}")
    names = {f.name for f in fields(AudioEncoderConfig)}
    audio = AudioEncoderConfig(**{k: v for k, v in a.items() if k in names})
    if audio.activation_function != "gelu":
        raise RkspeechError(f"{where}.activation_function {audio.activation_function!r} is not supported (only gelu)")
    if audio.d_model % audio.encoder_attention_heads:
        raise RkspeechError(f"{where}.d_model ({audio.d_model}) must be a multiple of encoder_attention_heads "
                            f"({audio.encoder_attention_heads})")
    if audio.d_model % 2:
        raise RkspeechError(f"{where}.d_model must be even (sinusoidal positions: sin | cos), got {audio.d_model}")
    return audio


def _text(t: dict) -> tuple[DecoderStackConfig, tuple]:
    where = "thinker_config.text_config"
    _check_transformer(where, t, _TEXT_INT)
    names = {f.name for f in fields(DecoderStackConfig)} - {"num_code_groups"}
    text = DecoderStackConfig(**{**_TEXT_DEFAULTS, **{k: v for k, v in t.items() if k in names}})
    text.check(where)
    rope = t.get("rope_scaling")
    if not isinstance(rope, dict):  # the official rotary embedding reads mrope_section from it
        raise RkspeechError(f"{where}.rope_scaling must be an object (with mrope_section), got {rope!r}")
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind != "default":
        raise RkspeechError(f"{where}.rope_scaling.rope_type {kind!r} is not supported (only default)")
    section = rope.get("mrope_section", [24, 20, 20])  # the official rotary embedding's fallback
    if (not isinstance(section, list) or len(section) != 3 or not all(_is_int(s) and s >= 0 for s in section)
            or 2 * sum(section) != text.head_dim):
        raise RkspeechError(f"{where}.rope_scaling.mrope_section {section!r} must be three integers summing to "
                            f"head_dim/2 ({text.head_dim // 2})")
    return text, tuple(section)


def _eos(generation: dict | None, vocab: int) -> tuple:
    if not generation or generation.get("eos_token_id") is None:
        return DEFAULT_EOS_TOKEN_IDS
    eos = generation["eos_token_id"]
    eos = [eos] if _is_int(eos) else eos
    if not isinstance(eos, list) or not eos or not all(_is_int(e) and 0 <= e < vocab for e in eos):
        raise RkspeechError(f"generation_config.json: eos_token_id {generation['eos_token_id']!r} must be an id or "
                            f"a list of ids below vocab_size ({vocab})")
    return tuple(eos)
