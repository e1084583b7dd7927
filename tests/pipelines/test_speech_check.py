"""``rkspeech speech-check qwen3-tts`` (issue 39 deliverable 4): held-out sentences spoken through
fp32 and through the plan, both transcribed by Whisper tiny.en, the CER delta judged.

* the judging path with speech that exists here: espeak-ng speaks the check's own sentences and
  stands in for both sides through the check's ``Transcriber`` (the faster-whisper path the
  command runs): the same clean speech on both sides passes with a delta of exactly 0 (greedy,
  deterministic), clean against the same speech under inaudible 40 dB white noise passes,
  clean against 5 dB noise fails far past the mark (measured delta 0.27-0.29, docs/speech-check.md);
* the command on a reduced synthetic root and a CPU-stage plan (``build qwen3-tts --talker cpu-int8
  --code-predictor cpu-int8``, the session's placeholder vocoder plan, no conversion): its fp32
  side does not speak, so it exits 3 with one line on stdout and judges nothing, stopping as soon
  as the rest cannot change that, the plan's side not even spoken; the command's judging path,
  both sides spoken through their graphs and their noise then replaced by espeak-ng's waves
  (clean for fp32, under 5 dB noise for the plan), exits 1 with the table and a FAIL line;
* usage mistakes (a missing --plan file, --sentences out of range, a missing Whisper folder) are
  one line, exit 2.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")
from speech_samples import TINY_EN, espeak  # noqa: E402 - after the importorskips

from rkspeech.accuracy.speech_judge import FAIL, PASS, judge_speech  # noqa: E402
from rkspeech.core.thresholds import SPEECH_MAX_CER_DELTA, SPEECH_MAX_REFERENCE_CER  # noqa: E402
from rkspeech.pipelines.speech_check import DEFAULT_SENTENCES, Transcriber, check_texts  # noqa: E402

RATE = 24000  # what the check transcribes: Qwen3-TTS speaks at 24 kHz


def _noisy(pcm: np.ndarray, snr_db: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    power = float(np.mean(pcm ** 2))
    return (pcm + rng.normal(0.0, np.sqrt(power / 10 ** (snr_db / 10)), pcm.shape)).astype(np.float32)


@pytest.fixture(scope="module")
def espeak_side(tmp_path_factory):
    """``(texts, clean 24 kHz waves, transcriber, clean transcripts)``: the check's default sentences."""
    from rkspeech.runtime.audio import decode_audio

    folder = tmp_path_factory.mktemp("espeak_check")
    texts = check_texts(DEFAULT_SENTENCES)
    waves = [decode_audio(espeak(t, folder / f"s{i}.wav"), sample_rate=RATE) for i, t in enumerate(texts)]
    with Transcriber(TINY_EN) as transcriber:
        yield texts, waves, transcriber, [transcriber(w, RATE) for w in waves]


def test_the_sentences_are_held_out_long_and_digit_free():
    from rkspeech.accuracy.gate import GATE_TEXTS

    texts = check_texts()
    assert texts[:DEFAULT_SENTENCES] == check_texts(DEFAULT_SENTENCES) and set(texts) <= set(GATE_TEXTS)
    assert not any(c.isdigit() for t in texts for c in t)
    assert len(texts) == sum(not any(c.isdigit() for c in t) for t in GATE_TEXTS) == 18
    assert [len(t) for t in texts] == sorted((len(t) for t in texts), reverse=True)


def test_clean_speech_on_both_sides_passes(espeak_side):
    texts, waves, transcriber, clean = espeak_side
    assert transcriber(waves[0], RATE) == clean[0]  # greedy Whisper: the same audio, the same words
    v = judge_speech(texts, clean, clean)
    assert v.status == PASS and v.delta == 0.0
    assert v.reference_cer < 0.1  # tiny.en hears espeak-ng well (measured 0.024)
    # white noise 40 dB under the speech (inaudible): the same verdict (measured delta -0.013 .. -0.008)
    v = judge_speech(texts, clean, [transcriber(_noisy(w, 40, i), RATE) for i, w in enumerate(waves)])
    assert v.status == PASS, v.message


