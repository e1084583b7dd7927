"""Synthetic full Qwen3-TTS 12 Hz model roots in the real on-disk format.

``write_tts_checkpoint(out, config="reduced"|"published"|"reduced-1.7b"|"published-1.7b", variant="base"|"custom-voice"|"voice-design")``
writes what a published model root holds and what qwen-tts 0.1.1 loads with its own classes:

* ``config.json`` (``model_type`` qwen3_tts, ``talker_config`` with ``code_predictor_config``,
  ``speaker_encoder_config``, the text special-token ids) and ``generation_config.json``;
* ``model.safetensors`` with the official keys: ``talker.model.*`` (layers, norm,
  ``codec_embedding``, ``text_embedding``), ``talker.text_projection.*``, ``talker.codec_head``,
  ``talker.code_predictor.*`` and, for Base, ``speaker_encoder.*``;
* a small byte-level BPE text tokenizer in the Qwen file format (``vocab.json``, ``merges.txt``,
  ``tokenizer_config.json`` with its ``added_tokens_decoder``), trained here with ``tokenizers`` on
  a built-in English text; the special tokens sit at the ids ``config.json`` names (for the
  published config the real ids 151643-151673, the gap filled with placeholder entries);
* ``speech_tokenizer/`` from ``synthetic.write_checkpoint`` (same config name and seed): the
  decoder, the Mimi encoder half and ``preprocessor_config.json``, so the root loads as it is
  through qwen-tts' public ``Qwen3TTSModel.from_pretrained(root)``
  (``tests/models/test_synthetic_official_load.py``).

Sources of the published values (``PUBLISHED``):

* architecture (talker 28 layers, hidden 1024, 16 heads / 8 kv heads, head_dim 128, intermediate
  3072, rope_theta 1e6, interleaved mrope_section [24, 20, 20], vocab 3072, text vocab 151936,
  text hidden 2048; code predictor 5 layers, hidden 1024, vocab 2048, 16 code groups; codec ids
  pad 2148 / bos 2149 / eos 2150 / think 2154 / nothink 2155 / think_bos 2156 / think_eos 2157;
  text ids im_start 151644, im_end 151645, tts_pad 151671, tts_bos 151672, tts_eos 151673):
  public copies of the 0.6B model's config.json quoted in third-party ports (found with code search;
  they agree with each other); qwen-tts 0.1.1's ``configuration_qwen3_tts.py`` defaults differ
  (talker 20 layers, kv heads 2, codec ids 4196-4205) and are not the published model;
* speaker encoder: qwen-tts defaults (ECAPA 512x4 + 1536, enc_dim 1024, the published value);
* languages and speakers: the ids seen in those public copies (english 2050, german 2053,
  chinese 2055, sichuan_dialect 2062, beijing_dialect 2074; aiden 2861, eric 2875 (sichuan),
  dylan 2878 (beijing), uncle_fu 3010, ryan 3061, vivian 3065, serena 3066).  The other published
  languages and speakers (Japanese, Korean, ..., ono_anna, sohee) were not found and are left out;
* generation_config.json: the values repeated in those copies and qwen-tts' hard defaults.

``published-1.7b`` (``PUBLISHED_1B7``) writes the 1.7B CustomVoice, VoiceDesign and Base; ``reduced-1.7b``
their structure at the reduced size.  Published VoiceDesign exists only at 1.7B;
``--config published --variant voice-design`` writes the 0.6B shape with ``tts_model_type``
voice_design (a synthetic stand-in).
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

from rkspeech.core.atomic import atomic_path, write_json, write_text
from rkspeech.core.errors import RkspeechError

VARIANTS = {"base": "base", "custom-voice": "custom_voice", "voice-design": "voice_design"}

_LANGUAGES = {"english": 2050, "german": 2053, "chinese": 2055, "sichuan_dialect": 2062, "beijing_dialect": 2074}
_SPEAKERS = {"aiden": 2861, "eric": 2875, "dylan": 2878, "uncle_fu": 3010, "ryan": 3061, "vivian": 3065,
             "serena": 3066}
_DIALECT = {"eric": "sichuan_dialect", "dylan": "beijing_dialect"}
_CODEC_IDS = {"codec_pad_id": 2148, "codec_bos_id": 2149, "codec_eos_token_id": 2150, "codec_think_id": 2154,
              "codec_nothink_id": 2155, "codec_think_bos_id": 2156, "codec_think_eos_id": 2157}

PUBLISHED = {
    "talker": {"vocab_size": 3072, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
               "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
               "max_position_embeddings": 32768, "rope_theta": 1000000, "rms_norm_eps": 1e-6,
               "text_vocab_size": 151936, "text_hidden_size": 2048, "num_code_groups": 16,
               "mrope_section": [24, 20, 20]},
    "code_predictor": {"vocab_size": 2048, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 5,
                       "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                       "max_position_embeddings": 65536, "rope_theta": 1000000, "rms_norm_eps": 1e-6,
                       "num_code_groups": 16},
    "speaker_encoder": {"mel_dim": 128, "enc_dim": 1024, "enc_channels": [512, 512, 512, 512, 1536],
                        "enc_kernel_sizes": [5, 3, 3, 3, 1], "enc_dilations": [1, 2, 3, 4, 1],
                        "enc_attention_channels": 128, "enc_res2net_scale": 8, "enc_se_channels": 128,
                        "sample_rate": 24000},
    "first_special": 151643, "size": "0b6",
}
#: Same structure, narrow and shallow: parity tests run in seconds.  Code predictor narrower than
#: the talker so ``small_to_mtp_projection`` is exercised (the 1.7B model has one).
REDUCED = {
    "talker": {**PUBLISHED["talker"], "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
               "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "text_hidden_size": 48,
               "mrope_section": [4, 2, 2]},
    "code_predictor": {**PUBLISHED["code_predictor"], "hidden_size": 48, "intermediate_size": 96,
                       "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 12},
    "speaker_encoder": {**PUBLISHED["speaker_encoder"], "enc_dim": 64, "enc_channels": [32, 32, 32, 32, 96],
                        "enc_attention_channels": 16, "enc_res2net_scale": 4, "enc_se_channels": 16},
    "first_special": None, "size": "reduced",
}
#: The 1.7B checkpoints (CustomVoice, VoiceDesign, Base; issue 54): the talker twice as wide as
#: the 0.6B's (hidden 2048 = text hidden, intermediate 6144), so ``text_projection`` is square and
#: ``small_to_mtp_projection`` a real Linear 2048 -> 1024; the code predictor as at 0.6B; the speaker
#: encoder's x-vector as wide as the talker (``enc_dim`` 2048); ``tts_model_size`` 1b7 (the official
#: takes an ``instruct`` for CustomVoice only then).  Two more CustomVoice speakers (ono_anna 2873,
#: sohee 2864).  Values from public copies of the 1.7B config.json and the issue's facts.
PUBLISHED_1B7 = {
    "talker": {**PUBLISHED["talker"], "hidden_size": 2048, "intermediate_size": 6144},
    "code_predictor": dict(PUBLISHED["code_predictor"]),
    "speaker_encoder": {**PUBLISHED["speaker_encoder"], "enc_dim": 2048},
    "first_special": 151643, "size": "1b7",
}
#: The 1.7B's structure, narrow and shallow: talker hidden = text hidden (square text projection),
#: a narrower code predictor behind a real projection, x-vector as wide as the talker, size 1b7.
REDUCED_1B7 = {
    "talker": {**REDUCED["talker"], "hidden_size": 64, "text_hidden_size": 64},
    "code_predictor": dict(REDUCED["code_predictor"]),
    "speaker_encoder": {**REDUCED["speaker_encoder"], "enc_dim": 64},
    "first_special": None, "size": "1b7",
}
CONFIGS = {"published": PUBLISHED, "reduced": REDUCED, "published-1.7b": PUBLISHED_1B7, "reduced-1.7b": REDUCED_1B7}
#: the speech tokenizer (vocoder) each config's root carries: one 12 Hz tokenizer for every size
VOCODER_CONFIG = {"published": "published", "published-1.7b": "published", "reduced": "reduced",
                  "reduced-1.7b": "reduced"}
#: speakers only the 1.7B CustomVoice has
_SPEAKERS_1B7 = {"ono_anna": 2873, "sohee": 2864}
GENERATION_CONFIG = {"do_sample": True, "repetition_penalty": 1.05, "temperature": 0.9, "top_p": 1.0, "top_k": 50,
                     "subtalker_dosample": True, "subtalker_temperature": 0.9, "subtalker_top_k": 50,
                     "subtalker_top_p": 1.0, "max_new_tokens": 8192}

BPE_VOCAB = 600
_CORPUS = """The quick brown fox jumps over the lazy dog. Hello, world! This is a synthetic checkpoint for
speech synthesis on the board. The assistant reads text aloud, one sentence at a time, and the user listens.
A warm, gentle voice speaks slowly and clearly. Numbers such as 1, 2, 3 and 2026 are read digit by digit.
Streaming speech starts playing before the whole sentence has been generated. Good morning, good evening.
She said she would be here by noon. It is a bright, cold day in April, and the clocks are striking thirteen.
""" + "assistant user system " * 50


def _train_bpe(vocab_size: int):
    from tokenizers import (
        Regex,
        Tokenizer,
        models,
        normalizers,
        pre_tokenizers,
        trainers,
    )

    from rkspeech.models.qwen3_tts.text_tokenizer import QWEN2_SPLIT

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False, special_tokens=[])
    tok.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    return json.loads(tok.to_str())["model"]


def trained_bpe() -> tuple[dict, list[str]]:
    """The small byte-level BPE trained on ``_CORPUS``: ``(vocab {token: id} in id order, merges)``."""
    model = _train_bpe(BPE_VOCAB)
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return vocab, merges


def added_tokens_decoder(first: int, names, special=lambda name: True) -> dict:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` for ``names`` at ids ``first, first + 1, ...``;
    ``special(name)`` is the token's ``special`` flag (``decode(skip_special_tokens=True)`` drops it)."""
    return {str(first + i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                             "single_word": False, "special": special(name)} for i, name in enumerate(names)}


