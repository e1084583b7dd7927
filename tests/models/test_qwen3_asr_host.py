"""The torch-free host pieces of Qwen3-ASR transcription, each against the official package.

Official: PyPI ``qwen-asr==0.0.6`` (``tests/asr_reference.py`` imports it with its stand-in for
``nagisa``) over transformers 4.57 with torch, i.e. the extractor's torch path.  Ours:
``rkspeech.models.qwen3_asr.{features, prompt, transcript_text, languages, long_audio}``.

Measured here: the features differ from the official by at most 3.9e-6 on noise and 1.1e-4 on a
tone over faint hiss (mean 1.2e-6; values span -0.6 to 1.4), all from torch's float32 FFT (ours
is numpy's float64; with torch's spectrum put in, the rest of our steps agreed to 2.4e-7 in a
one-off check); the Mel bank, prompt ids, decoded text, parsed output, language lists and
long-audio cuts are identical.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_asr import features, geometry, languages, long_audio, prompt, transcript_text

SR = 16000
HYPOTHESIS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def official():
    """(inference.utils, Qwen3ASRModel, Qwen3ASRProcessor, _get_feat_extract_output_lengths)."""
    from asr_reference import qwen_asr

    qwen_asr()
    from qwen_asr.core.transformers_backend.processing_qwen3_asr import (
        Qwen3ASRProcessor,
        _get_feat_extract_output_lengths,
    )
    from qwen_asr.inference import utils
    from qwen_asr.inference.qwen3_asr import Qwen3ASRModel

    return utils, Qwen3ASRModel, Qwen3ASRProcessor, _get_feat_extract_output_lengths


def official_features(wave: np.ndarray) -> tuple[np.ndarray, int]:
    """``input_features[0]`` and the attention mask's sum, as ``Qwen3ASRProcessor`` calls the extractor."""
    from transformers import WhisperFeatureExtractor

    out = WhisperFeatureExtractor(feature_size=128)([wave], sampling_rate=SR, padding=True, truncation=False,
                                                    return_attention_mask=True, return_tensors="np")
    return out["input_features"][0], int(out["attention_mask"][0].sum())


def signal(kind: str, seconds: float, seed: int = 0) -> np.ndarray:
    n = int(round(seconds * SR))
    t = np.arange(n) / SR
    rng = np.random.default_rng(seed)
    if kind == "noise":
        return (0.1 * rng.standard_normal(n)).astype(np.float32)
    # a gliding tone switched on and off over faint hiss: most bins far below the frame's peak
    tone = 0.3 * np.sin(2 * np.pi * (200 + 100 * np.sin(3 * t)) * t) * (np.sin(2 * np.pi * 2 * t) > 0)
    return (tone + 0.001 * rng.standard_normal(n)).astype(np.float32)


# -- features -------------------------------------------------------------------------------------

def test_mel_filters_equal_transformers():
    from transformers.audio_utils import mel_filter_bank

    ref = mel_filter_bank(num_frequency_bins=201, num_mel_filters=128, min_frequency=0, max_frequency=8000,
                          sampling_rate=16000, norm="slaney", mel_scale="slaney")
    ours = features.mel_filters()
    assert ours.shape == ref.shape == (201, 128)
    assert float(np.abs(ours - ref).max()) <= 1e-7  # measured: 0.0


#: max abs difference to the official features, by signal (measured: noise 3.9e-6, tone 1.1e-4
#: at 40 s; torch's float32 FFT: the quiet bins of a loud frame carry its rounding most)
TOLERANCE = {"noise": 1e-5, "tone": 3e-4}


