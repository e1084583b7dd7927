import sys

import numpy as np
import pytest

from rkspeech.errors import RkspeechError
from rkspeech.runtime.runners import OnnxRuntimeRunner, RknnSimulatorRunner

from rkfixtures import conv_relu_sin


def _snr_db(ref, x):
    return 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / np.sum((ref - x).astype(np.float64) ** 2))


def test_import_is_light():
    import subprocess

    code = ("import sys; import rkspeech.runtime.runners; "
            "bad=[m for m in ('torch','onnx','onnxruntime','rknn') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_onnxruntime_runner(tmp_path):
    p = conv_relu_sin(tmp_path / "m.onnx")
    x = np.random.RandomState(1).randn(1, 4, 16, 16).astype(np.float32)
    with OnnxRuntimeRunner(p, threads=1) as r:
        assert r.input_specs() == {"x": ((1, 4, 16, 16), np.dtype(np.float32))}
        y = r.infer({"x": x})["y"]
    assert y.shape == (1, 8, 16, 16) and np.all(np.isfinite(y)) and np.abs(y).max() > 0
    with OnnxRuntimeRunner(p) as r, pytest.raises(RkspeechError, match="missing"):
        r.infer({})


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

    from rkspeech.runtime.sim_process import SimulatorProcess

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
