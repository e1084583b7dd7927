"""The full Qwen3-TTS model's ``config.json`` (talker, code predictor, speaker encoder, token ids).

``TTSConfig.from_dict`` reads the top-level ``config.json`` of a model root (``model_type``
``qwen3_tts``) and validates it before anything is built: integer keys must be JSON integers,
ranges and divisibility (heads by key/value heads, even head_dim), the codec token ids inside the
talker vocabulary, speaker and language ids inside it too, and ``tts_model_type`` one of
``base`` / ``custom_voice`` / ``voice_design``.  Errors raise ``RkspeechError`` naming the key.

Defaults are those of qwen-tts 0.1.1 ``configuration_qwen3_tts.py``; the published values live in
``synthetic_tts.PUBLISHED`` with their sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields

from rkspeech.core.errors import RkspeechError

MODEL_TYPE = "qwen3_tts"
VARIANTS = {"base": "base", "custom_voice": "custom-voice", "voice_design": "voice-design"}
#: ``config.json`` key (rkspeech's own; qwen-tts' config keeps unknown keys and ignores them) naming
#: the prompt form a checkpoint was made for: ``streaming`` (the text fed one token per frame,
#: qwen-tts' ``non_streaming_mode=False``) or ``whole-text`` (the whole text in the prompt).
#: Absent: qwen-tts' default per mode.  The trained synthetic checkpoint writes ``streaming``: it
#: is confident only in that form (docs/confident-checkpoint.md).
PROMPT_FORM_KEY = "rkspeech_prompt_form"
PROMPT_FORMS = ("streaming", "whole-text")

_TRANSFORMER_INT = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                    "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
                    "num_code_groups")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_transformer(where: str, d: dict, keys) -> None:
    for key in keys:
        if key in d and (not _is_int(d[key]) or d[key] < 1):
            raise RkspeechError(f"{where}.{key} must be a positive integer, got {d[key]!r}")
    for key in ("rope_theta", "rms_norm_eps"):
        v = d.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0):
            raise RkspeechError(f"{where}.{key} must be a positive number, got {v!r}")
    if d.get("hidden_act", "silu") != "silu":
        raise RkspeechError(f"{where}.hidden_act {d['hidden_act']!r} is not supported (only silu)")
    if d.get("attention_bias", False) not in (False, True):
        raise RkspeechError(f"{where}.attention_bias must be true or false")
    if d.get("use_sliding_window"):
        raise RkspeechError(f"{where}.use_sliding_window is set; the published models use full attention and "
                            "sliding-window layers are not supported")


@dataclass(frozen=True)
class DecoderStackConfig:
    """A Qwen3 decoder stack (the talker's or the code predictor's)."""
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    max_position_embeddings: int = 32768
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    attention_bias: bool = False
    num_code_groups: int = 16

    def check(self, where: str) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise RkspeechError(f"{where}.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                                f"num_key_value_heads ({self.num_key_value_heads})")
        if self.head_dim % 2:
            raise RkspeechError(f"{where}.head_dim must be even (RoPE rotates pairs), got {self.head_dim}")


@dataclass(frozen=True)
class TalkerConfig(DecoderStackConfig):
    text_vocab_size: int = 151936
    text_hidden_size: int = 2048
    codec_eos_token_id: int = 4198
    codec_think_id: int = 4202
    codec_nothink_id: int = 4203
    codec_think_bos_id: int = 4204
    codec_think_eos_id: int = 4205
    codec_pad_id: int = 4196
    codec_bos_id: int = 4197
    spk_id: dict = field(default_factory=dict)
    spk_is_dialect: dict = field(default_factory=dict)
    codec_language_id: dict = field(default_factory=dict)
    #: multimodal RoPE sections; with text-only positions (all three equal) they rotate exactly
    #: like 1-D RoPE, so only their sum is checked.
    mrope_section: tuple = ()


@dataclass(frozen=True)
class SpeakerEncoderConfig:
    mel_dim: int = 128
    enc_dim: int = 1024
    enc_channels: tuple = (512, 512, 512, 512, 1536)
    enc_kernel_sizes: tuple = (5, 3, 3, 3, 1)
    enc_dilations: tuple = (1, 2, 3, 4, 1)
    enc_attention_channels: int = 128
    enc_res2net_scale: int = 8
    enc_se_channels: int = 128
    sample_rate: int = 24000


@dataclass(frozen=True)
class TTSConfig:
    talker: TalkerConfig
    code_predictor: DecoderStackConfig
    speaker_encoder: SpeakerEncoderConfig
    tts_model_type: str = "base"
    tts_model_size: str = ""
    tokenizer_type: str = "qwen3_tts_tokenizer_12hz"
    im_start_token_id: int = 151644
    im_end_token_id: int = 151645
    tts_pad_token_id: int = 151671
    tts_bos_token_id: int = 151672
    tts_eos_token_id: int = 151673
    #: ``PROMPT_FORM_KEY`` (None: not recorded, qwen-tts' default per mode)
    prompt_form: str | None = None

    @property
    def variant(self) -> str:
        """``base``, ``custom-voice`` or ``voice-design`` (the CLI spelling)."""
        return VARIANTS[self.tts_model_type]

    @property
    def speakers(self) -> list[str]:
        """The named voices, sorted (custom-voice models; base and voice-design models have none)."""
        return sorted(self.talker.spk_id)

    @property
    def languages(self) -> list[str]:
        """``auto`` and the languages a request may name, sorted; a dialect is not one of them: it
        is a speaker's (``dialects``), used when that speaker speaks chinese or auto."""
        return ["auto"] + sorted(k for k in self.talker.codec_language_id if "dialect" not in k)

    @property
    def dialects(self) -> dict[str, str]:
        """{speaker: its dialect} for the speakers that have one."""
        return {name: d for name, d in self.talker.spk_is_dialect.items() if isinstance(d, str) and d}

    @property
    def default_text_in_prompt(self) -> bool:
        """``GenerationOptions.text_in_prompt`` when the caller gives None: the recorded prompt form,
        else qwen-tts' default (the whole text in the prompt except for voice cloning)."""
        if self.prompt_form is not None:
            return self.prompt_form == "whole-text"
        return self.tts_model_type != "base"

    @classmethod
    def from_dict(cls, raw: dict) -> TTSConfig:
        if not isinstance(raw, dict):
            raise RkspeechError("config.json must hold a JSON object")
        if raw.get("model_type") != MODEL_TYPE:
            raise RkspeechError(f"model_type is {raw.get('model_type')!r}, expected {MODEL_TYPE!r} "
                                "(the model root's config.json, not speech_tokenizer/config.json)")
        mtype = raw.get("tts_model_type")
        if mtype not in VARIANTS:
            raise RkspeechError(f"tts_model_type is {mtype!r}; expected one of {', '.join(VARIANTS)}")
        if raw.get("tokenizer_type", "qwen3_tts_tokenizer_12hz") != "qwen3_tts_tokenizer_12hz":
            raise RkspeechError(f"tokenizer_type {raw.get('tokenizer_type')!r} is not supported (only the 12 Hz "
                                "speech tokenizer, qwen3_tts_tokenizer_12hz)")
        t = raw.get("talker_config")
        if not isinstance(t, dict):
            raise RkspeechError("config.json has no talker_config object")
        cp = t.get("code_predictor_config")
        if not isinstance(cp, dict):
            raise RkspeechError("talker_config has no code_predictor_config object")
        _check_transformer("talker_config", t, _TRANSFORMER_INT + ("text_vocab_size", "text_hidden_size"))
        _check_transformer("talker_config.code_predictor_config", cp, _TRANSFORMER_INT)
        stack_keys = {f.name for f in fields(DecoderStackConfig)}
        talker_keys = {f.name for f in fields(TalkerConfig)}
        tk = {k: v for k, v in t.items() if k in talker_keys and k != "mrope_section"}
        tk.setdefault("head_dim", t.get("hidden_size", 1024) // t.get("num_attention_heads", 16))
        for key in ("spk_id", "spk_is_dialect", "codec_language_id"):
            v = tk.get(key)
            if v is None:
                tk[key] = {}
            elif not isinstance(v, dict):
                raise RkspeechError(f"talker_config.{key} must be an object, got {type(v).__name__}")
        rope = t.get("rope_scaling") or {}
        if rope.get("rope_type", rope.get("type", "default")) != "default":
            raise RkspeechError(f"talker_config.rope_scaling.rope_type {rope.get('rope_type')!r} is not supported "
                                "(only default)")
        tk["mrope_section"] = tuple(rope.get("mrope_section", ()))
        defaults = {"vocab_size": 3072, "hidden_size": 1024, "intermediate_size": 2048, "num_hidden_layers": 20,
                    "num_attention_heads": 16, "num_key_value_heads": 2}
        talker = TalkerConfig(**{**defaults, **tk})
        cpk = {k: v for k, v in cp.items() if k in stack_keys}
        cp_defaults = {"vocab_size": 2048, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
                       "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "num_code_groups": 32}
        predictor = DecoderStackConfig(**{**cp_defaults, **cpk})
        talker.check("talker_config")
        predictor.check("talker_config.code_predictor_config")
        if talker.mrope_section and 2 * sum(talker.mrope_section) != talker.head_dim:
            raise RkspeechError(f"talker_config.rope_scaling.mrope_section {list(talker.mrope_section)} must sum to "
                                f"head_dim/2 ({talker.head_dim // 2})")
        if predictor.num_code_groups != talker.num_code_groups:
            raise RkspeechError(f"code_predictor_config.num_code_groups ({predictor.num_code_groups}) differs from "
                                f"talker_config.num_code_groups ({talker.num_code_groups})")
        for key in ("codec_eos_token_id", "codec_think_id", "codec_nothink_id", "codec_think_bos_id",
                    "codec_think_eos_id", "codec_pad_id", "codec_bos_id"):
            v = getattr(talker, key)
            if not _is_int(v) or not 0 <= v < talker.vocab_size:
                raise RkspeechError(f"talker_config.{key} ({v!r}) must be an id below vocab_size ({talker.vocab_size})")
        for table in ("spk_id", "codec_language_id"):
            for name, v in getattr(talker, table).items():
                if not _is_int(v) or not 0 <= v < talker.vocab_size:
                    raise RkspeechError(f"talker_config.{table}.{name} ({v!r}) must be an id below vocab_size "
                                        f"({talker.vocab_size})")
        for name, dialect in talker.spk_is_dialect.items():
            if dialect is not False and dialect not in talker.codec_language_id:
                raise RkspeechError(f"talker_config.spk_is_dialect.{name} names {dialect!r}, which is not in "
                                    "codec_language_id")
        se = raw.get("speaker_encoder_config") or {}
        if not isinstance(se, dict):
            raise RkspeechError("speaker_encoder_config must be an object")
        se_keys = {f.name for f in fields(SpeakerEncoderConfig)}
        sek = {k: (tuple(v) if isinstance(v, list) else v) for k, v in se.items() if k in se_keys}
        speaker = SpeakerEncoderConfig(**sek)
        if not (len(speaker.enc_channels) == len(speaker.enc_kernel_sizes) == len(speaker.enc_dilations)):
            raise RkspeechError("speaker_encoder_config: enc_channels, enc_kernel_sizes and enc_dilations must have "
                                "the same length")
        top = {k: raw[k] for k in ("tts_model_size", "im_start_token_id", "im_end_token_id", "tts_pad_token_id",
                                   "tts_bos_token_id", "tts_eos_token_id") if k in raw}
        for key in ("tts_pad_token_id", "tts_bos_token_id", "tts_eos_token_id"):
            v = top.get(key, getattr(cls, key))
            if not _is_int(v) or not 0 <= v < talker.text_vocab_size:
                raise RkspeechError(f"{key} ({v!r}) must be an id below talker_config.text_vocab_size "
                                    f"({talker.text_vocab_size})")
        if top.get("tts_model_size") is None:
            top.pop("tts_model_size", None)
        form = raw.get(PROMPT_FORM_KEY)
        if form is not None and form not in PROMPT_FORMS:
            raise RkspeechError(f"{PROMPT_FORM_KEY} is {form!r}; expected one of {', '.join(PROMPT_FORMS)}")
        top["prompt_form"] = form
        return cls(talker=talker, code_predictor=predictor, speaker_encoder=speaker, tts_model_type=mtype, **top)
