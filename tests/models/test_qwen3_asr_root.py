"""Synthetic Qwen3-ASR roots (``synthetic_asr``) are in the published format: the official package
(qwen-asr 0.0.6, ``tests/asr_reference.py``) loads one as it is and transcribes with it; its
config.json is what the official config classes write; its bytes depend on the seed only; and a
root that is not one is refused in one line (``asr_checkpoint``)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

from asr_reference import official_asr, qwen_asr
from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_asr import synthetic_asr
from rkspeech.models.qwen3_asr.asr_checkpoint import read_asr_config, resolve_asr_root, tensor_shapes
from rkspeech.models.qwen3_asr.asr_config import ASRConfig

SR = 16000


def _sounds(seconds: float = 2.0) -> dict[str, np.ndarray]:
    t = np.arange(int(seconds * SR)) / SR
    noise = np.random.default_rng(0).standard_normal(t.size)
    return {"sine": 0.3 * np.sin(2 * np.pi * 440 * t), "chirp": 0.3 * np.sin(2 * np.pi * (200 + 600 * t) * t),
            "noise": 0.1 * noise, "am": 0.3 * np.sin(2 * np.pi * 300 * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))}


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return synthetic_asr.write_asr_checkpoint(tmp_path_factory.mktemp("asr") / "reduced", "reduced", seed=0)


@pytest.fixture(scope="module")
def official(root):
    torch.set_num_threads(min(2, os.cpu_count() or 1))
    return official_asr(root, max_new_tokens=8)


def test_official_package_loads_every_tensor_and_transcribes(root, official):
    from safetensors.torch import load_file

    stored = load_file(str(root / "model.safetensors"))
    state = official.model.state_dict()
    assert sorted(state) == sorted(stored) == sorted(tensor_shapes(read_asr_config(root)))
    assert all(torch.equal(state[k], stored[k].float()) for k in stored)  # bf16 in the file, fp32 loaded
    assert state["thinker.lm_head.weight"].data_ptr() == state["thinker.model.embed_tokens.weight"].data_ptr()

    tok = official.processor.tokenizer
    assert (tok.audio_token, tok.audio_bos_token, tok.audio_eos_token) == \
        ("<|audio_pad|>", "<|audio_start|>", "<|audio_end|>")
    prompt = official._build_text_prompt(context="", force_language=None)
    assert prompt == ("<|im_start|>system\n<|im_end|>\n<|im_start|>user\n<|audio_start|><|audio_pad|><|audio_end|>"
                      "<|im_end|>\n<|im_start|>assistant\n")
    ids = tok(prompt)["input_ids"]
    assert tok.decode(ids) == prompt
    assert [i for i in ids if i >= synthetic_asr.FIRST_SPECIAL] == [151644, 151645, 151644, 151669, 151676, 151670,
                                                                     151645, 151644]

    sounds = _sounds()
    texts = {name: official.transcribe(audio=(wave.astype(np.float32), SR))[0] for name, wave in
             (("sine", sounds["sine"]), ("noise", sounds["noise"]))}
    for result in texts.values():
        assert isinstance(result.text, str) and result.text.strip()
        assert set(result.text) <= set("abcdefghijklmnopqrstuvwxyz ")  # placeholder words: " zabo kitumo"
    assert texts["sine"].text != texts["noise"].text  # the audio reaches the transcript


def test_every_id_below_the_specials_decodes_to_text_in_both_tokenizers(root, official):
    from tokenizers import decoders
    from tokenizers.models import BPE

    from rkspeech.models.qwen3_tts.text_tokenizer import TextTokenizer

    ids = [0, 255, 493, 494, 8000, 100000, 151642]
    hf = [official.processor.tokenizer.decode([i]) for i in ids]
    ours = TextTokenizer(root)._tok
    assert isinstance(ours.decoder, decoders.ByteLevel) and isinstance(ours.model, BPE)
    assert [ours.decode([i]) for i in ids] == hf
    assert all(text and "<" not in text for text in hf[2:])
    vocab = json.loads((root / "vocab.json").read_text())
    assert len(vocab) == synthetic_asr.FIRST_SPECIAL and sorted(vocab.values()) == list(range(len(vocab)))
    # specials: skipped by skip_special_tokens=True except the transcript marker the parser splits on
    tok = official.processor.tokenizer
    assert tok.decode([151645, 151676, 151704, 151643], skip_special_tokens=True) == "<asr_text>"


def test_greedy_logits_have_clear_winners(root, official):
    """32 greedy tokens on four 2 s sounds: the logits spread (std ~ LOGIT_STD), the top-1 beats the
    top-2 by far more than float32 rounding (min gap measured 0.0138), and the tokens vary."""
    model, processor = official.model, official.processor
    prompt = official._build_text_prompt(context="", force_language=None)
    gaps, spreads, distinct = [], [], []
    for wave in _sounds().values():
        inputs = processor(text=[prompt], audio=[wave.astype(np.float32)], return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=32, output_logits=True)
        logits = torch.stack(out.logits)[:, 0].float()
        top = logits.topk(2, dim=-1).values
        gaps.append(float((top[:, 0] - top[:, 1]).min()))
        spreads.append(float(logits.std(dim=-1).mean()))
        distinct.append(len(set(out.sequences[0, inputs["input_ids"].shape[1]:].tolist())))
    assert min(gaps) > 1e-3, gaps
    assert all(0.8 * synthetic_asr.LOGIT_STD < s < 1.25 * synthetic_asr.LOGIT_STD for s in spreads), spreads
    assert min(distinct) >= 8, distinct


def test_same_seed_same_bytes(root, tmp_path):
    again = synthetic_asr.write_asr_checkpoint(tmp_path / "again", "reduced", seed=0)
    other = synthetic_asr.write_asr_checkpoint(tmp_path / "other", "reduced", seed=1)
    names = sorted(os.listdir(root))
    assert names == sorted(os.listdir(again)) == sorted(os.listdir(other))
    assert all((root / n).read_bytes() == (again / n).read_bytes() for n in names)
    assert [n for n in names if (root / n).read_bytes() != (other / n).read_bytes()] == ["model.safetensors"]


def test_sharded_root_as_the_17b_loads_the_same_tensors(root, official, tmp_path, monkeypatch):
    """The published 1.7B's layout (shards + model.safetensors.index.json), at the reduced size."""
    monkeypatch.setitem(synthetic_asr.REDUCED, "sharded", True)
    monkeypatch.setattr(synthetic_asr, "MAX_SHARD_BYTES", 50_000_000)
    sharded = synthetic_asr.write_asr_checkpoint(tmp_path / "sharded", "reduced", seed=0)
    files = resolve_asr_root(sharded)
    assert [p.name for p in files.weights] == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    assert not (sharded / "model.safetensors").exists()
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == sorted(tensor_shapes(read_asr_config(files)))
    other = official_asr(sharded, max_new_tokens=8)
    state = other.model.state_dict()
    assert all(torch.equal(state[k], v) for k, v in official.model.state_dict().items())


