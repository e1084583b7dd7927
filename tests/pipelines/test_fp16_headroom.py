"""The fp16 headroom stage of ``build qwen3-tts`` (``pipelines.fp16_headroom``,
``models.qwen3_tts.fp16_headroom``), torch only.

On the reduced ``--massive-activations`` root (seed 0) the stage finds code predictor layer 1's
``down_proj`` input channels over 65504 (the ones the root's metadata names, which the build
never reads), the power-of-two rescale brings them under ``65504 / MARGIN`` when measured again,
and the fp32 model is the same function (greedy codes equal, frame logits bit-identical).  The
root without the hazard gets no rescale; a tensor no exact rescale moves refuses the NPU in one
line.  Three held-out texts of 12 frames each keep every test < 60 s here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

TEXTS, FRAMES = 3, 12


def _metadata_channels(root) -> tuple[int, list[int]]:
    from safetensors import safe_open

    from rkspeech.models.qwen3_tts.massive_activations import METADATA_KEY

    with safe_open(str(root / "model.safetensors"), "pt") as f:
        r = json.loads(f.metadata()[METADATA_KEY])
    return r["layer"], sorted(r["channels"])


@pytest.fixture(scope="module")
def massive(tts_massive_ckpt):
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.pipelines.fp16_headroom import measure

    tts = TTSModel.load(tts_massive_ckpt)
    return tts, measure(tts, ["code_predictor"], texts=TEXTS, frames=FRAMES)


def test_finds_the_massive_channels_and_the_rescale_brings_them_under(massive, tts_massive_ckpt):
    from rkspeech.models.qwen3_tts.fp16_headroom import FP16_MAX, MARGIN, apply_rescale, measure_peaks
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.pipelines.fp16_headroom import headroom_runs

    _, report = massive
    row = report["graphs"]["code_predictor"]
    layer, channels = _metadata_channels(tts_massive_ckpt)
    assert row["top"][0]["tensor"] == f"model.layers.{layer}.mlp.down_proj:input"
    assert row["top"][0]["ratio"] > 1  # over fp16's range before
    assert len(row["rescale"]) >= 1 and {e["layer"] for e in row["rescale"]} == {layer}
    assert sorted(c for e in row["rescale"] for c in e["channels"]) == channels
    assert row["over"] == [] and row["top_after"][0]["peak"] <= FP16_MAX / MARGIN
    # measured again on a model carrying the rescale: every channel under the margin
    tts = TTSModel.load(tts_massive_ckpt)
    apply_rescale(tts, "code_predictor", row["rescale"])
    again = measure_peaks(tts, ["code_predictor"], headroom_runs(tts, TEXTS), FRAMES)
    down = again.channels["code_predictor"][layer]["down_proj:input"]
    assert down.max() <= FP16_MAX / MARGIN
    assert max(again.tensors["code_predictor"].values()) <= FP16_MAX / MARGIN
    # the smallest shift: one bit less would leave the largest peak over the margin
    k = max(e["shift"] for e in row["rescale"])
    assert row["top"][0]["peak"] / 2 ** (k - 1) > FP16_MAX / MARGIN >= row["top"][0]["peak"] / 2 ** k


def test_fp32_is_the_same_function_with_the_rescale(massive, tts_massive_ckpt):
    from rkspeech.models.qwen3_tts.fp16_headroom import apply_rescale
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.pipelines.code_predictor_build import capture_frames, torch_frame_logits

    plain, report = massive
    scaled = TTSModel.load(tts_massive_ckpt)
    apply_rescale(scaled, "code_predictor", report["graphs"]["code_predictor"]["rescale"])
    w = "talker.code_predictor.model.layers.1.mlp.up_proj.weight"
    assert not torch.equal(plain.net.module.state_dict()[w], scaled.net.module.state_dict()[w])
    opts = GenerationOptions.greedy(max_new_tokens=20)
    for text in ("The quick brown fox jumps over the lazy dog.", "Good evening, world!"):
        a = plain.generate_codes(text, speaker=plain.speakers[0], language="english", options=opts)
        b = scaled.generate_codes(text, speaker=scaled.speakers[0], language="english", options=opts)
        assert a.shape[0] > 0
        np.testing.assert_array_equal(a, b)
    captured = capture_frames(plain, 8)
    la, lb = torch_frame_logits(plain, captured), torch_frame_logits(scaled, captured)
    assert np.isfinite(la).all()
    np.testing.assert_array_equal(la, lb)  # bit-identical: a power-of-two factor is exact


def test_a_root_without_the_hazard_gets_no_rescale(tts):
    from rkspeech.pipelines.fp16_headroom import measure

    report = measure(tts, ["code_predictor", "talker"], texts=2, frames=8)
    for row in report["graphs"].values():
        assert row["rescale"] == [] and row["over"] == []
        assert row["top"][0]["ratio"] < 1e-3


class _Stages:
    """``StageRunner.run`` without a record."""
    timings: dict = {}

    def run(self, name, args, inputs, outputs, work):
        return work()


class _Lazy:
    def __init__(self, tts):
        self.tts, self.transforms = tts, []

    def get(self):
        return self.tts

    def transform(self, fn):
        self.transforms.append(fn)


def test_a_peak_no_exact_rescale_moves_refuses_the_npu(tts_custom_ckpt, tmp_path):
    """A constructed case: layer 0's gate_proj row 5 x 1e6 puts gate_proj's output (before the
    SiLU, which no power of two passes through exactly) far over 65504."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.pipelines.fp16_headroom import check_headroom

    tts = TTSModel.load(tts_custom_ckpt)
    with torch.no_grad():
        tts.net.talker.code_predictor.model.layers[0].mlp.gate_proj.weight[5, :] *= 1e6
    lazy = _Lazy(tts)
    with pytest.raises(RkspeechError) as err:
        check_headroom(_Stages(), lazy, [], ["code_predictor"], texts=2, frames=4)
    line = str(err.value)
    assert "\n" not in line
    assert "model.layers.0.mlp.gate_proj:output" in line and "x fp16's 65504" in line
    assert "--code-predictor cpu-int8" in line
    assert lazy.transforms == []  # nothing folded into a refused model


