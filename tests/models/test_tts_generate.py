"""Our Qwen3-TTS talker + code predictor + speaker encoder against qwen-tts 0.1.1 (greedy codes identical).

Reduced synthetic model roots (``synthetic_tts.write_tts_checkpoint``), one per variant; the official
model is loaded from the same folder with qwen-tts' own ``from_pretrained`` (tests/official_reference.py).
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from official_reference import load_official_tts, official_codes

from rkspeech.core.errors import RkspeechError

TEXT = "Hello world. This is a test of streaming speech, one frame at a time."
FRAMES = 6


def _write(tmp_path_factory, config, variant):
    import torch

    torch.set_num_threads(1)
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    root = tmp_path_factory.mktemp(f"tts_{config}_{variant}")
    write_tts_checkpoint(root, config, variant, seed=3)
    return root


@pytest.fixture(scope="module", params=["reduced", "reduced-1.7b"])
def config(request):
    """Every check on the 0.6B's structure and on the 1.7B's (square text projection, x-vector as
    wide as the talker, size 1b7: CustomVoice takes an instruct), both reduced."""
    return request.param


@pytest.fixture(scope="module")
def custom_root(tmp_path_factory, config):
    return _write(tmp_path_factory, config, "custom-voice")


@pytest.fixture(scope="module")
def design_root(tmp_path_factory, config):
    return _write(tmp_path_factory, config, "voice-design")


@pytest.fixture(scope="module")
def base_root(tmp_path_factory, config):
    return _write(tmp_path_factory, config, "base")


def _ours(root):
    from rkspeech.models.qwen3_tts.generate import TTSModel

    return TTSModel.load(root)


def _greedy(**kw):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    return GenerationOptions.greedy(max_new_tokens=FRAMES + 1, **kw)


@pytest.fixture(scope="module")
def custom(custom_root):
    return _ours(custom_root), *load_official_tts(custom_root)


@pytest.fixture(scope="module")
def base(base_root):
    return _ours(base_root), *load_official_tts(base_root)


def test_text_tokenizer_matches_transformers(custom):
    ours, _, tok = custom
    for s in ["<|im_start|>assistant\nHello, world!<|im_end|>\n<|im_start|>assistant\n",
              "Numbers 1234 and café — naïve\ttabs\n\nnew lines", "<|im_start|>user\nA warm voice.<|im_end|>\n", " "]:
        assert ours.tokenizer.encode(s) == tok(text=s)["input_ids"][0], s


@pytest.mark.parametrize("speaker,language,text_in_prompt", [
    ("ryan", "english", True),     # qwen-tts' custom-voice default (non_streaming_mode=True)
    ("serena", "auto", False),     # text fed one token per frame
    ("eric", "chinese", True),     # dialect speaker: the language id becomes sichuan_dialect
])
def test_custom_voice_greedy_codes_identical(custom, speaker, language, text_in_prompt):
    ours, official, tok = custom
    mine = ours.generate_codes(TEXT, speaker=speaker, language=language,
                               options=_greedy(text_in_prompt=text_in_prompt))
    ref = official_codes(official, tok, TEXT, speaker=speaker, language=language,
                         non_streaming_mode=text_in_prompt, max_new_tokens=FRAMES + 1)
    assert mine.shape == (FRAMES, 16) and mine.dtype == np.int64
    np.testing.assert_array_equal(mine, ref)


def test_custom_voice_with_instruct_identical(custom):
    """The reduced config is not '0b6', so instruct text is allowed (as for the 1.7B model)."""
    ours, official, tok = custom
    mine = ours.generate_codes(TEXT, speaker="vivian", language="english", instruct="Very happy.", options=_greedy())
    ref = official_codes(official, tok, TEXT, speaker="vivian", language="english", instruct="Very happy.",
                         non_streaming_mode=True, max_new_tokens=FRAMES + 1)
    np.testing.assert_array_equal(mine, ref)


def test_stacks_match_official_numerically(custom):
    """Tighter than code parity: the same prompt through both talker stacks and code predictors."""
    import torch

    ours, official, _ = custom
    talker = ours.net.talker
    with torch.no_grad():
        prompt, _, _ = ours.build_prompt(TEXT, speaker="ryan", language="english")
        mine = talker.model(prompt, talker.model.new_cache(prompt.shape[1]))
        ref = official.talker.model(inputs_embeds=prompt, use_cache=False).last_hidden_state
        assert float((mine - ref).abs().max()) < 1e-5
        x = torch.cat((mine[:, -1:], talker.codec([5])), dim=1)
        cp, ocp = talker.code_predictor, official.talker.code_predictor
        mine = cp.model(cp.small_to_mtp_projection(x), cp.model.new_cache(2))
        ref = ocp.model(inputs_embeds=ocp.small_to_mtp_projection(x), use_cache=False).last_hidden_state
        assert float((mine - ref).abs().max()) < 1e-5


def test_codec_eos_stops_like_official(custom):
    """eos is banned for 2 frames (min_new_tokens) and then ends generation; no frame for it."""
    import torch

    ours, official, tok = custom
    eos = ours.cfg.talker.codec_eos_token_id
    first = ours.generate_codes(TEXT, speaker="ryan", language="english", options=_greedy())
    tok2 = int(first[2, 0])
    w_ours, w_off = ours.net.talker.codec_head.weight, official.talker.codec_head.weight
    saved = (w_ours[eos].clone(), w_off[eos].clone())
    try:
        with torch.no_grad():  # eos logit = 3x the logit of the token picked at frame 2
            w_ours[eos] = 3 * w_ours[tok2]
            w_off[eos] = 3 * w_off[tok2]
        mine = ours.generate_codes(TEXT, speaker="ryan", language="english", options=_greedy())
        ref = official_codes(official, tok, TEXT, speaker="ryan", language="english", non_streaming_mode=True,
                             max_new_tokens=FRAMES + 1)
    finally:
        with torch.no_grad():
            w_ours[eos], w_off[eos] = saved
    assert mine.shape[0] == 2
    np.testing.assert_array_equal(mine, ref)


def test_frames_stream_and_sampling_is_seeded(custom):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    ours = custom[0]
    it = ours.generate_frames(TEXT, speaker="ryan", options=GenerationOptions.greedy(max_new_tokens=4))
    frame = next(it)
    import torch

    assert torch.is_grad_enabled()  # no_grad applies inside the generator only, not to the caller
    assert frame.shape == (16,) and frame.dtype == np.int64
    assert 0 <= frame.min() and frame.max() < 2048
    opts = GenerationOptions(seed=7, max_new_tokens=8, top_k=20, top_p=0.9, temperature=0.8)
    a = ours.generate_codes(TEXT, speaker="ryan", options=opts)
    b = ours.generate_codes(TEXT, speaker="ryan", options=opts)
    c = ours.generate_codes(TEXT, speaker="ryan", options=GenerationOptions(seed=8, max_new_tokens=8))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("sampling", [
    {},  # the published defaults: temperature 0.9, top-k 50, repetition penalty 1.05
    {"temperature": 0.7, "top_k": 30, "top_p": 0.8, "subtalker_temperature": 1.2, "subtalker_top_k": 0,
     "subtalker_top_p": 0.9},
])
def test_sampled_codes_identical_with_the_same_seed(custom, sampling):
    """Our seeded Generator draws in qwen-tts' order (talker token, then its 15 code-predictor draws)
    from bitwise-equal distributions: after ``torch.manual_seed(s)`` qwen-tts samples the same codes."""
    import torch

    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    ours, official, tok = custom
    mine = ours.generate_codes(TEXT, speaker="ryan", language="english",
                               options=GenerationOptions(seed=11, max_new_tokens=FRAMES + 1, **sampling))
    torch.manual_seed(11)
    ref = official_codes(official, tok, TEXT, speaker="ryan", language="english", non_streaming_mode=True,
                         max_new_tokens=FRAMES + 1, do_sample=True, subtalker_dosample=True, **sampling)
    np.testing.assert_array_equal(mine, ref)


def test_voice_design_greedy_codes_identical(design_root):
    ours = _ours(design_root)
    official, tok = load_official_tts(design_root)
    instruct = "A warm, gentle young female voice, speaking slowly."
    for language, text_in_prompt in (("english", True), ("auto", False)):
        mine = ours.generate_codes(TEXT, instruct=instruct, language=language,
                                   options=_greedy(text_in_prompt=text_in_prompt))
        ref = official_codes(official, tok, TEXT, instruct=instruct, language=language,
                             non_streaming_mode=text_in_prompt, max_new_tokens=FRAMES + 1)
        np.testing.assert_array_equal(mine, ref)


def _ref_audio(seconds=2.0):
    rng = np.random.default_rng(5)
    t = np.arange(int(24000 * seconds)) / 24000
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
            + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_voice_clone_xvector_greedy_codes_identical(base):
    import torch

    ours, official, tok = base
    audio = _ref_audio()
    mine_x = ours.speaker_embedding(audio)
    ref_x = official.extract_speaker_embedding(audio, 24000)
    assert torch.allclose(mine_x, ref_x, atol=1e-4, rtol=1e-4), float((mine_x - ref_x).abs().max())
    mine = ours.generate_codes(TEXT, ref_audio=audio, language="english", options=_greedy())
    ref = official_codes(official, tok, TEXT, ref_audio=audio, language="english", non_streaming_mode=False,
                         max_new_tokens=FRAMES + 1)
    np.testing.assert_array_equal(mine, ref)


@pytest.mark.parametrize("ref_frames,text_in_prompt", [
    (120, False),  # reference + target text shorter than codec_bos + 120 frames: padded with tts_pad
    (5, False),   # text longer than the reference frames: the rest is fed one token per frame
    (10, True),   # qwen-tts non_streaming_mode: all text over codec_pad, then the frames
])
def test_voice_clone_icl_greedy_codes_identical(base, ref_frames, text_in_prompt):
    ours, official, tok = base
    audio, ref_text = _ref_audio(), "A short reference transcript."
    ref_codes = np.random.default_rng(1).integers(0, 2048, (ref_frames, 16))
    _, trailing, _ = ours.build_prompt(TEXT, ref_audio=audio, ref_text=ref_text, ref_codes=ref_codes,
                                       language="english", text_in_prompt=text_in_prompt)
    assert (trailing.shape[1] > 1) == (ref_frames == 5)
    mine = ours.generate_codes(TEXT, ref_audio=audio, ref_text=ref_text, ref_codes=ref_codes, language="english",
                               options=_greedy(text_in_prompt=text_in_prompt))
    ref = official_codes(official, tok, TEXT, ref_audio=audio, ref_text=ref_text, ref_codes=ref_codes,
                         language="english", non_streaming_mode=text_in_prompt, max_new_tokens=FRAMES + 1)
    np.testing.assert_array_equal(mine, ref)


def test_mel_filters_match_librosa():
    librosa = pytest.importorskip("librosa")
    from rkspeech.models.qwen3_tts.speaker_encoder import slaney_mel_filters

    ours = slaney_mel_filters(24000, 1024, 128, 0, 12000)
    ref = librosa.filters.mel(sr=24000, n_fft=1024, n_mels=128, fmin=0, fmax=12000)
    np.testing.assert_allclose(ours, ref, rtol=1e-5, atol=1e-8)


# -- bad input --------------------------------------------------------------------------------------

def test_bad_requests_are_one_line_errors(custom, design_root, base_root):
    ours = custom[0]
    cases = [
        (ours, dict(text="  ", speaker="ryan"), "text is empty"),
        (ours, dict(text="Hi", speaker="nobody"), "unknown speaker 'nobody'; this checkpoint has: aiden"),
        (ours, dict(text="Hi", speaker="ryan", language="klingon"), "unknown language 'klingon'; choose one of: auto"),
        (ours, dict(text="Hi"), "needs a speaker; one of: aiden"),
        (ours, dict(text="Hi", speaker="ryan", ref_audio=_ref_audio(0.5)), "cannot clone"),
        (_ours(design_root), dict(text="Hi"), "needs an instruct text"),
        (_ours(design_root), dict(text="Hi", speaker="ryan", instruct="x"), "not --speaker"),
        (_ours(base_root), dict(text="Hi"), "needs reference audio"),
        (_ours(base_root), dict(text="Hi", speaker="ryan", ref_audio=_ref_audio(0.5)), "takes no --speaker"),
        (_ours(base_root), dict(text="Hi", ref_audio=_ref_audio(0.5), ref_text=" "), "needs the reference audio's "
                                                                                      "transcript"),
        (_ours(base_root), dict(text="Hi", ref_audio=_ref_audio(0.5), ref_text="ref", ref_codes=np.zeros((3, 8), int)),
         "ref_codes must be an integer array \\[T, 16\\]"),
    ]
    for model, kw, msg in cases:
        with pytest.raises(RkspeechError, match=msg.replace("(", r"\(")) as err:
            next(model.generate_frames(**kw))
        assert "\n" not in str(err.value)


def test_text_longer_than_context_is_refused(custom_root, tmp_path):
    from rkspeech.models.qwen3_tts.generate import TTSModel

    root = tmp_path / "m"
    shutil.copytree(custom_root, root)
    cfg = json.loads((root / "config.json").read_text())
    cfg["talker_config"]["max_position_embeddings"] = 64
    (root / "config.json").write_text(json.dumps(cfg))
    model = TTSModel.load(root)
    with pytest.raises(RkspeechError, match="too long: its prompt takes .* positions, the talker's context is 64"):
        model.generate_frames("word " * 80, speaker="ryan")


def test_loader_errors_name_the_part(custom_root, tmp_path):
    from safetensors.torch import load_file, save_file

    from rkspeech.models.qwen3_tts.generate import TTSModel

    def copy(name):
        root = tmp_path / name
        shutil.copytree(custom_root, root)
        return root

    root = copy("noweights")
    (root / "model.safetensors").unlink()
    with pytest.raises(RkspeechError, match="model.safetensors is missing"):
        TTSModel.load(root)
    root = copy("nomerges")
    (root / "merges.txt").unlink()
    with pytest.raises(RkspeechError, match="text tokenizer file.* missing: merges.txt"):
        TTSModel.load(root)
    root = copy("shape")
    state = load_file(root / "model.safetensors")
    key = "talker.model.layers.1.self_attn.k_proj.weight"
    state[key] = state[key][:-1].clone()
    save_file(state, root / "model.safetensors")
    with pytest.raises(RkspeechError, match=rf"{key} has shape \(31, 64\), config.json implies \(32, 64\)"):
        TTSModel.load(root)
    root = copy("missing")
    state = load_file(root / "model.safetensors")
    del state["talker.code_predictor.lm_head.3.weight"]
    save_file(state, root / "model.safetensors")
    with pytest.raises(RkspeechError, match="missing key talker.code_predictor.lm_head.3.weight"):
        TTSModel.load(root)
    root = copy("badconfig")
    cfg = json.loads((root / "config.json").read_text())
    cfg["talker_config"]["num_key_value_heads"] = 3
    (root / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(RkspeechError, match="num_attention_heads \\(4\\) must be a multiple of num_key_value_heads"):
        TTSModel.load(root)
    with pytest.raises(RkspeechError, match="model_type is 'qwen3_tts_tokenizer_12hz'"):
        TTSModel.load(_speech_only(custom_root, tmp_path))


def _speech_only(custom_root, tmp_path):
    """A folder whose config.json is the speech tokenizer's (a common mistake), with the other files."""
    root = tmp_path / "speechonly"
    shutil.copytree(custom_root, root)
    shutil.copy(root / "speech_tokenizer" / "config.json", root / "config.json")
    return root