def _copy_root(src, dst, **config_changes):
    dst.mkdir()
    for name in os.listdir(src):
        os.link(src / name, dst / name)
    if config_changes:
        raw = json.loads((src / "config.json").read_text())
        raw.update(config_changes)
        (dst / "config.json").unlink()
        (dst / "config.json").write_text(json.dumps(raw))
    return dst


def _one_line(call, *words):
    with pytest.raises(RkspeechError) as err:
        call()
    text = str(err.value)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def test_bad_roots_are_refused_in_one_line(root, tmp_path):
    no_config = _copy_root(root, tmp_path / "no_config")
    (no_config / "config.json").unlink()
    _one_line(lambda: read_asr_config(no_config), "config.json is missing", "Qwen3-ASR")
    tts = _copy_root(root, tmp_path / "tts", model_type="qwen3_tts")
    _one_line(lambda: read_asr_config(tts), "model_type 'qwen3_tts'", "not a Qwen3-ASR root")
    (tts / "preprocessor_config.json").unlink()  # as a real text-to-speech root: its model type is named first
    _one_line(lambda: resolve_asr_root(tts), "model_type 'qwen3_tts'", "not a Qwen3-ASR root")
    _one_line(lambda: read_asr_config(tmp_path / "absent"), "does not exist")
    no_pre = _copy_root(root, tmp_path / "no_pre")
    (no_pre / "preprocessor_config.json").unlink()
    _one_line(lambda: resolve_asr_root(no_pre), "preprocessor_config.json is missing")
    no_vocab = _copy_root(root, tmp_path / "no_vocab")
    (no_vocab / "merges.txt").unlink()
    _one_line(lambda: resolve_asr_root(no_vocab), "merges.txt")
    no_weights = _copy_root(root, tmp_path / "no_weights")
    (no_weights / "model.safetensors").unlink()
    _one_line(lambda: resolve_asr_root(no_weights), "model.safetensors")
    (no_weights / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "model-1.safetensors"}}))
    _one_line(lambda: resolve_asr_root(no_weights), "model-1.safetensors", "missing")
    raw = synthetic_asr.official_config_json("reduced")
    raw["thinker_config"]["text_config"]["num_key_value_heads"] = 3
    _one_line(lambda: ASRConfig.from_dict(raw), "num_attention_heads (4)", "num_key_value_heads (3)")
    raw = synthetic_asr.official_config_json("reduced")
    raw["thinker_config"]["audio_config"]["encoder_attention_heads"] = 3
    _one_line(lambda: ASRConfig.from_dict(raw), "d_model (128)", "encoder_attention_heads (3)")


