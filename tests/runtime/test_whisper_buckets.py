"""Whisper window buckets: the build makes a graph per window, the plan lists them, transcription
runs the smallest that holds the audio (real tiny.en weights, espeak-ng speech, onnxruntime)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import SAMPLE_RATE, holds

pytest.importorskip("faster_whisper")
from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402 - after the importorskip


class _Runner:
    """A runner that records the shape of each input it is given."""

    def __init__(self, frames: int):
        self.frames, self.seen, self.closed = frames, [], False

    def input_specs(self):
        return {"mel": ((1, 80, self.frames), np.float32)}

    def output_specs(self):
        return {"encoder_output": ((1, self.frames // 2, 384), np.float32)}

    def infer(self, feeds):
        self.seen.append(feeds["mel"].shape)
        return {"encoder_output": np.full((1, self.frames // 2, 384), self.frames, np.float32)}

    def close(self):
        self.closed = True


def test_holds_matches_faster_whispers_content_frames():
    """``holds`` says a window holds N samples exactly when faster-whisper's features of them have
    no more content frames than the window."""
    from faster_whisper.feature_extractor import FeatureExtractor

    fe = FeatureExtractor()
    for n in (1, 160, 159_999, 160_000, 160_159, 160_160, 161_000):
        content = fe(np.zeros(n, np.float32)).shape[-1] - 1
        assert holds(1000, n) == (content <= 1000), n


def test_the_smallest_window_that_holds_the_audio_is_picked():
    from rkspeech.runtime.whisper.buckets import WindowRunners

    runners = {f: _Runner(f) for f in (3000, 500, 1000)}
    w = WindowRunners(runners)
    assert w.windows == (500, 1000, 3000)
    assert w.window_for(2 * SAMPLE_RATE) == 500
    assert w.window_for(5 * SAMPLE_RATE) == 500
    assert w.window_for(5 * SAMPLE_RATE + 160) == 1000
    assert w.window_for(10 * SAMPLE_RATE) == 1000
    assert w.window_for(10 * SAMPLE_RATE + 160) == 3000
    assert w.window_for(45 * SAMPLE_RATE) == 3000  # longer than every window: the 30 s graph, as before
    mel = np.zeros((1, 80, 3000), np.float32)
    assert w.infer({"mel": mel})["encoder_output"].shape == (1, 1500, 384)  # no window chosen: 30 s
    with w.using(1000):
        out = w.infer({"mel": mel})
    assert out["encoder_output"].shape == (1, 500, 384) and w.last_seconds == 10
    assert runners[1000].seen == [(1, 80, 1000)] and runners[3000].seen == [(1, 80, 3000)] and not runners[500].seen
    w.close()
    assert all(r.closed for r in runners.values())


def test_window_graphs_must_share_names():
    from rkspeech.runtime.whisper.buckets import WindowRunners

    odd = _Runner(1000)
    odd.input_specs = lambda: {"features": ((1, 80, 1000), np.float32)}
    with pytest.raises(RkspeechError, match="10 s encoder graph"):
        WindowRunners({3000: _Runner(3000), 1000: odd})


# -- the real thing: build --windows 10,30, then transcribe through its plan ----------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``rkspeech build whisper-encoder --windows 10,30 --skip-convert`` of tiny.en."""
    from rkspeech.cli import main

    out = tmp_path_factory.mktemp("buckets")
    assert main(["build", "whisper-encoder", "--model-dir", str(TINY_EN), "--out-dir", str(out),
                 "--windows", "10,30", "--skip-convert", "--threads", "1"]) == 0
    return out


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    root = tmp_path_factory.mktemp("bucket_speech")
    return {"short": espeak(SENTENCES[1], root / "short.wav"),  # 4.7 s
            "long": espeak(" ".join(SENTENCES[:3]), root / "long.wav")}  # 13 s: past the 10 s window


def test_build_lists_each_window_in_the_plan(built):
    from rkspeech.plan.whisper import load_whisper_plan

    plan = load_whisper_plan(built / "plan.json")
    assert [(g.seconds, g.onnx.name) for g in plan.windows] == [(10, "encoder.10s.onnx"), (30, "encoder.onnx")]
    report = json.loads((built / "build-report.json").read_text())
    assert report["onnx"]["output"]["shape"] == [1, 1500, 384]  # the 30 s report stays at the top
    w10 = report["windows"]["10"]
    assert w10["onnx"]["input"]["shape"] == [1, 80, 1000] and w10["onnx"]["output"]["shape"] == [1, 500, 384]
    # each window checked like the 30 s one: against CTranslate2's own encoder on the same 10 s window
    assert w10["parity_ctranslate2"]["snr_db"] > 90 and w10["onnxruntime"]["snr_db"] > 90
    assert json.loads(w10["custom_string"])["n_frames"] == 1000
    assert (built / "encoder.10s.golden.npz").is_file()


def test_transcribe_runs_the_10s_window_for_short_audio(built, speech):
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import transcribe_audio

    with WhisperModel(str(TINY_EN), encoder=built / "plan.json", backend="ort", threads=1) as model, \
            WhisperModel(str(TINY_EN), encoder=built / "encoder.onnx", backend="ort", threads=1) as full:
        short = decode_audio(speech["short"], sample_rate=SAMPLE_RATE)
        got = transcribe_audio(model, short, beam_size=5, word_timestamps=True)
        assert model.window_s == 10
        assert got.text.strip() == "Please call Stella and ask her to bring these things with her from the store."
        assert got.words()[-1].end <= len(short) / SAMPLE_RATE + 0.5
        longer = decode_audio(speech["long"], sample_rate=SAMPLE_RATE)
        a, b = (transcribe_audio(m, longer, beam_size=5) for m in (model, full))
        assert model.window_s == 30 and a.text == b.text  # past every bucket: the 30 s graph, as before


def test_cli_transcribe_reports_the_window(built, speech, capsys):
    from rkspeech.cli import main

    assert main(["transcribe", speech["short"], "--model-dir", str(TINY_EN), "--encoder", str(built / "plan.json"),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["backend"] == "ort" and report["files"][0]["window_s"] == 10
    assert "Stella" in report["files"][0]["text"]


def test_a_lone_bucket_graph_is_not_an_encoder(built):
    """The 10 s graph alone would be fed 30 s windows: refused as the 20 s model-zoo graph is."""
    from rkspeech.runtime.whisper.checks import check_encoder_file

    with pytest.raises(RkspeechError, match="window"):
        check_encoder_file(built / "encoder.10s.onnx", model_dir=TINY_EN)


def test_build_refuses_bad_windows(tmp_path, capsys):
    from rkspeech.cli import main

    assert main(["build", "whisper-encoder", "--model-dir", str(TINY_EN), "--out-dir", str(tmp_path),
                 "--windows", "0,30"]) == 2
    assert "whole seconds from 1 to 30" in capsys.readouterr().err  # argparse: one line, exit 2
    assert main(["build", "whisper-encoder", "--model-dir", str(TINY_EN), "--out-dir", str(tmp_path),
                 "--windows", "10", "--pieces", "2"]) == 2
    assert "--windows with --pieces" in capsys.readouterr().err
