"""The confident checkpoint (``models.qwen3_tts.trained``): training inputs are the generation
loop's, the trained root loads and stops by itself, its margins are far wider than a random root's.

The trained root is written once per session with ``TEST_OPTIONS`` (a short training; the CLI's
default trains longer) and cached in pytest's cache folder under a key of (config, variant, seed,
options), so a second run reuses it; from scratch it trains in well under a minute here.
"""

from __future__ import annotations

import numpy as np
import pytest

from rkfixtures import TRAINED_TEST_STEPS
from rkspeech.models.qwen3_tts.trained import TrainOptions

TEST_OPTIONS = TrainOptions(steps=TRAINED_TEST_STEPS)
HELD_OUT = ("The quick brown fox jumps over the lazy dog.", "Good morning, she said.",
            "A warm voice reads the numbers aloud.", "It is a bright, cold day in April.")
REQUEST = {"speaker": "vivian", "language": "english"}


@pytest.fixture(scope="module")
def trained(trained_tts_ckpt):
    """``(TTSModel of the trained root, training record)`` (conftest's ``trained_tts_ckpt``)."""
    from rkspeech.models.qwen3_tts.generate import TTSModel

    root, record = trained_tts_ckpt
    return TTSModel.load(root), record


def _cache_base(request):
    """pytest's cache folder for this file (the CLI's ``$RKSPEECH_CACHE`` in the CLI test)."""
    return request.config.cache.mkdir("rkspeech") if getattr(request.config, "cache", None) else None


@pytest.fixture(scope="module")
def rule(tts):
    from rkspeech.models.qwen3_tts.trained import rule_for

    return rule_for(tts, TEST_OPTIONS.seed)


def test_rule_is_fixed_and_injective(tts, rule):
    from rkspeech.models.qwen3_tts.trained import CodeRule, rule_for

    assert len(set(rule.table.tolist())) == rule.table.size == tts.cfg.talker.text_vocab_size
    assert rule.table.max() < 2048 and all(sorted(p) == list(range(2048)) for p in rule.perm.tolist())
    again = rule_for(tts, TEST_OPTIONS.seed)
    assert np.array_equal(again.table, rule.table) and np.array_equal(again.perm, rule.perm)
    assert not np.array_equal(CodeRule(512, 16, 1).table, CodeRule(512, 16, 0).table)
    codes = rule.codes([5, 7, 5])
    assert codes.shape == (3, 16) and np.array_equal(codes[0], codes[2])
    assert codes[1, 3] == rule.perm[3][codes[1, 2]]


@pytest.mark.parametrize("pad", [0, 4])
def test_batched_stack_equals_the_decoder_stack(tts, pad):
    import torch

    from rkspeech.models.qwen3_tts.trained import stack_forward

    torch.manual_seed(0)
    for stack, width in ((tts.net.talker.model, 64), (tts.net.talker.code_predictor.model, 48)):
        x = torch.randn(1, 13, width)
        with torch.no_grad():
            ref = stack(x, stack.new_cache(13))
            got = stack_forward(stack, torch.cat((torch.cat((x, torch.randn(1, pad, width)), 1),
                                                  torch.randn(1, 13 + pad, width))))[:1, :13]
        assert torch.allclose(got, ref, atol=1e-5), float((got - ref).abs().max())


@pytest.mark.parametrize("text_in_prompt", [None, False])
def test_training_inputs_are_what_generation_feeds(tts, text_in_prompt):
    """Greedy generation on the random root, its talker inputs recorded, then the training sequence
    built from the same codes: equal position by position (prompt and every frame's input), and the
    code predictor's training inputs equal its recorded inputs."""
    import torch

    from rkspeech.accuracy.quantized_stage import record_greedy_reference
    from rkspeech.models.qwen3_tts.trained import predictor_sequence, talker_sequence

    text = HELD_OUT[1]
    run, = record_greedy_reference(tts, talker=tts.talker_backend, code_predictor=tts.code_predictor_backend,
                                   texts=(text,), frames=6, request=REQUEST, text_in_prompt=text_in_prompt)
    fed = np.concatenate([e for e, _ in run.talker_calls])
    with torch.no_grad():
        x, first = talker_sequence(tts, text, run.frames, REQUEST, text_in_prompt=text_in_prompt is not False)
    x = x[0].numpy()
    assert len(run.frames) == 6 and x.shape == fed.shape and first == run.talker_calls[0][0].shape[0] - 1
    assert np.allclose(x, fed, atol=1e-6)
    hidden = torch.from_numpy(np.stack([h for _, h in run.talker_calls[:len(run.frames)]]))
    with torch.no_grad():
        cp_in = predictor_sequence(tts, hidden, run.frames)
        proj = tts.net.talker.code_predictor.small_to_mtp_projection
        for f, (h, first_embed) in enumerate(run.cp_inputs):
            ref = proj(torch.from_numpy(np.stack([h, first_embed])))
            assert torch.allclose(cp_in[f, :2], ref, atol=1e-6)


def _stops(tts, rule, texts, text_in_prompt=None):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.models.qwen3_tts.trained import expected_codes

    rows = []
    for text in texts:
        want = expected_codes(tts, rule, text)
        got = tts.generate_codes(text, options=GenerationOptions.greedy(max_new_tokens=len(want) + 20,
                                                                        text_in_prompt=text_in_prompt), **REQUEST)
        n = min(len(want), len(got))
        rows.append((len(want), len(got), float(np.mean(got[:n] == want[:n])) if n else 0.0))
    return rows


def test_trained_root_stops_by_itself_within_the_expected_length(trained, rule):
    tts, _ = trained
    rows = _stops(tts, rule, HELD_OUT, text_in_prompt=False)
    for want, got, same in rows:
        assert abs(got - want) <= 2, rows
    assert np.mean([same for *_, same in rows]) >= 0.8, rows