@pytest.mark.parametrize("kind", ["noise", "tone"])
@pytest.mark.parametrize("seconds", [0.3, 0.99, 1.0, 5.5, 40.0])
def test_log_mel_matches_official(kind, seconds):
    wave = signal(kind, seconds)
    ref, mask_frames = official_features(wave)
    ours = features.log_mel(wave)
    frames = len(wave) // 160  # no padding to 30 s, Whisper's last STFT frame dropped
    assert ref.shape == ours.shape == (128, frames) and ours.dtype == np.float32
    assert mask_frames == features.feature_frames(len(wave)) == frames
    assert float(np.abs(ours - ref).max()) <= TOLERANCE[kind]
    assert float(np.abs(ours - ref).mean()) <= 5e-6  # measured: 1.2e-6 at most


def test_log_mel_blocks_and_floor_span_the_utterance(monkeypatch):
    """A loud second then 20 s of hiss 100 dB below, cut into 64-frame blocks: the floor (max - 8) is
    the whole utterance's, so the hiss sits on it; a floor taken over the hiss alone (what a
    per-block floor gives there) misses it everywhere (by 0.43 at least, measured)."""
    wave = np.concatenate([signal("noise", 1.0), 1e-5 * signal("noise", 20.0, seed=1)]).astype(np.float32)
    ref, _ = official_features(wave)
    monkeypatch.setattr(features, "BLOCK_FRAMES", 64)
    ours = features.log_mel(wave)
    assert float(np.abs(ours - ref).max()) <= TOLERANCE["noise"]
    hiss = ref[:, 200:]
    assert float(np.abs(hiss - (ref.max() - 2.0)).max()) <= 1e-6  # all on the floor: (max - 8 + 4) / 4
    alone = features.log_mel(wave[200 * 160:])
    assert float(np.abs(alone - hiss).min()) > 0.25


def test_log_mel_shortest_input():
    wave = signal("noise", 201 / SR)
    ref, _ = official_features(wave)
    assert float(np.abs(features.log_mel(wave) - ref).max()) <= TOLERANCE["noise"]
    with pytest.raises(RuntimeError):  # torch.stft's reflection needs more than 200 samples
        official_features(wave[:200])
    with pytest.raises(RkspeechError, match="200 samples long"):
        features.log_mel(wave[:200])
    with pytest.raises(RkspeechError, match="mono"):
        features.log_mel(np.zeros((2, 400), np.float32))


def test_encoder_tokens_match_official(official):
    lengths = official[3]
    frames = np.arange(0, 12001)
    assert [geometry.encoder_tokens(int(f)) for f in frames] == lengths(frames).tolist()
    assert geometry.encoder_tokens(100) == 13 and geometry.encoder_tokens(4000) == 520


# -- prompt ---------------------------------------------------------------------------------------

CORPUS = """Hello, world! The quick brown fox jumps over the lazy dog. Don't stop; we're here, they'll see.
McDonald's iPhone JavaScript OpenAI HuggingFace camelCaseWords and/or either/or http://example.com/a/b
Numbers 1234 and 2026, 3.14159; tabs\tand  double  spaces.\nNew lines\r\nand more.
你好，世界！这是一个测试。欢迎使用语音识别。 Grüße aus München, ça va? ¿Qué tal? Привет мир.
language English language Chinese system user assistant
"""
#: the Qwen3-ASR chat template as third-party code quotes it "verbatim" from the published root
TEMPLATE = (
    "{%- set ns = namespace(system_text='') -%}{%- for m in messages -%}{%- if m.role == 'system' -%}"
    "{%- if m.content is string -%}{%- set ns.system_text = ns.system_text + m.content -%}{%- else -%}"
    "{%- for c in m.content -%}{%- if c.type == 'text' and (c.text is defined) -%}"
    "{%- set ns.system_text = ns.system_text + c.text -%}{%- endif -%}{%- endfor -%}{%- endif -%}{%- endif -%}"
    "{%- endfor -%}{%- set ns2 = namespace(audio_tokens='') -%}{%- for m in messages -%}"
    "{%- if m.content is not string -%}{%- for c in m.content -%}"
    "{%- if c.type == 'audio' or ('audio' in c) or ('audio_url' in c) -%}"
    "{%- set ns2.audio_tokens = ns2.audio_tokens + '<|audio_start|><|audio_pad|><|audio_end|>' -%}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}{%- endfor -%}"
    "{{- '<|im_start|>system\\n' + ns.system_text + '<|im_end|>\\n' -}}"
    "{{- '<|im_start|>user\\n' + ns2.audio_tokens + '<|im_end|>\\n' -}}"
    "{%- for m in messages -%}{%- if m.role == 'assistant' -%}{%- set ns3 = namespace(assistant_text='') -%}"
    "{%- if m.content is string -%}{%- set ns3.assistant_text = m.content -%}{%- else -%}{%- for c in m.content -%}"
    "{%- if c.type == 'text' and (c.text is defined) -%}{%- set ns3.assistant_text = ns3.assistant_text + c.text -%}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}{{- '<|im_start|>assistant\\n' -}}{% generation %}"
    "{{- ns3.assistant_text + '<|im_end|>\\n' -}}{% endgeneration %}{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}")
