"""Whisper encoder export and transcription with the encoder on onnxruntime.

Speech is made at test time with espeak-ng (Debian package ``espeak-ng``).  The reference is the
all-CPU pipeline: faster-whisper's own ``transcribe`` (CTranslate2 encoder + decoder) with the
deterministic settings in ``REFERENCE_OPTIONS``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

pytest.importorskip("faster_whisper")
from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402,F401 - after the importorskip


@pytest.fixture(scope="module")
def pipeline():
    from whisper_greedy import WhisperPipeline

    # One CTranslate2 thread: with two, OpenMP spin-waits made the decoder 4x slower whenever
    # another process shared the 2 cores (measured here: 0.66 s vs 2.5 s for one window).
    return WhisperPipeline(TINY_EN, threads=1)


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory):
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder

    loaded = load_whisper_encoder(TINY_EN)
    path = tmp_path_factory.mktemp("whisper_onnx") / "encoder.onnx"
    export_encoder(loaded.model, path)
    return path


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """{name: wav path}: each sentence alone, all of them in one file (~20 s), and a > 30 s file."""
    root = tmp_path_factory.mktemp("speech")
    files = {f"s{i}": espeak(s, root / f"s{i}.wav") for i, s in enumerate(SENTENCES)}
    files["all"] = espeak(" ".join(SENTENCES), root / "all.wav")
    files["long"] = espeak(" ".join(SENTENCES + SENTENCES[:3]), root / "long.wav", speed=140)
    return files


# -- export ------------------------------------------------------------------------------------


def test_onnx_is_static_opset17_with_explicit_layernorm_epsilon(encoder_onnx):
    import onnx

    from rkspeech.export.whisper_onnx import check_encoder_onnx, read_metadata

    info = check_encoder_onnx(encoder_onnx)
    assert info["input_shape"] == [1, 80, 3000] and info["output_shape"] == [1, 1500, 384]
    assert info["layer_norms"] == 9  # 2 per block x 4 + ln_post, each one LayerNormalization node
    proto = onnx.load(str(encoder_onnx))
    assert [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")] == [17]
    for node in proto.graph.node:
        if node.op_type == "LayerNormalization":
            eps = [a.f for a in node.attribute if a.name == "epsilon"]
            assert eps and abs(eps[0] - 1e-5) < 1e-12
    for value in list(proto.graph.input) + list(proto.graph.output):
        assert all(d.HasField("dim_value") for d in value.type.tensor_type.shape.dim)
    assert read_metadata(encoder_onnx)["dims"]["n_audio_state"] == 384


def test_check_refuses_layernorm_without_epsilon(encoder_onnx, tmp_path):
    import onnx

    from rkspeech.export.whisper_onnx import check_encoder_onnx

    proto = onnx.load(str(encoder_onnx))
    node = next(n for n in proto.graph.node if n.op_type == "LayerNormalization")
    keep = [a for a in node.attribute if a.name != "epsilon"]
    del node.attribute[:]
    node.attribute.extend(keep)
    onnx.save(proto, str(tmp_path / "bad.onnx"))
    with pytest.raises(RkspeechError, match="epsilon"):
        check_encoder_onnx(tmp_path / "bad.onnx")


def test_20s_window_is_refused_before_export(tmp_path):
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder

    loaded = load_whisper_encoder(TINY_EN)
    with pytest.raises(RkspeechError, match="1000 encoder frames.*1500"):
        export_encoder(loaded.model, tmp_path / "enc20.onnx", n_frames=2000)
    assert not list(tmp_path.iterdir())  # nothing written, not even a temp file


def test_onnxruntime_matches_ctranslate2_encoder(encoder_onnx, pipeline):
    from rkspeech.pipelines.whisper_inputs import check_window_mel
    from rkspeech.runtime.whisper.encoder import open_encoder
    from rkspeech.core.compare import cosine_per_row

    mel = check_window_mel(80)
    ref = np.array(pipeline.ct2.encode(__import__("ctranslate2").StorageView.from_array(mel), to_cpu=True))
    with open_encoder("ort", encoder_onnx, threads=2) as enc:
        out = enc(mel)
    assert out.shape == (1, 1500, 384) and out.dtype == np.float32
    assert cosine_per_row(ref, out).min() >= 0.9999


# -- transcripts -------------------------------------------------------------------------------


def test_onnx_transcripts_identical_to_all_cpu(pipeline, encoder_onnx, speech):
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.encoder import open_encoder

    texts = {}
    with open_encoder("ort", encoder_onnx, threads=2) as enc:
        for name, path in speech.items():
            audio = decode_audio(path, sample_rate=SAMPLE_RATE)
            ref = pipeline.reference(audio)
            ours_npu = pipeline.transcribe(audio, enc)  # our window loop, ONNX encoder
            assert ref.text.strip(), f"{name}: empty reference transcript"
            if name == "long":  # our window loop with CTranslate2's own encoder equals faster-whisper's
                ours_cpu = pipeline.transcribe(audio)
                assert ours_cpu.text == ref.text and ours_cpu.tokens == ref.tokens
                assert len(ours_npu.windows) == 2  # > 30 s: two windows, decoded in order
            assert ours_npu.text == ref.text, f"{name}: {ours_npu.text!r} != {ref.text!r}"
            assert ours_npu.tokens == ref.tokens, name
            texts[name] = ref.text
    # the speech is really transcribed (tiny.en on espeak: not perfect, but these words survive)
    assert "cloudy" in texts["s0"].lower() and "station" in texts["s2"].lower()


def test_compare_detects_a_wrong_encoder(pipeline, encoder_onnx, speech):
    """The identity check must fail when the encoder is wrong: here its output past 10 s is zeros
    (what a window-geometry mistake looks like to the decoder).  A 0.5 s time shift of the
    encoder output, by contrast, decoded to the same text here: the decoder is robust to it."""
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.encoder import open_encoder
    from rkspeech.runtime.whisper.transcript import diff_text

    audio = decode_audio(speech["all"], sample_rate=SAMPLE_RATE)
    ref = pipeline.reference(audio)
    with open_encoder("ort", encoder_onnx, threads=2) as enc:
        def broken_encoder(mel):
            out = enc(mel)
            out[:, 500:] = 0.0
            return out

        broken = pipeline.transcribe(audio, broken_encoder)
    assert diff_text(ref.text, broken.text) is not None


def test_transcribe_cli_compare_json(encoder_onnx, speech, capsys):
    from rkspeech.cli import main

    rc = main(["transcribe", speech["s1"], "--model-dir", str(TINY_EN), "--encoder", str(encoder_onnx),
               "--backend", "ort", "--compare", "--threads", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0
    (entry,) = report["files"]
    assert entry["compare"]["identical"] is True and entry["compare"]["tokens_identical"] is True
    assert entry["text"] == entry["compare"]["reference_text"]
    timing = entry["timing"]
    assert set(timing) == {"host_s", "encoder_s", "decoder_s", "total_s"}
    assert timing["encoder_s"] > 0 and timing["decoder_s"] > 0
    assert abs(timing["host_s"] + timing["encoder_s"] + timing["decoder_s"] - timing["total_s"]) < 1e-3


def test_transcribe_cli_prints_timing_split(encoder_onnx, speech, capsys, monkeypatch):
    from rkspeech.cli import main
    from rkspeech.core import progress

    monkeypatch.setattr(progress, "PERIODIC_SECONDS", 0)  # a progress line at every segment
    rc = main(["transcribe", speech["s0"], "--model-dir", str(TINY_EN), "--encoder", str(encoder_onnx),
               "--threads", "1", "--beam-size", "1"])
    out, err = capsys.readouterr()
    assert rc == 0 and "cloudy with a chance of rain" in out.lower()
    assert "timing: host" in err and "encoder" in err and "decoder" in err
    # where the transcription is in the file, as it goes (a 2 h file printed nothing for its run)
    flat = " ".join(err.split())
    assert f"transcribe {speech['s0']}: " in flat and " s of audio transcribed (" in flat, err


def test_transcribe_refuses_wrong_encoder_kinds(encoder_onnx, speech, tmp_path):
    from rkspeech.cli import main

    fake = tmp_path / "enc.rknn"
    fake.write_bytes(b"RKNN")
    assert main(["transcribe", speech["s0"], "--model-dir", str(TINY_EN), "--encoder", str(fake),
                 "--backend", "ort"]) == 2
    assert main(["transcribe", speech["s0"], "--model-dir", str(TINY_EN), "--encoder", str(fake),
                 "--backend", "sim"]) == 2
    assert main(["transcribe", speech["s0"], "--model-dir", str(tmp_path), "--encoder", str(encoder_onnx)]) == 2


def test_decoder_refuses_encoder_output_of_wrong_geometry(pipeline):
    with pytest.raises(RkspeechError, match=r"\[1, 1000, 384\].*\[1, 1500, 384\]"):
        pipeline.decode(np.zeros((1, 1000, 384), np.float32))  # a 20 s window's encoder output
    with pytest.raises(RkspeechError, match=r"\[1, 1500, 512\]"):
        pipeline.decode(np.zeros((1, 1500, 512), np.float32))  # base's width on tiny's decoder


def test_build_without_toolkit_steps_exports_and_checks_parity(tmp_path, capsys):
    """``rkspeech build whisper-encoder --skip-convert``: the part that needs no rknn-toolkit2."""
    from rkspeech.cli import main

    rc = main(["build", "whisper-encoder", "--model-dir", str(TINY_EN), "--out-dir", str(tmp_path),
               "--skip-convert", "--threads", "2"])
    out = capsys.readouterr().out
    assert rc == 0 and "torch vs CTranslate2" in out
    report = json.loads((tmp_path / "build-report.json").read_text())
    assert json.loads((tmp_path / "build_report.json").read_text()) == report  # the legacy name, same content
    assert report["parity_ctranslate2"]["cosine_min_frame"] >= 0.9999
    assert report["onnxruntime"]["cosine_min_frame"] >= 0.9999
    assert report["onnx"]["output"]["shape"] == [1, 1500, 384]
    assert "conversion" not in report and (tmp_path / "encoder.onnx").is_file()


@pytest.mark.parametrize("frames", [2999, 3001, 1500])
def test_only_the_30s_window_is_accepted(frames):
    from rkspeech.models.whisper.weights import load_whisper_encoder

    model = load_whisper_encoder(TINY_EN).model
    model.check_window(3000)
    with pytest.raises(RkspeechError, match="--frames 3000"):
        model.check_window(frames)
