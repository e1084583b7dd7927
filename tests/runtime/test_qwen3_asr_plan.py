"""Qwen3-ASR through a built plan: encoder windows on the NPU (0 CPU ops), transcripts identical to
the official qwen-asr on the same reduced root, one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

pytestmark = pytest.mark.rknn

MAX_NEW = 12


@pytest.fixture(scope="module")
def asr_root(tmp_path_factory):
    from rkspeech.models.qwen3_asr.synthetic_asr import write_asr_checkpoint

    return write_asr_checkpoint(tmp_path_factory.mktemp("asr") / "ck", "reduced", seed=0)


@pytest.fixture(scope="module")
def fp32_plan(asr_root, tmp_path_factory):
    pytest.importorskip("rknn.api")
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    out = tmp_path_factory.mktemp("asr_plan")
    report = build_qwen3_asr(ASRBuildOptions(model_dir=str(asr_root), out_dir=str(out), decoder="cpu-fp32"))
    return Path(report["plan"]), report


def _audio(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_encoder_windows_on_the_npu(fp32_plan):
    _, report = fp32_plan
    enc = report["encoder"]
    for role in enc["export"]:
        conv = enc["sequence"]["convert"][role]
        assert conv["placement"]["cpu_ops"] == 0 and conv["placement"]["npu_ops"] > 0
        assert conv["build"]["regtask_overflow_lines"] == 0
        assert enc["simulator"][role]["finite"] and enc["simulator"][role]["snr_db"] > 35
    plan = json.loads(fp32_plan[0].read_text())
    assert plan["asr_encoder"]["placement"] == "npu" and plan["asr_decoder"]["placement"] == "cpu-fp32"


def test_transcripts_identical_to_the_official(asr_root, fp32_plan):
    """fp32 decoder, encoder graphs on onnxruntime: the official ``transcribe``'s greedy text and
    language, under 1 s (the unpadded conv case), 2 s and one full 8 s window, detected and forced."""
    from tests.asr_reference import official_asr
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    official = official_asr(asr_root)
    official.max_new_tokens = MAX_NEW
    with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
        for seconds, language in ((0.6, None), (2.0, "English"), (7.9, None)):
            wave = _audio(seconds)
            want = official.transcribe((wave, 16000), language=language)[0]
            got = asr.transcribe(wave, language=language, max_new_tokens=MAX_NEW)
            assert (got.language, got.text) == (want.language, want.text), seconds
            assert len(got.token_ids[0]) == MAX_NEW


def test_a_broken_encoder_mask_is_caught(asr_root, fp32_plan):
    """The check above fails when the short-audio conv masks are left out (all ones): 0.6 s then
    differs from the official, as the unpadded convolution is no longer reproduced."""
    from rkspeech.models.qwen3_asr.features import log_mel
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
        mel = log_mel(_audio(0.6))
        good = asr.encode(mel)
        g = asr.geometry
        win = g.windows(mel.shape[1])[0]
        x, _, _, key = g.window_inputs(mel, win, chunks=8, short=False)  # masks all ones
        m1, m2 = np.ones((8, 1, 1, 50), np.float32), np.ones((8, 1, 1, 25), np.float32)
        bad = asr.windows[8].infer({"chunks": x, "mask1": m1, "mask2": m2, "key_mask": key})["features"][:win.tokens]
        assert np.abs(good - bad).max() > 1e-4


def test_cli_from_a_folder_of_its_own(fp32_plan, tmp_path):
    """``transcribe --plan`` with relative paths, outputs written; a bad language is one line."""
    import soundfile

    plan_dir = fp32_plan[0].parent
    soundfile.write(tmp_path / "a.wav", _audio(1.5), 16000)
    (tmp_path / "p").symlink_to(plan_dir)
    cmd = [sys.executable, "-m", "rkspeech", "transcribe", "a.wav", "--plan", "p/plan.json", "--max-new-tokens", "4",
           "--out-dir", "tr"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "tr" / "a.txt").is_file() and json.loads((tmp_path / "tr" / "a.json").read_text())["text"]
    r = subprocess.run(cmd[:-2] + ["--language", "klingon"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "klingon" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()[-1]) > 0


def test_plan_refusals(tmp_path):
    from rkspeech.plan.asr import load_asr_plan

    (tmp_path / "plan.json").write_text(json.dumps({"format": "rkspeech-plan/2", "whisper_encoder": {}}))
    with pytest.raises(RkspeechError, match="no Qwen3-ASR records"):
        load_asr_plan(tmp_path / "plan.json")


def test_check_board_replays_every_graph(fp32_plan, tmp_path):
    """The encoder window's golden (recorded on the simulator) and the decoder's three graphs' (onnxruntime)
    replay within their marks: what a board runs after copying the plan folder."""
    plan = json.loads(fp32_plan[0].read_text())
    assert sorted(plan["asr_decoder"]["goldens"]) == ["decode", "head", "prefill"]
    r = subprocess.run([sys.executable, "-m", "rkspeech", "check-board", "--plan", str(fp32_plan[0]), "--backend", "ort",
                        "-o", str(tmp_path / "cb.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "cb.json").read_text())
    rows = report["graphs"]
    assert {row["graph"] for row in rows} == {"asr encoder k8", "asr decoder prefill", "asr decoder decode",
                                              "asr decoder head"}
    assert report["ok"] and all(row["ok"] for row in rows)


def test_estimate_prices_the_plan(fp32_plan):
    """``estimate --plan`` on a Qwen3-ASR plan: the encoder windows from their layer tables (ideal, and
    at the NPU board factor), the decoder's calls from their bytes; per utterance the parts add up."""
    from rkspeech.estimate.asr_time import estimate_asr_plan
    from rkspeech.estimate.assumptions import NPU_BOARD_FACTOR

    rep = estimate_asr_plan(fp32_plan[0])
    w = rep["encoder"][8]
    assert w["unit"] == "npu" and w["ideal_ms"] > 0 and w["calibrated_ms"] == pytest.approx(w["ideal_ms"] * NPU_BOARD_FACTOR)
    assert rep["per_token_ms"] == pytest.approx(rep["decoder"]["decode"]["ms"] + rep["decoder"]["head"]["ms"])
    short, long = rep["utterances"]
    assert (short["audio_s"], long["audio_s"]) == (3.0, 10.0) and long["windows"] == [8, 8]
    for u in rep["utterances"]:
        total = u["encoder_ms"]["ideal"] + u["prefill_ms"] + u["decode_ms"]
        assert u["end_of_speech_to_transcript_s"]["ideal"] == pytest.approx(total / 1e3)
        assert u["rtf"]["ideal"] < u["rtf"]["calibrated"]
    r = subprocess.run([sys.executable, "-m", "rkspeech", "estimate", "--plan", str(fp32_plan[0])],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "per utterance" in r.stdout, r.stderr[-2000:]