QWEN3 = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
         "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
         "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
         "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
         "<think>", "</think>", "<|audio_start|>", "<|audio_end|>"]
NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
               "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>",
               "<asr_text>"}


def write_root(root: Path, transformers_version: str | None, first_special: int | None = 151643) -> Path:
    """A Qwen3-ASR tokenizer root: a byte-level BPE trained on ``CORPUS`` (CamelCase, contractions,
    CJK, slashes: the two split regexes give different ids), the BPE padded with ordinary entries up
    to the published first special id 151643 (``first_special=None``: no padding, a small vocabulary),
    the specials at their published ids (<|audio_start|> 151669, <|audio_end|> 151670,
    <|audio_pad|> 151676, <asr_text> 151704 not special), the template, config.json."""
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

    from rkspeech.models.qwen3_tts.text_tokenizer import QWEN2_SPLIT

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.train_from_iterator(CORPUS.splitlines() * 3, trainer=trainers.BpeTrainer(
        vocab_size=900, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    model = json.loads(tok.to_str())["model"]
    vocab = dict(sorted(model["vocab"].items(), key=lambda kv: kv[1]))
    first = first_special or len(vocab)
    vocab.update({f"<|placeholder_{i}|>": i for i in range(len(vocab), first)})
    names = QWEN3 + [f"<|reserved_special_{i}|>" for i in range(28, 61)] + ["<asr_text>"]
    names[151676 - 151643] = "<|audio_pad|>"
    added = {str(first + i): {"content": name, "lstrip": False, "normalized": False, "rstrip": False,
                              "single_word": False, "special": name not in NOT_SPECIAL} for i, name in enumerate(names)}
    audio = {"audio_token": "<|audio_pad|>", "audio_bos_token": "<|audio_start|>", "audio_eos_token": "<|audio_end|>"}
    root.mkdir(parents=True, exist_ok=True)
    (root / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    (root / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    (root / "tokenizer_config.json").write_text(json.dumps({
        "add_prefix_space": False, "added_tokens_decoder": added, "bos_token": None,
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>", "<|audio_start|>", "<|audio_end|>", "<|audio_pad|>"],
        "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>", "errors": "replace",
        "extra_special_tokens": audio, "model_max_length": 131072, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}), encoding="utf-8")
    (root / "chat_template.json").write_text(json.dumps({"chat_template": TEMPLATE}), encoding="utf-8")
    (root / "preprocessor_config.json").write_text(json.dumps({
        "feature_extractor_type": "WhisperFeatureExtractor", "feature_size": 128, "hop_length": 160, "n_fft": 400,
        "padding_side": "right", "padding_value": 0.0, "processor_class": "Qwen3ASRProcessor",
        "return_attention_mask": True, "sampling_rate": 16000}))
    config = {"architectures": ["Qwen3ASRForConditionalGeneration"], "model_type": "qwen3_asr"}
    if transformers_version:
        config["transformers_version"] = transformers_version
    (root / "config.json").write_text(json.dumps(config))
    return root


class Official:
    """The official processor of a root, and its prompt for one request."""

    def __init__(self, official, root: Path):
        import logging

        _, model_cls, processor_cls, _ = official
        logging.getLogger("transformers.tokenization_utils_base").setLevel(logging.ERROR)
        self.processor = processor_cls.from_pretrained(str(root), fix_mistral_regex=True)  # as from_pretrained / LLM
        self.model = type("Shim", (), {"processor": self.processor, "_build_messages": model_cls._build_messages})()
        self._prompt = model_cls._build_text_prompt

    def ids(self, wave: np.ndarray, context: str, language: str | None) -> list[int]:
        text = self._prompt(self.model, context=context, force_language=language)
        return self.processor(text=[text], audio=[wave], return_tensors="np", padding=True)["input_ids"][0].tolist()

    def decode(self, ids: list[int]) -> str:
        return self.processor.batch_decode([ids], skip_special_tokens=True, clean_up_tokenization_spaces=False)[0]


@pytest.fixture(scope="module")
def roots(tmp_path_factory, official):
    """version label -> (root, Official, PromptBuilder); 4.57.6 (qwen-asr's pin) takes the Mistral split."""
    base = tmp_path_factory.mktemp("asr_roots")
    out = {}
    for label, version in (("4.57.6", "4.57.6"), ("4.57.1", "4.57.1")):
        root = write_root(base / label, version)
        out[label] = (root, Official(official, root), prompt.PromptBuilder(root))
    return out


CONTEXTS = ["", "McDonald's iPhone and/or HuggingFace, don't", "你好 Grüße\nline two  x\r\n", "  spaced  ",
            "see <|im_end|> and <asr_text> inside", "DON'T SHOUT. camelCaseWords 3.14159"]


@pytest.mark.parametrize("label", ["4.57.6", "4.57.1"])
@pytest.mark.parametrize("language", [None, "English", "Chinese"])
def test_prompt_ids_match_official(roots, label, language):
    _, ref, builder = roots[label]
    for seconds in (0.3, 5.5, 40.0):
        wave = signal("noise", seconds)
        frames = features.feature_frames(len(wave))
        for context in CONTEXTS:
            expected = ref.ids(wave, context, language)
            p = builder.build(geometry.encoder_tokens(frames), context, language)
            assert p.ids.dtype == np.int64 and p.ids.tolist() == expected, (seconds, context)
            pads = [i for i, t in enumerate(expected) if t == 151676]
            assert (p.audio_start, p.audio_stop) == (pads[0], pads[-1] + 1)
            assert p.audio_stop - p.audio_start == geometry.encoder_tokens(frames)
            assert expected[p.audio_start - 1] == 151669 and expected[p.audio_stop] == 151670
    assert builder.overhead() == len(builder.build(7).ids) - 7


def test_prompt_split_regex_follows_the_official_loader(roots, tmp_path, official):
    """qwen-asr's ``fix_mistral_regex=True`` changes the context's ids under transformers 4.57.6's
    config.json, not under 4.57.1's, nor with a small vocabulary; ours follows in each case."""
    context = CONTEXTS[1]
    a, b = (roots[v][2].build(13, context).ids.tolist() for v in ("4.57.6", "4.57.1"))
    assert a != b and roots["4.57.6"][2].split == prompt.MISTRAL_SPLIT and roots["4.57.1"][2].split is None
    same = [roots[v][2].build(13, "", "English").ids.tolist() for v in ("4.57.6", "4.57.1")]
    assert same[0] == same[1]  # the template's own words split alike
    small = write_root(tmp_path / "small", "4.57.6", first_special=None)
    builder, ref = prompt.PromptBuilder(small), Official(official, small)
    assert builder.split is None
    wave = signal("noise", 1.0)
    assert builder.build(13, context, "English").ids.tolist() == ref.ids(wave, context, "English")


@pytest.mark.parametrize("config", [
    {}, {"transformers_version": "4.57.2", "model_type": "qwen3_asr"}, {"transformers_version": "4.57.3"},
    {"transformers_version": "4.57.2"}, {"transformers_version": "4.40.0", "model_type": "mistral"},
    {"transformers_version": "5.0.0", "model_type": "qwen3_asr"}, {"transformers_version": "5.0.0rc1"},
    {"transformers_version": "4.57.2.dev0", "model_type": "qwen3_asr"}, {"transformers_version": "4.57.6"},
    {"transformers_version": "4.57.2.post1", "model_type": "qwen3_asr"}, {"transformers_version": "4.57.2r1"},
    None])
def test_official_split_rule_equals_transformers(tmp_path, config):
    """``prompt.official_split`` against transformers' own ``_patch_mistral_regex`` on a stand-in tokenizer."""
    from tokenizers import Regex, pre_tokenizers
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    if config is not None:
        (tmp_path / "config.json").write_text(json.dumps(config))
    backend = type("Backend", (), {})()
    backend.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("x"), behavior="isolated")])
    tok = type("Tok", (), {"backend_tokenizer": backend})()
    PreTrainedTokenizerBase._patch_mistral_regex(tok, str(tmp_path), _is_local=True, init_kwargs={},
                                                 fix_mistral_regex=True)
    patched = "Regex(\"x\")" not in repr(backend.pre_tokenizer[0])
    assert (prompt.official_split(tmp_path, 151643) is not None) == patched
    assert prompt.official_split(tmp_path, 100000) is None


def test_synthetic_root_prompt_matches_official(tmp_path, official):
    """The project's synthetic Qwen3-ASR tokenizer files (``synthetic_asr``) too."""
    from rkspeech.models.qwen3_asr import synthetic_asr

    synthetic_asr.write_asr_tokenizer(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(synthetic_asr.official_config_json("reduced")))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(synthetic_asr.PREPROCESSOR_CONFIG))
    builder, ref = prompt.PromptBuilder(tmp_path), Official(official, tmp_path)
    wave = signal("noise", 2.0)
    for context, language in (("", None), (CONTEXTS[1], "English"), (CONTEXTS[2], None)):
        assert builder.build(26, context, language).ids.tolist() == ref.ids(wave, context, language)