def write_tokenizer_files(root: Path, vocab: dict, merges: list[str], config: dict) -> None:
    """vocab.json, merges.txt and tokenizer_config.json, in the Qwen file format."""
    write_text(root / "vocab.json", json.dumps(vocab, ensure_ascii=False))
    write_text(root / "merges.txt", "#version: 0.2\n" + "\n".join(merges) + "\n")
    write_json(root / "tokenizer_config.json", config)


def write_text_tokenizer(root: Path, first_special: int | None) -> dict:
    """vocab.json, merges.txt, tokenizer_config.json; returns the special-token ids."""
    vocab, merges = trained_bpe()
    n = len(vocab)
    first = n if first_special is None else first_special
    if first < n:
        raise RkspeechError(f"first special id {first} below the BPE vocabulary ({n})")
    for i in range(n, first):
        vocab[f"<|placeholder_{i}|>"] = i  # the real vocabulary's ordinary tokens stand here
    names = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    if first_special is not None:  # the real layout: other specials up to 151670, then the tts tokens
        names += [f"<|reserved_special_{i}|>" for i in range(first + 3, 151671)]
    names += ["<tts_pad>", "<tts_text_bos>", "<tts_text_eod>"]
    ids = {name: first + i for i, name in enumerate(names)}
    write_tokenizer_files(root, vocab, merges, {
        "add_prefix_space": False, "added_tokens_decoder": added_tokens_decoder(first, names), "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None,
    })
    return {"im_start": ids["<|im_start|>"], "im_end": ids["<|im_end|>"], "tts_pad": ids["<tts_pad>"],
            "tts_bos": ids["<tts_text_bos>"], "tts_eos": ids["<tts_text_eod>"], "text_vocab": first + len(names)}


