import sys

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.runners import open_runner
from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
from rkspeech.runtime.runners.simulator import RknnSimulatorRunner

from rkfixtures import conv_relu_sin, graph, kill_parent_expect_child_gone, save, vi


def _snr_db(ref, x):
    return 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - x).astype(np.float64) ** 2))


def test_import_is_light():
    import subprocess

    modules = ", ".join(f"rkspeech.runtime.runners.{m}" for m in (
        "base", "onnxruntime", "simulator", "sim_process", "segmented", "rknnlite", "torch_step", "lazy"))
    code = (f"import sys; import {modules}; "
            "bad=[m for m in ('torch','onnx','onnxruntime','rknn','rknnlite') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
    # the package itself (open_runner, BACKENDS) is what the CLI imports: not even numpy
    code = ("import sys; import rkspeech.runtime.runners; "
            "bad=[m for m in ('numpy','torch','onnx','onnxruntime','rknn') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def _refuses(runner, feed, msg):
    with pytest.raises(RkspeechError, match=msg) as err:
        runner.infer(feed)
    text = str(err.value)
    assert text.startswith(f"{runner.name}: ") and "\n" not in text, text


def test_onnxruntime_runner(tmp_path):
    p = conv_relu_sin(tmp_path / "m.onnx")
    x = np.random.RandomState(1).randn(1, 4, 16, 16).astype(np.float32)
    with OnnxRuntimeRunner(p, threads=1) as r:
        assert r.input_specs() == {"x": ((1, 4, 16, 16), np.dtype(np.float32))}
        y = r.infer({"x": x})["y"]
        # int64 values are cast to the declared float32, to the same result
        xi = np.round(x * 4).astype(np.int64)
        np.testing.assert_array_equal(r.infer({"x": xi})["y"], r.infer({"x": xi.astype(np.float32)})["y"])
        _refuses(r, {}, r"missing \['x'\]")
        _refuses(r, {"x": x, "z": x}, r"unknown \['z'\]")
        _refuses(r, {"x": x[:, :, :8]}, r"input x has shape \[1, 4, 8, 16\], the graph wants \[1, 4, 16, 16\]")
        _refuses(r, {"x": x[0]}, "input x has shape")
        _refuses(r, {"x": np.full(x.shape, "a")}, "not a real number type")
        _refuses(r, {"x": np.full(x.shape, 1e300)}, "too large")
    assert y.shape == (1, 8, 16, 16) and np.all(np.isfinite(y)) and np.abs(y).max() > 0


def _codes_graph(path, dims):
    """codes int64 ``dims`` -> Cast float -> y (a symbolic dim where ``dims`` has a name)."""
    from onnx import TensorProto, helper

    node = helper.make_node("Cast", ["codes"], ["y"], to=TensorProto.FLOAT)
    return save(graph([node], [vi("codes", dims, TensorProto.INT64)], [vi("y", dims)]), path)


def test_casts_into_an_integer_input_and_symbolic_dims(tmp_path):
    with OnnxRuntimeRunner(_codes_graph(tmp_path / "c.onnx", [1, "T"]), threads=1) as r:
        assert r.input_specs()["codes"] == ((1, "T"), np.dtype(np.int64))
        # float codes with integral values are what the graph means; any length T is accepted
        assert r.infer({"codes": np.array([[3.0, 7.0, 2047.0]], np.float32)})["y"].tolist() == [[3, 7, 2047]]
        assert r.infer({"codes": np.arange(5)[None]})["y"].shape == (1, 5)
        _refuses(r, {"codes": np.array([[2.5]])}, "non-integral")
        _refuses(r, {"codes": np.array([[np.nan]])}, "non-integral")
        _refuses(r, {"codes": np.arange(5)}, r"input codes has shape \[5\], the graph wants \[1, 'T'\]")


def test_torch_step_runner_checks_like_the_graphs(reduced_model):
    from rkspeech.runtime.runners.torch_step import TorchStepRunner
    from rkspeech.stepgraph.step import VocoderStep

    step = VocoderStep(reduced_model, 4)
    r = TorchStepRunner(step)
    c = step.contract
    assert {n: list(s) for n, (s, _) in r.input_specs().items()} == c.input_shapes()
    assert r.input_specs()["audio_codes"][1] == np.dtype(c.codes_dtype)
    feed = {n: np.zeros(s, np.float32) for n, s in c.input_shapes().items()}
    out = r.infer(feed)  # float32 codes cast to the contract's int64
    assert {n: list(a.shape) for n, a in out.items()} == c.output_shapes()
    _refuses(r, {**feed, "cache_in": feed["cache_in"][:-1]}, "input cache_in has shape")
    _refuses(r, {n: a for n, a in feed.items() if n != "cache_valid"}, r"missing \['cache_valid'\]")
    _refuses(r, {**feed, "audio_values": feed["cache_in"]}, r"unknown \['audio_values'\]")
    _refuses(r, {**feed, "audio_codes": feed["audio_codes"] + 0.5}, "non-integral")


def test_open_runner_refuses_wrong_files(tmp_path):
    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    fake = tmp_path / "m.rknn"
    fake.write_bytes(b"RKNN")
    cases = [("ort", fake, "backend ort needs a .onnx file, got m.rknn"),
             ("sim", fake, "backend sim needs a .onnx file, got m.rknn .*cannot run a .rknn"),
             ("rknnlite", onnx_path, "backend rknnlite needs a .rknn file, got m.onnx"),
             ("ort", tmp_path / "gone.onnx", "gone.onnx: no such file"),
             ("sim", tmp_path, "no such file"),
             ("cuda", onnx_path, "unknown backend 'cuda'; choose one of ort, sim, rknnlite")]
    for backend, path, msg in cases:
        with pytest.raises(RkspeechError, match=msg) as err:
            open_runner(backend, path)
        assert "\n" not in str(err.value)
    with pytest.raises(RkspeechError, match="unknown target 'rk9999'"):
        open_runner("sim", onnx_path, target="rk9999")
    with open_runner("ort", onnx_path, threads=1) as r:
        assert isinstance(r, OnnxRuntimeRunner)


def test_open_runner_sim_in_pieces_is_segmented(tmp_path):
    """pieces > 1: the graph is split when opened; nothing is built until the first call."""
    from rkspeech.runtime.runners.segmented import SegmentedSimulator

    with open_runner("sim", conv_relu_sin(tmp_path / "m.onnx"), pieces=2, memory_limit_mb=None) as r:
        assert isinstance(r, SegmentedSimulator) and len(r.paths) == 2
        assert r.input_specs() == {"x": ((1, 4, 16, 16), np.dtype(np.float32))}
        _refuses(r, {"x": np.zeros((1, 4, 16, 8), np.float32)}, "input x has shape")
        assert r.calls == 0


@pytest.mark.rknn
def test_open_runner_sim_is_a_child_process(tmp_path):
    from rkspeech.runtime.runners.sim_process import SimulatorProcess

    p = conv_relu_sin(tmp_path / "m.onnx")
    x = np.random.RandomState(4).randn(1, 4, 16, 16).astype(np.float32)
    with OnnxRuntimeRunner(p, threads=1) as r:
        ref = r.infer({"x": x})["y"]
    with open_runner("sim", p, target="rk3588") as sim:
        assert isinstance(sim, SimulatorProcess) and sim._proc.pid != __import__("os").getpid()
        assert sim.memory_limit_mb is None or sim.memory_limit_mb > 0  # 90 % of available memory
        y = sim.infer({"x": x})["y"]
        _refuses(sim, {"x": x[..., :8]}, "input x has shape")
        assert sim._proc.is_alive()  # a refused feed never reached the child
        import psutil

        work = sim._workdir  # the child's cwd and TMPDIR: toolkit droppings land there
        assert psutil.Process(sim._proc.pid).cwd() == work
    assert not __import__("os").path.exists(work)
    assert _snr_db(ref, y) >= 40


@pytest.mark.rknn
def test_simulator_matches_onnxruntime(tmp_path):
    import os

    p = conv_relu_sin(tmp_path / "m.onnx")
    x = np.random.RandomState(2).randn(1, 4, 16, 16).astype(np.float32)
    with OnnxRuntimeRunner(p) as r:
        ref = r.infer({"x": x})["y"]
    tmpdir = os.environ.get("TMPDIR")
    with RknnSimulatorRunner(p, target="rk3588", log_path=str(tmp_path / "sim.log")) as sim:
        y = sim.infer({"x": x})["y"]
        y2 = sim.infer({"x": x})["y"]
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert _snr_db(ref, y) >= 40, _snr_db(ref, y)
    assert np.array_equal(y, y2)
    assert os.environ.get("TMPDIR") == tmpdir


@pytest.mark.rknn
def test_simulator_process_matches_in_process_and_names_its_death(tmp_path):
    """The child-process simulator gives the in-process numbers; a killed child is a clean error."""
    import os
    import signal

    from rkspeech.runtime.runners.sim_process import SimulatorProcess

    p = conv_relu_sin(tmp_path / "m.onnx")
    x = np.random.RandomState(3).randn(1, 4, 16, 16).astype(np.float32)
    with RknnSimulatorRunner(p, target="rk3588") as sim:
        ref = sim.infer({"x": x})["y"]
    with SimulatorProcess(p, target="rk3588") as child:
        y = child.infer({"x": x})["y"]
        assert child.peak_rss_mb > 100  # the toolkit alone is a few hundred MB
        os.kill(child._proc.pid, signal.SIGKILL)  # what the OOM killer does
        with pytest.raises(RkspeechError, match="SIGKILL.*out-of-memory.*inference of m.onnx"):
            child.infer({"x": x})
    assert np.array_equal(ref, y)
    with pytest.raises(RkspeechError, match="exceeded the memory limit of 50 MB"):
        SimulatorProcess(p, target="rk3588", memory_limit_mb=50)


def _whisper_like(path, frames_out: int = 1500, n_mels: int = 4, d: int = 8):
    """An encoder's I/O on a tiny graph: mel [1, n_mels, 2*frames_out] -> stride-2 Conv ->
    Transpose -> [1, frames_out, d]."""
    from onnx import helper, numpy_helper

    w = numpy_helper.from_array((np.random.RandomState(0).randn(d, n_mels, 3) * 0.3).astype(np.float32), "W")
    nodes = [helper.make_node("Conv", ["mel", "W"], ["c"], strides=[2], pads=[1, 1]),
             helper.make_node("Transpose", ["c"], ["encoder_output"], perm=[0, 2, 1])]
    return save(graph(nodes, [vi("mel", [1, n_mels, 2 * frames_out])],
                      [vi("encoder_output", [1, frames_out, d])], [w]), path)


def test_whisper_encoder_refuses_wrong_geometry_before_opening(tmp_path):
    from rkspeech.runtime.whisper.encoder import open_encoder

    p = _whisper_like(tmp_path / "enc20.onnx", frames_out=1000)
    for backend in ("ort", "sim"):
        with pytest.raises(RkspeechError, match=r"encoder output shape \[1, 1000, 8\]"):
            open_encoder(backend, p)


@pytest.mark.rknn
def test_whisper_encoder_on_the_simulator_child(tmp_path):
    """The Whisper encoder's simulator runs in a child: its numbers match onnxruntime, and a
    memory limit or a killed child is an RkspeechError, not the end of this process."""
    import os
    import signal

    from rkspeech.runtime.runners.sim_process import SimulatorProcess
    from rkspeech.runtime.whisper.encoder import open_encoder

    p = _whisper_like(tmp_path / "encoder.onnx")
    mel = np.random.RandomState(5).randn(1, 4, 3000).astype(np.float32)
    with open_encoder("ort", p, threads=1) as enc:
        ref = enc(mel)
    with open_encoder("sim", p, target="rk3588") as enc:
        assert isinstance(enc.runner, SimulatorProcess) and enc.input_name == "mel"
        out = enc(mel)
        os.kill(enc.runner._proc.pid, signal.SIGKILL)
        with pytest.raises(RkspeechError, match="SIGKILL.*inference of encoder.onnx"):
            enc(mel)
    assert out.shape == (1, 1500, 8) and out.dtype == np.float32
    assert _snr_db(ref, out) >= 40, _snr_db(ref, out)
    with pytest.raises(RkspeechError, match="build of encoder.onnx.*exceeded the memory limit of 50 MB"):
        open_encoder("sim", p, memory_limit_mb=50)


@pytest.mark.rknn
def test_a_sigkilled_parent_leaves_no_simulator_child_or_folder_for_long(tmp_path):
    """A SIGKILLed build's simulator child goes with it (it watches its parent), and the work
    folder it leaves is owner-locked, so the next one made sweeps it (issue 37, item 12)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import psutil

    from rkspeech.core.workdirs import sweep_stale_workdirs

    p = conv_relu_sin(tmp_path / "m.onnx")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    code = ("import sys, time; from rkspeech.runtime.runners.sim_process import SimulatorProcess; "
            "s = SimulatorProcess(sys.argv[1], target='rk3588'); print(s._proc.pid, s._workdir, flush=True); "
            "time.sleep(60)")
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, "-c", code, str(p)], env=env, stdout=subprocess.PIPE, text=True)
    child = None
    try:
        pid, work = parent.stdout.readline().split()
        child = psutil.Process(int(pid))
        kill_parent_expect_child_gone(parent, child, "simulator child")
    finally:
        parent.kill()
        if child is not None and child.is_running():
            child.kill()
    assert Path(work).is_dir() and Path(work).parent == tmp  # what SIGKILL leaves
    assert sweep_stale_workdirs(tmp) == [work]


def test_simulator_pieces_work_in_an_owner_locked_folder(tmp_path, monkeypatch):
    """The pieces' folder (and the accuracy map's, the same way) is owner-locked in the temp
    folder: removed on close, and one a SIGKILLed run left is swept by the next."""
    import tempfile

    from rkspeech.core.workdirs import make_workdir
    from rkspeech.runtime.runners.segmented import SegmentedSimulator

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale, lock = make_workdir(tmp_path, prefix="rkspeech-pieces-")
    lock.close()  # its owner died
    p = conv_relu_sin(tmp_path / "m.onnx")
    pieces = SegmentedSimulator(p, n_pieces=2)  # splits only; each piece is built when called
    try:
        (work,) = [d for d in tmp_path.iterdir() if d.name.startswith("rkspeech-pieces-")]
        assert work != stale and not stale.exists() and len(pieces.paths) == 2
    finally:
        pieces.close()
    assert not work.exists()