def test_prompt_refusals(roots, tmp_path):
    builder = roots["4.57.1"][2]
    with pytest.raises(RkspeechError, match="audio's place holder"):
        builder.build(13, "a <|audio_pad|> b")
    with pytest.raises(RkspeechError, match="too short"):
        builder.build(0)
    root = roots["4.57.1"][0]
    other = tmp_path / "other"
    other.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json", "config.json"):
        (other / name).write_bytes((root / name).read_bytes())
    with pytest.raises(RkspeechError, match="no chat template"):
        prompt.PromptBuilder(other)
    (other / "chat_template.jinja").write_text("{{ messages[0].content }}")
    with pytest.raises(RkspeechError, match="not Qwen3-ASR's"):
        prompt.PromptBuilder(other)


# -- decoding and parsing -------------------------------------------------------------------------

@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_decode_matches_batch_decode(roots, data):
    """Random ids: BPE pieces (byte pieces that split a character too), placeholders, every added token."""
    _, ref, builder = roots["4.57.6"]
    token = st.one_of(st.integers(0, 899), st.integers(900, 151642), st.integers(151643, 151704))
    ids = data.draw(st.lists(token, max_size=40))
    assert transcript_text.decode_text(builder.tokenizer, ids) == ref.decode(ids)


def test_decode_keeps_asr_text_and_drops_specials(roots):
    _, ref, builder = roots["4.57.6"]
    ids = builder.tokenizer.encode("language English<asr_text>McDonald's 你好<|im_end|><|endoftext|>")
    text = transcript_text.decode_text(builder.tokenizer, ids)
    assert text == ref.decode(ids) == "language English<asr_text>McDonald's 你好"