def _keys(d):
    return {k: _keys(v) if isinstance(v, dict) and k not in ("id2label", "label2id") else None for k, v in d.items()}


@pytest.mark.parametrize("config, audio, text", [
    ("published", (896, 18, 14, 3584, 1024), (1024, 28, 16, 8, 128, 3072)),
    ("published-1.7b", (1024, 24, 16, 4096, 2048), (2048, 28, 16, 8, 128, 6144)),
    ("reduced", (128, 2, 4, 256, 128), (128, 2, 4, 2, 32, 256)),
])
def test_config_json_is_what_the_official_classes_read_and_write(config, audio, text):
    qwen_asr()
    from qwen_asr.core.transformers_backend import Qwen3ASRConfig, Qwen3ASRForConditionalGeneration

    raw = synthetic_asr.official_config_json(config)
    official = Qwen3ASRConfig(**raw)
    a, t = official.thinker_config.audio_config, official.thinker_config.text_config
    assert (a.d_model, a.encoder_layers, a.encoder_attention_heads, a.encoder_ffn_dim, a.output_dim) == audio
    assert (t.hidden_size, t.num_hidden_layers, t.num_attention_heads, t.num_key_value_heads, t.head_dim,
            t.intermediate_size) == text
    assert (a.num_mel_bins, a.n_window, a.n_window_infer, t.vocab_size, t.tie_word_embeddings) == \
        (128, 50, 800, 151936, True)
    assert official.thinker_config.audio_token_id == 151676
    # a fixed point of the official serializer (transformers' config.json writer), every key kept
    written = json.loads(official.to_json_string(use_diff=True))
    assert _keys(written) == _keys(raw)
    written.pop("transformers_version"), raw.pop("transformers_version")
    assert written == raw
    # the official model's tensors (built on the meta device: no memory) are the ones we write
    ours = ASRConfig.from_dict(raw)
    with torch.device("meta"):
        model = Qwen3ASRForConditionalGeneration(official)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == tensor_shapes(ours)
