"""A runtime-only install: `rkspeech decode --backend ort` never imports torch or onnx; the wav it
writes is the stream's PCM; the wav writers agree."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.wav import read_wav_int16, to_int16, write_wav

from streaming_fixtures import ort_engines, step_graphs, write_ort_plan

BLOCKER = textwrap.dedent("""
    import sys, importlib.abc
    BLOCKED = ("torch", "onnx", "transformers", "qwen_tts", "rknn")
    attempts = []
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                attempts.append(name)
                raise ImportError(f"blocked in a runtime-only test: {name}")
            return None
    sys.meta_path.insert(0, Block())
""")


@pytest.fixture(scope="module")
def plan_and_codes(tmp_path_factory, reduced_model):
    paths = step_graphs(tmp_path_factory, reduced_model)
    d = tmp_path_factory.mktemp("decode")
    plan = write_ort_plan(d, paths)
    codes = np.random.default_rng(5).integers(0, 2048, size=(41, 16), dtype=np.int64)
    padded = np.concatenate([codes, -np.ones((3, 16), np.int64)])
    np.save(d / "codes.npy", padded.T)  # [16, T] with end padding
    return plan, d / "codes.npy", codes, paths


def test_imports_stay_light():
    code = BLOCKER + textwrap.dedent("""
        import rkspeech.runtime.tts.streaming, rkspeech.runtime.runners.onnxruntime, rkspeech.runtime.tts.pool
        import rkspeech.runtime.wav, rkspeech.runtime.tts.codes, rkspeech.plan.plan, rkspeech.cli
        import rkspeech.contracts.read
        # the numpy host loop and what it opens (text to speech on a stage plan, no torch)
        import rkspeech.runtime.tts.numpy_loop, rkspeech.runtime.tts.host_weights, rkspeech.runtime.tts.speak
        import rkspeech.runtime.tts.talker_backend, rkspeech.runtime.tts.code_predictor_backend
        import rkspeech.runtime.tts.code_predictor_codebook, rkspeech.runtime.tts.open_stages
        rkspeech.cli.build_parser()
        bad = [m for m in sys.modules if m.split(".")[0] in BLOCKED + ("onnxruntime",)]
        assert not bad and not attempts, (bad, attempts)
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decode_ort_without_torch_or_onnx(plan_and_codes, tmp_path):
    plan, codes_file, codes, paths = plan_and_codes
    out, report = tmp_path / "out.wav", tmp_path / "report.json"
    code = BLOCKER + textwrap.dedent(f"""
        from rkspeech.cli import main
        rc = main(["decode", "--plan", {str(plan)!r}, {str(codes_file)!r}, "-o", {str(out)!r},
                   "--threads", "2", "--report", {str(report)!r}])
        assert rc == 0, rc
        bad = [m for m in sys.modules if m.split(".")[0] in BLOCKED]
        assert not bad and not attempts, (bad, attempts)
        assert "onnxruntime" in sys.modules
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "realtime factor" in res.stdout and "time to first audio" in res.stdout
    r = json.loads(report.read_text())
    assert r["tokens"] == 41 and r["steps_B"] == [4, 16, 16, 5]
    assert r["audio_seconds"] == pytest.approx(41 / 12.5)
    assert 0 < r["time_to_first_audio_s"] < r["decode_seconds"]
    # the wav is the stream's PCM, rounded to 16 bits
    samples, rate = read_wav_int16(out)
    assert rate == 24000
    from rkspeech.runtime.tts.streaming import StreamingVocoder

    main, first = ort_engines(paths)
    np.testing.assert_array_equal(samples, to_int16(StreamingVocoder(main, first).decode(codes)))
    assert not list(tmp_path.glob(".*tmp"))


def test_decode_errors(plan_and_codes, tmp_path):

    plan, codes_file, _, _ = plan_and_codes
    bad = tmp_path / "bad.npy"
    c = np.zeros((10, 16), np.int64)
    c[6, 2] = 4096
    np.save(bad, c)
    for argv, msg in [
        ([str(codes_file), "-o", str(tmp_path / "x.mp3")], "must end in .wav"),
        ([str(codes_file), "-o", str(tmp_path / "no" / "x.wav")], "does not exist"),
        ([str(bad), "-o", str(tmp_path / "x.wav")], "code 4096 at token 6, codebook 2"),
        ([str(codes_file), "-o", str(tmp_path / "x.wav"), "--backend", "rknnlite"], "no main artifact"),
    ]:
        res = subprocess.run([sys.executable, "-m", "rkspeech", "decode", "--plan", str(plan), *argv],
                             capture_output=True, text=True)
        assert res.returncode == 2, res.stderr
        assert msg in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert not (tmp_path / "x.wav").exists()


def test_wav_writers_agree(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    pcm = np.concatenate([rng.uniform(-1.2, 1.2, 5000), [1.0, -1.0, 0.0]]).astype(np.float32)
    a = write_wav(tmp_path / "a.wav", pcm, 24000, writer="wave")
    sa, ra = read_wav_int16(a)
    assert ra == 24000 and sa[-3:].tolist() == [32767, -32767, 0]
    np.testing.assert_array_equal(sa, to_int16(pcm))
    pytest.importorskip("soundfile")
    b = write_wav(tmp_path / "b.wav", pcm, 24000, writer="soundfile")
    sb, rb = read_wav_int16(b)
    np.testing.assert_array_equal(sa, sb)
    # soundfile missing: auto falls back to wave
    monkeypatch.setitem(sys.modules, "soundfile", None)
    c = write_wav(tmp_path / "c.wav", pcm, 24000)
    np.testing.assert_array_equal(read_wav_int16(c)[0], sa)
    with pytest.raises(RkspeechError, match="NaN"):
        write_wav(tmp_path / "d.wav", np.array([0.0, np.nan], np.float32), 24000)
    assert not (tmp_path / "d.wav").exists() and not list(tmp_path.glob(".*tmp"))


@pytest.mark.rknn
def test_decode_sim_backend(plan_and_codes, tmp_path):
    """`--backend sim` builds the plan's ONNX in the simulator (one reduced B=4 conversion, the only
    one in these tests) and decodes close to onnxruntime (fp16 inside: ~40 dB, field notes)."""
    from rkfixtures import have_rknn

    if not have_rknn():
        pytest.skip("rknn-toolkit2 is not installed")
    from rkspeech.cli import main
    from rkspeech.contracts.read import read_contract
    from rkspeech.plan.plan import write_plan
    from rkspeech.core.compare import snr_db

    _, _, codes, paths = plan_and_codes
    B4 = paths["first"]
    plan = write_plan(tmp_path / "plan.json", placement="cpu-fp32", target="rk3588",
                      contracts={"main": read_contract(B4)}, onnx={"main": B4})
    np.save(tmp_path / "c.npy", codes[:14])
    assert main(["decode", "--plan", str(plan), str(tmp_path / "c.npy"), "-o", str(tmp_path / "s.wav"),
                 "--backend", "sim"]) == 0
    sim, _ = read_wav_int16(tmp_path / "s.wav")
    main_e, _ = ort_engines({"main": B4})
    from rkspeech.runtime.tts.streaming import StreamingVocoder

    ref = to_int16(StreamingVocoder(main_e).decode(codes[:14]))
    assert sim.size == ref.size == 14 * 1920
    assert snr_db(ref.astype(np.float64), sim.astype(np.float64)) >= 30