def test_speech_under_5_db_noise_fails(espeak_side):
    texts, waves, transcriber, clean = espeak_side
    noisy = [transcriber(_noisy(w, 5, i), RATE) for i, w in enumerate(waves)]
    v = judge_speech(texts, clean, noisy)
    assert v.status == FAIL and v.delta > 4 * SPEECH_MAX_CER_DELTA, v.message  # measured 0.272
    assert v.reference_cer <= SPEECH_MAX_REFERENCE_CER  # judged: the clean side speaks


def test_silence_is_heard_as_nothing(espeak_side):
    _, _, transcriber, _ = espeak_side
    assert transcriber(np.zeros(0, np.float32), RATE) == ""


# -- the command -----------------------------------------------------------------------------------
#: a small talker: the synthetic root never stops, so each sentence runs to the capacity (the prompt
#: takes 28-46 positions), which keeps its noise short for Whisper
CAPACITY, PREFILL = 64, 16


@pytest.fixture(scope="module")
def cpu_plan(tts_custom_ckpt, placeholder_vocoder_plan, tmp_path_factory):
    """``build qwen3-tts`` of the reduced custom-voice root with int8 CPU stages (no conversion)."""
    from rkfixtures import run_relative

    home = tmp_path_factory.mktemp("speech_check_build")
    rc, _, _ = run_relative(home, ["build", "qwen3-tts", "--model-dir", os.path.relpath(tts_custom_ckpt, home),
                                   "--out-dir", "out", "--vocoder-plan", os.path.relpath(placeholder_vocoder_plan, home),
                                   "--talker", "cpu-int8", "--code-predictor", "cpu-int8", "--cpu-threads", "1",
                                   "--talker-capacity", str(CAPACITY), "--talker-prefill", str(PREFILL),
                                   "--gate", "off", "--skip-sim"])
    assert rc == 0
    return home / "out" / "plan.json"


def test_a_synthetic_root_is_not_judged_in_one_line(tts_custom_ckpt, cpu_plan, tmp_path, capsys):
    from rkspeech.cli import main

    report = tmp_path / "report.json"
    rc = main(["speech-check", "qwen3-tts", "--model-dir", str(tts_custom_ckpt), "--plan", str(cpu_plan),
               "--sentences", "3", "--max-reference-cer", "0.4", "-o", str(report)])
    out, err = capsys.readouterr()
    assert rc == 3, err[-2000:]
    assert out.count("\n") == 1 and out.startswith("rkspeech speech-check: not judged: the fp32 side does not speak")
    assert "nothing was judged" in out
    r = json.loads(report.read_text())
    assert r["verdict"]["status"] == "not-judged" and r["verdict"]["reference_cer"] > SPEECH_MAX_REFERENCE_CER
    assert r["sides"]["plan"] is None and "plan (ort)" not in err  # the plan's side never spoke
    fp32 = r["sides"]["fp32"]
    # the fp32 side ran the build's fp32 graphs (the int8 stages' sources), through the numpy loop
    assert fp32["host_loop"] == "numpy"
    assert fp32["stages"]["talker"].endswith("talker_decode_B1_cap64.onnx)"), fp32["stages"]
    assert fp32["stages"]["code_predictor"].endswith("code_predictor_step.onnx)"), fp32["stages"]
    assert all(f > 0 for f in fp32["frames"])
    assert "> 0.4 over 2 sentences" in out
    # noise on the first 2 of 3 sentences: the third cannot bring fp32's CER under the mark, so it
    # is not spoken (accuracy.speech_judge.cannot_speak), and the verdict is over the 2 heard
    assert len(r["texts"]) == 3 and len(fp32["transcripts"]) == len(r["verdict"]["sentences"]) == 2
    printed = " ".join(err.split())
    assert "speech check: fp32: after 2 of 3 sentences the rest cannot change the verdict" in printed
    assert "over 2 sentences" in out


