"""Synthetic Qwen3-ASR model roots in the published on-disk format.

``write_asr_checkpoint(out, config="reduced"|"published"|"published-1.7b", seed=0)`` writes what a
published Qwen3-ASR root holds, loadable as it is by qwen-asr 0.0.6's
``Qwen3ASRModel.from_pretrained(root)`` (``tests/models/test_qwen3_asr_root.py``):

* ``config.json``: ``model_type`` qwen3_asr, ``thinker_config`` with ``audio_config`` and
  ``text_config``, serialized as transformers 4.57 does (``to_json_string``, sorted keys; the
  nested configs carry every ``PretrainedConfig`` attribute, ``_PRETRAINED_DEFAULTS``);
* ``generation_config.json``, ``preprocessor_config.json`` (``WhisperFeatureExtractor``, 128 mels),
  ``chat_template.json``;
* the text tokenizer: ``vocab.json`` + ``merges.txt`` (a small byte-level BPE trained here,
  ``synthetic_tts.trained_bpe``), every id up to the first special one filled with a made-up
  lower-case word (``placeholder_words``: byte-level letters behind "Ġ", so any id the
  random-weight model emits decodes to text, " zabo"), and ``tokenizer_config.json`` with the
  specials at their real ids (``SPECIAL_TOKENS``) and the audio token attributes the processor reads;
* the weights in bf16 with the official keys (``asr_checkpoint.tensor_shapes``): one
  ``model.safetensors``, or for the 1.7B two shards and ``model.safetensors.index.json`` as
  published.  Each tensor is drawn from its own generator (seeded from the seed and its name) and
  written as it is drawn (``safetensors_file.write_streamed``), so a published root is written
  holding one tensor at a time, and the bytes depend on the config name and seed only.

The published sizes check out against the published file sizes: the 0.6B's weights come to
938.0 M parameters (1,876,091,744 bytes; a third-party count of the published 0.6B says 938 M, and
its F16 GGUF is 1.88 GB, so the published file stores ``thinker.lm_head.weight`` beside the tied
embeddings, as written here), the 1.7B's to 4,698,434,816 bytes (published: about 4.7 GB in two
shards).  Writing them took 24 s (peak RSS 1.8 GB) and 45 s (2.8 GB) on a shared 2-core host.

Weights are random, scaled so activations stay O(1) through the encoder and the decoder (fan-in
scaled matrices, norms near 1), and the embeddings (tied to ``lm_head``, whose copy is stored as
published) scaled so the logits spread with a standard deviation of about ``LOGIT_STD``: greedy
decoding then has clear winners (top-1 minus top-2 gaps far above float32 rounding) and the
transcript is a deterministic function of the audio.

Sources of the published values (``PUBLISHED``, ``PUBLISHED_17B``), all third-party public copies
of the Hugging Face files (the files themselves could not be fetched here):

* sizes (0.6B: encoder d_model 896, 18 layers, 14 heads, ffn 3584, output 1024; decoder hidden
  1024, 28 layers, 16 / 8 heads, head_dim 128, intermediate 3072, vocab 151936; 1.7B: encoder
  1024, 24 layers, 16 heads, ffn 4096, output 2048; decoder hidden 2048, intermediate 6144, else
  the same), tied embeddings for both, the file layout (0.6B one ``model.safetensors``, 1.7B two
  shards + index, bf16), special ids and the prompt: antirez/qwen-asr ``MODEL.md``; the same sizes
  in ivan-digital/qwen3-asr-swift ``docs/asr-model.md``;
* ``n_window`` 50, ``n_window_infer`` 800, ``downsample_hidden_size`` 480, ``conv_chunksize`` 500,
  ``max_source_positions`` 1500, ``max_position_embeddings`` 65536, ``rope_theta`` 1000000, the
  ``rope_scaling`` keys (``interleaved``, ``mrope_interleaved``, ``mrope_section`` [24, 20, 20],
  ``rope_type``, ``type``), the thinker's keys (``dtype`` bfloat16, ``initializer_range``) and the
  full ``PretrainedConfig`` dump of the nested configs: test fixtures and config structs of
  third-party ports (jhqxxx/aha ``src/models/qwen3_asr/config.rs`` deserializes every one of
  those keys without defaults, so the published file has them);
* ``preprocessor_config.json``: Whisper's defaults with ``feature_size`` 128, ``processor_class``
  Qwen3ASRProcessor, ``return_attention_mask`` true (two ports' copies agree);
* ``transformers_version`` 4.57.6: one port's fixture of the 1.7B root, and qwen-asr 0.0.6's pin.

Not found, chosen here (said where they are set): the ids between the named specials (151675,
151677-151703: reserved specials), ``support_languages`` (qwen-asr's 30 language names),
``generation_config.json``'s values (the keys are known: do_sample, eos_token_id, pad_token_id,
temperature), the tokenizer_config.json keys beyond the Qwen3 ones, the chat template text (written
to give exactly the published prompt) and how the 1.7B's tensors are split between its shards.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
from pathlib import Path

from rkspeech.core.atomic import atomic_path, write_text
from rkspeech.core.errors import RkspeechError

MODEL_TYPE = "qwen3_asr"
TRANSFORMERS_VERSION = "4.57.6"
#: standard deviation of the logits the synthetic weights aim at (measured: see the tests)
LOGIT_STD = 5.0
#: shard size for roots published as shards (the 1.7B's two files; transformers' "4GB")
MAX_SHARD_BYTES = 4 * 10**9

_TEXT_COMMON = {"vocab_size": 151936, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
                "head_dim": 128, "max_position_embeddings": 65536, "rope_theta": 1000000, "rms_norm_eps": 1e-06,
                "hidden_act": "silu", "attention_bias": False, "attention_dropout": 0.0, "initializer_range": 0.02,
                "use_cache": True, "tie_word_embeddings": True, "mrope_section": [24, 20, 20]}
_AUDIO_COMMON = {"num_mel_bins": 128, "downsample_hidden_size": 480, "n_window": 50, "n_window_infer": 800,
                 "max_source_positions": 1500, "conv_chunksize": 500, "activation_function": "gelu",
                 "scale_embedding": False, "dropout": 0, "attention_dropout": 0, "activation_dropout": 0,
                 "initializer_range": 0.02}
PUBLISHED = {
    "audio": {**_AUDIO_COMMON, "d_model": 896, "encoder_layers": 18, "encoder_attention_heads": 14,
              "encoder_ffn_dim": 3584, "output_dim": 1024},
    "text": {**_TEXT_COMMON, "hidden_size": 1024, "intermediate_size": 3072},
    "sharded": False,
}
PUBLISHED_17B = {
    "audio": {**_AUDIO_COMMON, "d_model": 1024, "encoder_layers": 24, "encoder_attention_heads": 16,
              "encoder_ffn_dim": 4096, "output_dim": 2048},
    "text": {**_TEXT_COMMON, "hidden_size": 2048, "intermediate_size": 6144},
    "sharded": True,
}
#: Same structure, narrow and shallow (mels, windows, vocabulary and special ids as published):
#: the official package loads and transcribes it in seconds.
REDUCED = {
    "audio": {**_AUDIO_COMMON, "d_model": 128, "encoder_layers": 2, "encoder_attention_heads": 4,
              "encoder_ffn_dim": 256, "downsample_hidden_size": 32, "output_dim": 128},
    "text": {**_TEXT_COMMON, "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "mrope_section": [6, 5, 5]},
    "sharded": False,
}
CONFIGS = {"reduced": REDUCED, "published": PUBLISHED, "published-1.7b": PUBLISHED_17B}

#: The special tokens and their ids.  151643-151668: Qwen3's (public copies of its tokenizer files
#: agree); 151669-151674: the audio / tts block of Qwen3-Omni, on which Qwen3-ASR builds; 151676
#: <|audio_pad|> and 151704 <asr_text>: Qwen3-ASR's own (MODEL.md above).  <asr_text> is not
#: special: the official ``parse_asr_output`` splits the decoded text (``skip_special_tokens=True``)
#: on it.  <timestamp> 151705 is the forced aligner's (its ``timestamp_token_id``), kept here as
#: asked; one third-party count of the 0.6B's tokenizer says 151,705 tokens, i.e. no id 151705.
#: 151675 and 151677-151703 were not found: reserved specials.
_QWEN3 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
          "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
          "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
          "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
          "<think>", "</think>", "<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
          "<tts_text_bos_single>"]
FIRST_SPECIAL = 151643
SPECIAL_TOKENS = {FIRST_SPECIAL + i: name for i, name in enumerate(_QWEN3)}
SPECIAL_TOKENS.update({151676: "<|audio_pad|>", 151704: "<asr_text>", 151705: "<timestamp>"})
for _i in range(FIRST_SPECIAL, 151706):
    SPECIAL_TOKENS.setdefault(_i, f"<|reserved_special_{_i}|>")
#: added tokens that ``decode(skip_special_tokens=True)`` keeps (Qwen3 marks its tool/fim/think
#: tokens so; the ASR markers must survive decoding)
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
               "<asr_text>", "<timestamp>"}
AUDIO_TOKENS = {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>",
                "audio_eos_token": "<|audio_end|>", "image_token": "<|image_pad|>", "video_token": "<|video_pad|>",
                "vision_bos_token": "<|vision_start|>", "vision_eos_token": "<|vision_end|>"}
TOKEN_IDS = {"audio_token_id": 151676, "audio_start_token_id": 151669, "audio_end_token_id": 151670,
             "user_token_id": 872}
EOS_TOKEN_IDS = [151645, 151643]

#: not found: qwen-asr 0.0.6's ``SUPPORTED_LANGUAGES`` (the published list may also name dialects)
SUPPORT_LANGUAGES = ["Chinese", "English", "Cantonese", "Arabic", "German", "French", "Spanish", "Portuguese",
                     "Indonesian", "Italian", "Korean", "Russian", "Thai", "Vietnamese", "Japanese", "Turkish", "Hindi",
                     "Malay", "Dutch", "Swedish", "Danish", "Finnish", "Polish", "Czech", "Filipino", "Persian",
                     "Greek", "Romanian", "Hungarian", "Macedonian"]
#: keys known from a port; values not found: greedy (the official ``transcribe`` decodes greedily)
GENERATION_CONFIG = {"do_sample": False, "eos_token_id": EOS_TOKEN_IDS, "pad_token_id": 151643, "temperature": 1.0,
                     "transformers_version": TRANSFORMERS_VERSION}
PREPROCESSOR_CONFIG = {"chunk_length": 30, "dither": 0.0, "feature_extractor_type": "WhisperFeatureExtractor",
                       "feature_size": 128, "hop_length": 160, "n_fft": 400, "n_samples": 480000,
                       "nb_max_frames": 3000, "padding_side": "right", "padding_value": 0.0,
                       "processor_class": "Qwen3ASRProcessor", "return_attention_mask": True, "sampling_rate": 16000}
#: Written to give exactly the published prompt (MODEL.md's ids; the candle port's prompt builder):
#: system = the context, the user's audio as <|audio_start|><|audio_pad|><|audio_end|>, then the
#: assistant's generation prompt.  The published template's own text was not found.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- else %}{%- for content in message['content'] %}"
    "{%- if content['type'] == 'audio' or 'audio' in content or 'audio_url' in content %}"
    "{{- '<|audio_start|><|audio_pad|><|audio_end|>' }}"
    "{%- elif content['type'] == 'text' %}{{- content['text'] }}{%- endif %}"
    "{%- endfor %}{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

#: The ``PretrainedConfig`` attributes transformers 4.57's ``to_dict`` writes into every nested
#: config, at their defaults (``tests/models/test_qwen3_asr_root.py`` checks the key sets against
#: the official classes' own serialization).
_PRETRAINED_DEFAULTS = {
    "_name_or_path": "", "add_cross_attention": False, "architectures": None, "bad_words_ids": None,
    "begin_suppress_tokens": None, "bos_token_id": None, "chunk_size_feed_forward": 0,
    "cross_attention_hidden_size": None, "decoder_start_token_id": None, "diversity_penalty": 0.0,
    "do_sample": False, "dtype": None, "early_stopping": False, "encoder_no_repeat_ngram_size": 0,
    "eos_token_id": None, "exponential_decay_length_penalty": None, "finetuning_task": None,
    "forced_bos_token_id": None, "forced_eos_token_id": None, "id2label": {"0": "LABEL_0", "1": "LABEL_1"},
    "is_decoder": False, "is_encoder_decoder": False, "label2id": {"LABEL_0": 0, "LABEL_1": 1},
    "length_penalty": 1.0, "max_length": 20, "min_length": 0, "no_repeat_ngram_size": 0, "num_beam_groups": 1,
    "num_beams": 1, "num_return_sequences": 1, "output_attentions": False, "output_hidden_states": False,
    "output_scores": False, "pad_token_id": None, "prefix": None, "problem_type": None, "pruned_heads": {},
    "remove_invalid_values": False, "repetition_penalty": 1.0, "return_dict": True, "return_dict_in_generate": False,
    "sep_token_id": None, "suppress_tokens": None, "task_specific_params": None, "temperature": 1.0,
    "tf_legacy_loss": False, "tie_encoder_decoder": False, "tie_word_embeddings": True, "tokenizer_class": None,
    "top_k": 50, "top_p": 1.0, "torchscript": False, "typical_p": 1.0, "use_bfloat16": False,
}


def _config_name(config: str) -> dict:
    if config not in CONFIGS:
        raise RkspeechError(f"unknown synthetic config {config!r}; choose one of {', '.join(CONFIGS)}")
    return copy.deepcopy(CONFIGS[config])


def official_config_json(config: str) -> dict:
    """The ``config.json`` of a synthetic root (no weights written)."""
    c = _config_name(config)
    a, t = c["audio"], c["text"]
    mrope = t.pop("mrope_section")
    audio = {**_PRETRAINED_DEFAULTS, **a, "model_type": "qwen3_asr_audio_encoder",
             "num_hidden_layers": a["encoder_layers"]}
    text = {**_PRETRAINED_DEFAULTS, **t, "model_type": "qwen3_asr_text",
            "rope_scaling": {"interleaved": True, "mrope_interleaved": True, "mrope_section": mrope,
                             "rope_type": "default", "type": "default"}}
    thinker = {"audio_config": audio, "text_config": text, **TOKEN_IDS, "dtype": "bfloat16",
               "initializer_range": 0.02, "model_type": "qwen3_asr_thinker"}
    return {"architectures": ["Qwen3ASRForConditionalGeneration"], "dtype": "bfloat16", "model_type": MODEL_TYPE,
            "support_languages": SUPPORT_LANGUAGES, "thinker_config": thinker,
            "transformers_version": TRANSFORMERS_VERSION}


def _json_text(data) -> str:
    return json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n"  # as transformers writes them


# -- text tokenizer ------------------------------------------------------------------------------

_CONSONANTS, _VOWELS = "bcdfghjklmnprstvwz", "aeiou"
_STRIDE = 7919  # a prime: coprime with 90**3


def placeholder_words(count: int, taken) -> list[str]:
    """``count`` distinct made-up words ("Ġ" + two or three consonant-vowel syllables), none in
    ``taken``: byte-level BPE tokens that decode to " zabo", " kitumo", ... (every character is in
    the byte-level alphabet, so transformers' and the tokenizers library's decoders both turn them
    into text; they never look like a special token).  The three-syllable words are visited in a
    fixed scrambled order (a stride coprime with their number), so neighbouring ids differ."""
    syllables = [c + v for c in _CONSONANTS for v in _VOWELS]
    n = len(syllables)
    two = [a + b for a in syllables for b in syllables]
    three = (syllables[j // (n * n)] + syllables[j // n % n] + syllables[j % n]
             for j in ((k * _STRIDE) % n**3 for k in range(n**3)))
    words: list[str] = []
    for word in itertools.chain(two, three):
        word = "\u0120" + word
        if word not in taken:
            words.append(word)
            if len(words) == count:
                return words
    raise RkspeechError(f"cannot make {count} placeholder words")


def write_asr_tokenizer(root: Path) -> None:
    """vocab.json, merges.txt, tokenizer_config.json and chat_template.json."""
    from rkspeech.models.qwen3_tts.synthetic_tts import added_tokens_decoder, trained_bpe, write_tokenizer_files

    vocab, merges = trained_bpe()
    for i, word in enumerate(placeholder_words(FIRST_SPECIAL - len(vocab), vocab), start=len(vocab)):
        vocab[word] = i
    names = [SPECIAL_TOKENS[i] for i in sorted(SPECIAL_TOKENS)]
    added = added_tokens_decoder(FIRST_SPECIAL, names, special=lambda name: name not in NOT_SPECIAL)
    extra = _QWEN3[1:14] + ["<|audio_start|>", "<|audio_end|>", "<|audio_pad|>"]
    config = {"add_bos_token": False, "add_prefix_space": False, "added_tokens_decoder": added,
              "additional_special_tokens": extra, "bos_token": None, "clean_up_tokenization_spaces": False,
              "eos_token": "<|im_end|>", "errors": "replace", "extra_special_tokens": dict(AUDIO_TOKENS),
              **AUDIO_TOKENS, "model_max_length": 131072, "pad_token": "<|endoftext|>",
              "processor_class": "Qwen3ASRProcessor", "split_special_tokens": False,
              "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    write_tokenizer_files(root, vocab, merges, config)
    write_text(root / "chat_template.json", _json_text({"chat_template": CHAT_TEMPLATE}))


# -- weights -------------------------------------------------------------------------------------

def _generator(seed: int, name: str):
    import torch

    digest = hashlib.sha256(f"rkspeech-asr/{seed}/{name}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


#: Multipliers on fan-in scaled matrices (whose outputs would keep their inputs' size), measured
#: on the reduced root over four 2 s sounds: without them the conv front end's output (RMS 0.07)
#: drowns under the sinusoidal positions it is added to (every sound gave the same encoder output,
#: cosine 0.98, and the same transcript), and the decoder's state moved so little from token to
#: token that greedy decoding repeated one word.  With them: conv_out RMS 3.1, distinct
#: transcripts per sound with 10-32 distinct tokens in 32.
GAINS = (("thinker.audio_tower.conv2d", 2.0),   # three convolutions + GELU
         ("thinker.audio_tower.conv_out", 3.0),  # the audio content over the positions
         ("mlp.down_proj", 4.0))                 # the decoder's MLP: each token moves the state


def _tensor(name: str, shape: tuple, seed: int, hidden: int, tied: bool = True):
    """The bf16 tensor ``name``: norms near 1, biases near 0, embeddings scaled for ``LOGIT_STD``
    (logit = RMS-normed hidden state . embedding row), other matrices fan-in scaled (x ``GAINS``)."""
    import torch

    if tied and name == "thinker.lm_head.weight":  # the embeddings' copy, stored as published
        name = "thinker.model.embed_tokens.weight"
    x = torch.randn(shape, generator=_generator(seed, name))
    if name.endswith(("norm.weight", "ln_post.weight")):
        x = 1.0 + 0.1 * x
    elif len(shape) == 1:
        x = 0.02 * x
    elif name.endswith("embed_tokens.weight"):
        x = x * (LOGIT_STD / hidden**0.5)
    else:
        gain = next((g for part, g in GAINS if part in name), 1.0)
        x = x * (gain / _numel(shape[1:]) ** 0.5)
    return x.to(torch.bfloat16)


def _shards(shapes: dict, sharded: bool) -> list[list[str]]:
    if not sharded:
        return [list(shapes)]
    out: list[list[str]] = [[]]
    size = 0
    for name, shape in shapes.items():
        n = 2 * _numel(shape)
        if out[-1] and size + n > MAX_SHARD_BYTES:
            out.append([])
            size = 0
        out[-1].append(name)
        size += n
    return out


def _write_weights(root: Path, cfg, sharded: bool, seed: int, tag: str) -> None:
    import torch

    from rkspeech.models.qwen3_asr.asr_checkpoint import WEIGHT_INDEX, WEIGHTS, tensor_shapes
    from rkspeech.models.safetensors_file import write_streamed

    shapes = tensor_shapes(cfg)
    hidden = cfg.text.hidden_size

    def make(name):
        return lambda: _tensor(name, shapes[name], seed, hidden, cfg.tie_word_embeddings).view(torch.int16) \
            .numpy().tobytes()

    groups = _shards(shapes, sharded)
    files = [WEIGHTS] if len(groups) == 1 else \
        [f"model-{i + 1:05d}-of-{len(groups):05d}.safetensors" for i in range(len(groups))]
    metadata = {"format": "pt", "rkspeech_synthetic": tag}
    for file, names in zip(files, groups):
        with atomic_path(root / file) as tmp:
            write_streamed(tmp, [(n, "BF16", shapes[n], make(n)) for n in sorted(names)], metadata)
    if len(groups) > 1:
        total = sum(_numel(s) for s in shapes.values())
        tied = _numel(shapes["thinker.lm_head.weight"]) if cfg.tie_word_embeddings else 0
        index = {"metadata": {"total_parameters": total - tied, "total_size": 2 * total},
                 "weight_map": {n: f for f, names in zip(files, groups) for n in names}}
        write_text(root / WEIGHT_INDEX, _json_text(index))


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def write_asr_checkpoint(out_dir: str | os.PathLike, config: str = "reduced", seed: int = 0) -> Path:
    """Write a synthetic Qwen3-ASR model root at ``out_dir``; returns it."""
    from rkspeech.models.qwen3_asr.asr_config import ASRConfig

    spec = _config_name(config)
    raw = official_config_json(config)
    cfg = ASRConfig.from_dict(raw, GENERATION_CONFIG)
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    write_asr_tokenizer(root)
    write_text(root / "preprocessor_config.json", _json_text(PREPROCESSOR_CONFIG))
    write_text(root / "generation_config.json", _json_text(GENERATION_CONFIG))
    _write_weights(root, cfg, spec["sharded"], seed, f"{config}/seed={seed}")
    write_text(root / "config.json", _json_text(raw))  # last: a root with config.json is complete
    return root