PIECES = ["a", "b", "ab", "abc", "你", "好", " ", "\n", "\r\n", "\u2028", "language ", "Language ", "LANGUAGE ",
          "English", "chinese", "none", "None", "<asr_text>", "language None", "language none<asr_text>", "x" * 19,
          "é", "İ", "ß"]


@st.composite
def transcripts(draw):
    """Strings of pieces, some repeated 15 to 45 times in a row (around the threshold of 20)."""
    parts = []
    for _ in range(draw(st.integers(0, 8))):
        piece = draw(st.one_of(st.sampled_from(PIECES), st.text(max_size=6)))
        times = draw(st.one_of(st.just(1), st.sampled_from([19, 20, 21]), st.integers(15, 45)))
        parts.append(piece * times)
    return "".join(parts)


@HYPOTHESIS
@given(transcripts())
def test_fix_repetitions_matches_official(official, text):
    assert transcript_text.fix_repetitions(text) == official[0].detect_and_fix_repetitions(text)


@HYPOTHESIS
@given(transcripts(), st.sampled_from([None, "", "English", "Chinese"]))
def test_parse_output_matches_official(official, raw, forced):
    assert transcript_text.parse_output(raw, forced) == official[0].parse_asr_output(raw, user_language=forced)


@pytest.mark.parametrize("raw", [None, "", "   ", "language English<asr_text> Hello. ", "language None<asr_text>",
                                 "language none<asr_text>  x ", "\n language   german \nmore\n<asr_text>Hallo",
                                 "no tag at all", "lang\nlanguage \n<asr_text>t", "a" * 25 + "<asr_text>" + "ab" * 30])