def test_a_degraded_plan_fails_the_command(tts_custom_ckpt, cpu_plan, espeak_side, monkeypatch, capsys, tmp_path):
    """The command's judging path end to end with speech that exists here: both sides really speak
    (the fp32 graphs, then the plan's int8 graphs as speak runs them), then their noise is
    replaced by espeak-ng's wave of the sentence: clean for fp32, under 5 dB noise for the plan.
    Everything after (transcription, verdict, table, exit code) is the command's own: exit 1, the
    table and the FAIL line on stdout, the report with both sides."""
    from rkspeech.cli import main
    from rkspeech.pipelines import speech_check

    texts, waves, _, _ = espeak_side
    real = speech_check.synthesize

    def spoken(speaker, said, request):
        out = real(speaker, said, request)
        assert speaker.sample_rate == RATE and all(o["frames"] > 0 for o in out)
        plan = ".int8.onnx" in speaker.stage_names["talker"]  # the plan's side: its int8 talker
        for o, t in zip(out, said):
            o["pcm"] = _noisy(waves[texts.index(t)], 5, texts.index(t)) if plan else waves[texts.index(t)]
        return out

    monkeypatch.setattr(speech_check, "synthesize", spoken)
    report = tmp_path / "report.json"
    rc = main(["speech-check", "qwen3-tts", "--model-dir", str(tts_custom_ckpt), "--plan", str(cpu_plan),
               "--sentences", "1", "--max-cer-delta", "0.1", "-o", str(report)])
    out, err = capsys.readouterr()
    last = out.strip().splitlines()[-1]
    assert rc == 1 and last.startswith("rkspeech speech-check: FAIL: CER fp32 "), (out, err[-2000:])
    assert "(> 0.1) over 1 sentences" in last and "CER delta" in out and "cpu-int8" in out
    v = json.loads(report.read_text())["verdict"]
    assert v["status"] == "fail" and v["delta"] == pytest.approx(v["plan_cer"] - v["reference_cer"], abs=1e-3)
    plan = json.loads(report.read_text())["sides"]["plan"]
    assert plan["host_loop"] == "numpy" and ".int8.onnx" in plan["stages"]["code_predictor"], plan["stages"]


@pytest.mark.parametrize("argv,message", [
    (["--plan", "{tmp}/nope/plan.json"], "nope/plan.json"),
    (["--sentences", "19"], "--sentences must be 1-18"),
    (["--asr-model-dir", "{tmp}/no-whisper"], "no such folder (--asr-model-dir wants a CTranslate2"),
])
def test_usage_mistakes_are_one_line(tts_custom_ckpt, tmp_path, capsys, argv, message):
    from rkspeech.cli import main

    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    base = ["speech-check", "qwen3-tts", "--model-dir", str(tts_custom_ckpt)]
    if "--plan" not in argv:
        base += ["--plan", str(plan)]
    assert main(base + argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rkspeech speech-check: error: ") and message in err[0], err


def test_the_voice_is_english_and_a_base_model_is_refused():
    from types import SimpleNamespace

    from rkspeech.core.errors import RkspeechError
    from rkspeech.pipelines.speech_check import INSTRUCT, voice_request

    def model(kind, speakers=("vivian", "ryan")):
        return SimpleNamespace(cfg=SimpleNamespace(tts_model_type=kind), speakers=list(speakers),
                               languages=["chinese", "english"], variant=kind.replace("_", "-"))

    assert voice_request(model("custom_voice")) == {"speaker": "vivian", "language": "english"}
    assert voice_request(model("custom_voice"), "ryan") == {"speaker": "ryan", "language": "english"}
    with pytest.raises(RkspeechError, match="unknown speaker 'bob'; this model has vivian, ryan"):
        voice_request(model("custom_voice"), "bob")
    assert voice_request(model("voice_design")) == {"instruct": INSTRUCT, "language": "english"}
    with pytest.raises(RkspeechError, match="custom-voice or voice-design models, not base"):
        voice_request(model("base"))