def test_generation_imports_no_transformers_or_qwen_tts(custom_root):
    """The product path (load + generate) runs with transformers, qwen_tts and librosa blocked."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(f"""
        import sys, importlib.abc
        BLOCKED = ("transformers", "qwen_tts", "librosa")
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ImportError("blocked: " + name)
        sys.meta_path.insert(0, Block())
        import torch
        torch.set_num_threads(1)
        from rkspeech.models.qwen3_tts.generate import GenerationOptions, TTSModel
        m = TTSModel.load({str(custom_root)!r})
        codes = m.generate_codes("Hi there.", speaker="ryan", options=GenerationOptions.greedy(max_new_tokens=3))
        assert codes.shape == (2, 16), codes.shape
        assert not [k for k in sys.modules if k.split(".")[0] in BLOCKED]
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_synth_checkpoint_cli_parses_qwen3_tts(tmp_path, monkeypatch):
    """`rkspeech synth-checkpoint qwen3-tts ...` only parses and calls write_tts_checkpoint."""
    from rkspeech import cli
    from rkspeech.models.qwen3_tts import synthetic_tts

    calls = []
    monkeypatch.setattr(synthetic_tts, "write_tts_checkpoint", lambda *a: calls.append(a) or tmp_path)
    args = cli.build_parser().parse_args(["synth-checkpoint", "qwen3-tts", "--config", "published", "--variant",
                                          "voice-design", "--seed", "4", "--out-dir", str(tmp_path / "m")])
    assert args.func(args) == 0
    assert calls == [(str(tmp_path / "m"), "published", "voice-design", 4)]
