"""The rknn-lite runner with a stand-in for rknn-toolkit-lite2 (no board here): its documented
``inference()`` returns None on any error, which must surface as one line naming the graph, not
as a TypeError deeper in a decode."""

from __future__ import annotations

import numpy as np
import pytest

from rkfixtures import session_rknn

pytestmark = pytest.mark.rknn


class StandInRKNNLite:
    """TEST DOUBLE of ``rknnlite.api.RKNNLite`` (2.5.0 surface: load_rknn, init_runtime,
    inference(inputs, data_format), release; 0 = success, None from inference on error)."""

    NPU_CORE_AUTO = 0
    fail = False

    def __init__(self, verbose=False):
        self.calls = []

    def load_rknn(self, path):
        return 0

    def init_runtime(self, core_mask=0):
        return 0

    def inference(self, inputs, data_format=None):
        self.calls.append((inputs, data_format))
        if StandInRKNNLite.fail:
            return None
        return [np.zeros((1, 8, 16, 16), np.float32)]

    def release(self):
        pass


@pytest.fixture
def runner(tmp_path_factory, monkeypatch):
    import rkspeech.convert.toolkit as toolkit
    from rkspeech.runtime.runners import open_runner

    monkeypatch.setattr(toolkit, "rknn_lite_class", lambda: StandInRKNNLite)
    with open_runner("rknnlite", session_rknn(tmp_path_factory)) as r:
        yield r


def test_outputs_pass_through(runner):
    StandInRKNNLite.fail = False
    (name, (shape, dtype)), = runner._inputs.items()
    out = runner.infer({name: np.zeros(shape, dtype)})
    assert list(out.values())[0].shape == (1, 8, 16, 16)


def test_none_from_inference_is_one_line_naming_the_graph(runner):
    from rkspeech.core.errors import RkspeechError

    StandInRKNNLite.fail = True
    try:
        (name, (shape, dtype)), = runner._inputs.items()
        with pytest.raises(RkspeechError, match=r"tiny_rk3588\.rknn: rknn-lite inference returned no outputs") as exc:
            runner.infer({name: np.zeros(shape, dtype)})
        assert "\n" not in str(exc.value)
    finally:
        StandInRKNNLite.fail = False


class NoisyRKNNLite(StandInRKNNLite):
    """TEST DOUBLE of rknn-toolkit-lite2 2.5.0 off a board (measured on an emulated aarch64, issue 40):
    ``init_runtime`` writes log lines from C and Python and a traceback, then returns -1."""

    def init_runtime(self, core_mask=0):
        import os
        import traceback

        os.write(1, b"I RKNN: [12:00:00.000] RKNN Runtime Information, librknnrt version: 2.5.0\n")
        for k in range(9):
            print(f"W init_runtime: toolkit log line {k}")
        try:
            raise Exception("Please specify the target in init_runtime!")
        except Exception:
            traceback.print_exc()
        return -1


def test_init_failure_is_one_line_and_the_toolkit_noise_goes_to_a_log(tmp_path_factory, monkeypatch, capfd):
    import os

    import rkspeech.convert.toolkit as toolkit
    from rkspeech.core.errors import RkspeechError
    from rkspeech.runtime.runners import open_runner

    rknn = session_rknn(tmp_path_factory)
    monkeypatch.setattr(toolkit, "rknn_lite_class", lambda: NoisyRKNNLite)
    capfd.readouterr()
    with pytest.raises(RkspeechError, match=r"rknn-lite init_runtime failed: Exception: Please specify the target "
                                            r"in init_runtime!.*where librknnrt\.so comes from.*its log: ") as exc:
        open_runner("rknnlite", rknn)
    seen = capfd.readouterr()
    assert seen.out == "" and seen.err == "", "the toolkit's noise reached the terminal"
    line = str(exc.value)
    assert "\n" not in line
    log = line.rsplit("its log: ", 1)[1]
    text = open(log).read()
    os.unlink(log)
    assert "toolkit log line 8" in text and "Traceback" in text and "librknnrt version" in text


def test_a_loaded_runner_keeps_the_runtime_log_and_prints_nothing(tmp_path_factory, monkeypatch, capfd):
    import rkspeech.convert.toolkit as toolkit
    from rkspeech.runtime.runners import open_runner

    class Talkative(StandInRKNNLite):
        def init_runtime(self, core_mask=0):
            print("I RKNN: librknnrt version: 2.5.0")
            return 0

    monkeypatch.setattr(toolkit, "rknn_lite_class", lambda: Talkative)
    capfd.readouterr()
    with open_runner("rknnlite", session_rknn(tmp_path_factory)) as r:
        assert "librknnrt version: 2.5.0" in r.runtime_log
    assert capfd.readouterr().out == ""
