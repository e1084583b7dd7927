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