def test_margins_far_wider_than_the_random_roots(trained, tts):
    from rkspeech.accuracy.margins import checkpoint_margins

    kw = {"requests": [REQUEST], "frames": 14, "text_in_prompt": False}
    wide = checkpoint_margins(trained[0], HELD_OUT, **kw)
    flat = checkpoint_margins(tts, HELD_OUT, **kw)
    for stage in ("talker", "code_predictor"):
        assert wide[stage]["n"] >= 30 and flat[stage]["n"] >= 30
        assert wide[stage]["median"] > 10 * flat[stage]["median"], (stage, wide[stage], flat[stage])
    assert all(t["stop_frame"] is not None for t in wide["texts"]), wide["texts"]


def test_trained_root_has_the_random_roots_files_and_keys(trained, tts_custom_ckpt):
    from safetensors import safe_open

    root = trained[0].files.root
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == \
        sorted(p.relative_to(tts_custom_ckpt).as_posix() for p in tts_custom_ckpt.rglob("*"))
    with safe_open(str(root / "model.safetensors"), "pt") as a, \
            safe_open(str(tts_custom_ckpt / "model.safetensors"), "pt") as b:
        assert sorted(a.keys()) == sorted(b.keys())
        assert all(a.get_slice(k).get_shape() == b.get_slice(k).get_shape() for k in a.keys())  # noqa: SIM118
        assert "rkspeech_trained" in a.metadata()
    import json

    from rkspeech.models.qwen3_tts.tts_config import PROMPT_FORM_KEY

    raw = json.loads((root / "config.json").read_text())
    # the same config, plus the prompt form the checkpoint was trained in (read by TTSConfig)
    assert raw.pop(PROMPT_FORM_KEY) == "streaming" and trained[0].cfg.prompt_form == "streaming"
    assert raw == json.loads((tts_custom_ckpt / "config.json").read_text())


def test_generation_defaults_to_the_recorded_prompt_form(trained, rule):
    """``text_in_prompt`` None (what speak and serve pass) takes the checkpoint's recorded form:
    the trained root stops by itself as with ``text_in_prompt=False`` given explicitly."""
    tts, _ = trained
    assert _stops(tts, rule, HELD_OUT[:2]) == _stops(tts, rule, HELD_OUT[:2], text_in_prompt=False)
    assert tts.cfg.default_text_in_prompt is False


def test_cli_refuses_what_it_cannot_train(tmp_path, capsys):
    from rkspeech.cli import main

    rc = main(["synth-checkpoint", "qwen3-tts", "--config", "published", "--trained", "--out-dir", str(tmp_path / "x")])
    assert rc == 2 and "--config reduced" in capsys.readouterr().err
    assert not (tmp_path / "x" / "config.json").exists()


def test_official_loader_generates_our_codes_and_stops_with_them(trained, tmp_path):
    """qwen-tts' own ``Qwen3TTSModel.from_pretrained`` on the trained root (a child interpreter, as in
    ``test_synthetic_official_load``): every tensor from the files, and ``generate_custom_voice``
    in the streaming form stops by itself, its audio our greedy codes decoded."""
    import json
    import subprocess
    import sys

    import torch
    from test_synthetic_official_load import SCRIPT

    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.core.compare import snr_db

    tts, _ = trained
    text, limit = HELD_OUT[0], 40
    call = "do_sample=False, subtalker_dosample=False,\n    max_new_tokens=max_new_tokens)"
    assert call in SCRIPT
    script = SCRIPT.replace(call, call[:-1] + ", non_streaming_mode=False)")
    proc = subprocess.run([sys.executable, "-c", script, str(tts.files.root), str(tmp_path), str(limit), text],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "report.json").read_text())
    w = report["tts_weights"]
    assert w["tensors"] > 0 and w["not_in_file"] == w["different"] == w["unused"] == []
    codes = tts.generate_codes(text, options=GenerationOptions.greedy(max_new_tokens=limit, text_in_prompt=False),
                               **REQUEST)
    assert 0 < len(codes) < limit - 1  # stopped by itself
    vocoder, _, _ = load_vocoder(tts.files.root)
    with torch.no_grad():
        ours = vocoder(torch.from_numpy(np.ascontiguousarray(codes.T[None]))).reshape(-1).numpy()
    official = np.load(tmp_path / "generated.npy")
    assert official.shape == ours.shape and snr_db(official, ours) >= 100.0


def test_cli_writes_the_trained_root_from_a_folder_of_its_own(trained, request, tmp_path, monkeypatch, capsys):
    """``synth-checkpoint qwen3-tts --trained`` run as a user runs it (relative --out); the
    training recipe swapped for the session's short one, so the CLI finds the fixture's weights
    in the cache (``$RKSPEECH_CACHE``) instead of training for a minute."""
    from rkfixtures import run_relative

    from rkspeech.models.qwen3_tts import trained as trained_module

    base = _cache_base(request)
    if base is None:
        pytest.skip("pytest's cache is off")
    monkeypatch.setenv("RKSPEECH_CACHE", str(base))
    monkeypatch.setattr(trained_module, "TrainOptions", lambda seed: TEST_OPTIONS)
    rc, err, new = run_relative(tmp_path, ["synth-checkpoint", "qwen3-tts", "--config", "reduced", "--trained",
                                           "--out-dir", "root"], capsys)
    assert rc == 0, err
    assert "from the cache" in err and {"root/config.json", "root/model.safetensors"} <= new
    assert all(p.startswith("root/") for p in new)
    assert (tmp_path / "root" / "model.safetensors").read_bytes() == \
        (trained[0].files.root / "model.safetensors").read_bytes()