def test_parse_output_cases(official, raw):
    for forced in (None, "English"):
        assert transcript_text.parse_output(raw, forced) == official[0].parse_asr_output(raw, user_language=forced)


@pytest.mark.parametrize("text", [
    "ab" * 20, "ab" * 19 + ".", "0123456789abcdefghij" + "a" * 20,  # a run of exactly 20 in the last 40: kept
    "0123456789abcdefghi" + "a" * 20 + "!", "x" + "a" * 20 + "y" * 30, "a" * 21, "你好" * 25 + "。", "abc" * 7])
def test_fix_repetitions_cases(official, text):
    assert transcript_text.fix_repetitions(text) == official[0].detect_and_fix_repetitions(text)


@HYPOTHESIS
@given(st.lists(st.one_of(st.none(), st.sampled_from(["", " ", "Chinese", "English", " English ", "German"]))))
def test_merge_languages_matches_official(official, langs):
    assert transcript_text.merge_languages(langs) == official[0].merge_languages(langs)


# -- languages ------------------------------------------------------------------------------------

def test_languages_are_the_official_list(official):
    utils = official[0]
    assert list(languages.LANGUAGES) == utils.SUPPORTED_LANGUAGES
    for name in utils.SUPPORTED_LANGUAGES:
        for spelling in (name, name.lower(), name.upper(), f"  {name.swapcase()} "):
            canonical = utils.normalize_language_name(spelling)
            utils.validate_language(canonical)
            assert languages.normalize_language(spelling) == canonical


@pytest.mark.parametrize("code,name", [
    ("en", "English"), ("EN-us", "English"), ("zh", "Chinese"), ("zh-CN", "Chinese"), ("zh_Hans", "Chinese"),
    ("zh-TW", "Chinese"), ("zh-HK", "Cantonese"), ("zh-Hant-HK", "Cantonese"), ("yue", "Cantonese"),
    ("de", "German"), ("deu", "German"), ("pt-BR", "Portuguese"), ("fil", "Filipino"), ("tl", "Filipino"),
    ("fa", "Persian"), ("el", "Greek"), ("mk", "Macedonian"), ("ms", "Malay"), ("ja", "Japanese"),
    ("ko", "Korean"), ("cs", "Czech"), ("he", None), ("klingon", None), ("english-ish", None)])