#: Keys of qwen-tts 0.1.1's ``Qwen3TTSTalkerConfig`` / ``Qwen3TTSTalkerCodePredictorConfig`` that
#: nothing reads at inference, at the classes' defaults (with ``max_window_layers`` 28, the code
#: predictor's): every ``__init__`` key of those classes is in the file (``tests/models/test_synthetic_keys.py``).
_UNREAD_DEFAULTS = {"initializer_range": 0.02, "tie_word_embeddings": False}


def official_config_json(config: str, variant: str, special: dict) -> dict:
    c = copy.deepcopy(CONFIGS[config])
    t, cp = c["talker"], c["code_predictor"]
    mrope = t.pop("mrope_section")
    if c["first_special"] is None:  # a reduced root's small tokenizer
        t["text_vocab_size"] = -(-special["text_vocab"] // 64) * 64
    mtype = VARIANTS[variant]
    spk = {**_SPEAKERS, **(_SPEAKERS_1B7 if c["size"] == "1b7" else {})} if mtype == "custom_voice" else {}
    talker = {
        **t, **_CODEC_IDS, "model_type": "qwen3_tts_talker", "hidden_act": "silu", "attention_bias": False,
        "attention_dropout": 0.0, "use_sliding_window": False, "sliding_window": None, "use_cache": True,
        **_UNREAD_DEFAULTS, "rope_scaling": {"interleaved": True, "mrope_section": mrope, "rope_type": "default"},
        "position_id_per_seconds": 13, "codec_language_id": dict(_LANGUAGES), "spk_id": spk,
        "spk_is_dialect": {name: _DIALECT.get(name, False) for name in spk},
        "code_predictor_config": {**cp, "model_type": "qwen3_tts_talker_code_predictor", "hidden_act": "silu",
                                  "attention_bias": False, "attention_dropout": 0.0, "use_sliding_window": False,
                                  "sliding_window": None, "rope_scaling": None, "use_cache": True,
                                  **_UNREAD_DEFAULTS, "max_window_layers": 28,
                                  "layer_types": ["full_attention"] * cp["num_hidden_layers"]},
    }
    return {
        "architectures": ["Qwen3TTSForConditionalGeneration"], "model_type": "qwen3_tts",
        "tokenizer_type": "qwen3_tts_tokenizer_12hz", "tts_model_size": c["size"], "tts_model_type": mtype,
        "im_start_token_id": special["im_start"], "im_end_token_id": special["im_end"],
        "tts_pad_token_id": special["tts_pad"], "tts_bos_token_id": special["tts_bos"],
        "tts_eos_token_id": special["tts_eos"], "talker_config": talker,
        "speaker_encoder_config": c["speaker_encoder"], "transformers_version": "4.57.3",
    }


def _init(module, seed: int) -> None:
    """Fan-in scaled linears/convs, unit-variance embeddings, norms near 1 (deterministic in seed)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 1:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
            elif "embedding" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / fan_in**0.5)


def write_tts_checkpoint(out_dir: str | os.PathLike, config: str = "reduced", variant: str = "custom-voice",
                         seed: int = 0) -> Path:
    """Write a synthetic model root at ``out_dir``; returns it."""
    import torch
    from rkspeech.models.safetensors_file import save_file_stable

    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint
    from rkspeech.models.qwen3_tts.tts_checkpoint import TTSNet
    from rkspeech.models.qwen3_tts.tts_config import TTSConfig

    if config not in CONFIGS:
        raise RkspeechError(f"unknown synthetic config {config!r}; choose one of {', '.join(CONFIGS)}")
    if variant not in VARIANTS:
        raise RkspeechError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    special = write_text_tokenizer(root, CONFIGS[config]["first_special"])
    raw = official_config_json(config, variant, special)
    cfg = TTSConfig.from_dict(raw)
    net = TTSNet(cfg)
    _init(net.module, seed)
    dtype = torch.bfloat16 if config.startswith("published") else torch.float32  # published files are bf16
    tensors = {k: v.detach().to(dtype).contiguous() for k, v in net.module.state_dict().items()}
    with atomic_path(root / "model.safetensors") as tmp:
        save_file_stable(tensors, tmp, metadata={"format": "pt", "rkspeech_synthetic": f"{config}/{variant}/seed={seed}"})
    write_json(root / "generation_config.json", GENERATION_CONFIG)
    write_checkpoint(root, VOCODER_CONFIG[config], seed)
    write_json(root / "config.json", raw)  # last: a root with config.json is complete
    return root