def test_the_rescale_is_folded_into_the_lazy_model(massive):
    from rkspeech.pipelines.fp16_headroom import check_headroom

    tts, report = massive
    lazy = _Lazy(tts)

    class Recorded(_Stages):
        def run(self, name, args, inputs, outputs, work):
            return report

    out = check_headroom(Recorded(), lazy, [], ["code_predictor"])
    assert out["graphs"] == report["graphs"] and len(lazy.transforms) == 1


def test_lazy_model_applies_a_transform_when_it_loads(tts_custom_ckpt):
    from rkspeech.models.qwen3_tts.generate import LazyTTSModel
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root

    seen = []
    lazy = LazyTTSModel(resolve_model_root(tts_custom_ckpt))
    lazy.transform(seen.append)
    assert seen == []  # not loaded yet
    tts = lazy.get()
    assert seen == [tts]
    lazy.transform(seen.append)  # loaded: at once
    assert seen == [tts, tts]


def test_nan_simulator_logits_are_refused_in_every_gate_mode():
    """A NaN logit SNR in an NPU stage's simulator check is one failure naming the remedy; finite
    figures (or "identical", written null) are none."""
    from rkspeech.pipelines.fp16_headroom import overflow_failures

    npu = {"code_predictor": {"source": "simulator", "logit_snr_db": "NaN"},
           "talker": {"source": "simulator", "logit_snr_db": 41.2}}
    (line,) = overflow_failures(npu, skipped=True)
    assert line.startswith("code_predictor on the simulator: its fp16 logits hold NaN"), line
    assert "without --skip-fp16-headroom" in line and line.endswith("--code-predictor cpu-int8"), line
    assert "skip-fp16-headroom" not in overflow_failures(npu, skipped=False)[0]
    assert overflow_failures({"talker": {"logit_snr_db": None}, "code_predictor": {"logit_snr_db": 58.3}},
                             skipped=False) == []
    assert overflow_failures(None, skipped=False) == []