def test_iso_codes(code, name):
    if name is None:
        with pytest.raises(RkspeechError) as err:
            languages.normalize_language(code)
        message = str(err.value)
        assert "\n" not in message and f"unsupported language {code!r}" in message and "Macedonian" in message
    else:
        assert languages.normalize_language(code) == name


def test_every_language_has_a_code_and_blank_means_detect():
    assert set(languages.ISO_CODES.values()) == set(languages.LANGUAGES)
    assert languages.normalize_language(None) is None and languages.normalize_language("  ") is None


# -- long audio -----------------------------------------------------------------------------------

def long_recording(seconds: float, gaps: list[float]) -> np.ndarray:
    """Noise (1 s tiled: equal windows tie, so the first one must win in both) with 300 ms of
    near-silence at each of ``gaps`` (seconds)."""
    tile = (0.05 * np.random.default_rng(3).standard_normal(SR)).astype(np.float32)
    wave = np.tile(tile, int(np.ceil(seconds)))[:int(seconds * SR)]
    for at in gaps:
        i = int(at * SR)
        wave[i:i + SR * 3 // 10] *= 1e-3
    return wave


def _cuts(chunks) -> list[tuple[int, float]]:
    return [(len(c), off) for c, off in chunks]


@pytest.mark.parametrize("seconds,gaps", [
    (2500.0, [1197.25, 2399.0]),   # a gap within +-5 s of each cut (the second: 1200 s after the first)
    (2500.0, [1190.0, 2410.0]),    # outside the window: the quietest noise window, ties to the first
    (2400.2, [1199.9, 2399.8]),    # the tail is shorter than 0.5 s: padded
])
def test_split_long_audio_matches_official(official, seconds, gaps):
    wave = long_recording(seconds, gaps)
    ref = official[0].split_audio_into_chunks(wave, sr=SR, max_chunk_sec=1200)
    ours = long_audio.split_long_audio(wave)
    assert _cuts(ours) == _cuts(ref) and len(ours) >= 2
    for (a, _), (b, _) in zip(ours, ref):
        assert a.dtype == np.float32 and np.array_equal(a, b)
    if seconds == 2400.2:
        assert len(ours) == 3 and len(ours[-1][0]) == SR // 2


def test_split_long_audio_short_and_stereo(official):
    utils = official[0]
    short = signal("noise", 0.2)
    assert _cuts(long_audio.split_long_audio(short)) == _cuts(utils.split_audio_into_chunks(short, SR, 1200)) == [
        (3200, 0.0)]
    stereo = np.stack([long_recording(25.0, [9.0]), signal("noise", 25.0)], axis=-1)
    ours, ref = long_audio.split_long_audio(stereo, max_seconds=10), utils.split_audio_into_chunks(stereo, SR, 10)
    assert _cuts(ours) == _cuts(ref) and all(np.array_equal(a, b) for (a, _), (b, _) in zip(ours, ref))


# -- torch-free ----------------------------------------------------------------------------------

def test_host_pieces_run_without_torch(roots):
    """Imported and run in a fresh interpreter: no torch, transformers, librosa or jinja2 loaded."""
    code = """
import sys
import numpy as np
from rkspeech.models.qwen3_asr import features, geometry, languages, long_audio, prompt, transcript_text
wave = (0.1 * np.random.default_rng(0).standard_normal(16000 * 3)).astype(np.float32)
mel = features.log_mel(wave)
builder = prompt.PromptBuilder(sys.argv[1])
p = builder.build(geometry.encoder_tokens(mel.shape[1]), "context", languages.normalize_language("en"))
text = transcript_text.decode_text(builder.tokenizer, p.ids[-6:].tolist())
lang, _ = transcript_text.parse_output(text, None)
assert lang == "English" and len(long_audio.split_long_audio(wave, max_seconds=1)) == 3
heavy = [m for m in ("torch", "transformers", "librosa", "jinja2") if m in sys.modules]
assert not heavy, heavy
"""
    subprocess.run([sys.executable, "-c", code, str(roots["4.57.6"][0])], check=True)
