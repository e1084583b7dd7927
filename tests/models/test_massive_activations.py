"""``synth-checkpoint qwen3-tts --massive-activations``: the published 0.6B code predictor's
massive activation in a synthetic root (``models.qwen3_tts.massive_activations``).

On the reduced custom-voice root (seed 0): held-out texts (the accuracy gate's and the code
predictor verify's, none of the calibration texts) peak at 1.5-3x 65504 in ``ffn_down``'s input
on the chosen channels (measured 1.75-2.63x with ``PEAK_RATIO`` 1.9), every other channel stays
below 65504 / 1000, an fp16 cast of the peak is inf, and the fp32 model's greedy codes equal the
unscaled root's.  Torch only, ~20 s here.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

SEED = 0


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    from rkspeech.cli import main

    base = tmp_path_factory.mktemp("massive")
    plain, massive = base / "plain", base / "massive"
    assert main(["synth-checkpoint", "qwen3-tts", "--seed", str(SEED), "--out-dir", str(plain)]) == 0
    assert main(["synth-checkpoint", "qwen3-tts", "--seed", str(SEED), "--massive-activations",
                 "--out-dir", str(massive)]) == 0
    return plain, massive


def _held_out():
    from rkspeech.accuracy.gate import GATE_TEXTS
    from rkspeech.models.qwen3_tts.massive_activations import CALIB_TEXTS
    from rkspeech.pipelines.code_predictor_build import VERIFY_TEXTS

    return [t for t in dict.fromkeys(GATE_TEXTS + VERIFY_TEXTS) if t not in CALIB_TEXTS][:5]


def _record(root):
    from safetensors import safe_open

    from rkspeech.models.qwen3_tts.massive_activations import METADATA_KEY

    with safe_open(str(root / "model.safetensors"), "pt") as f:
        return json.loads(f.metadata()[METADATA_KEY])


def test_peaks_are_one_and_a_half_to_three_times_fp16_max(roots):
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.massive_activations import FP16_MAX, measure_peaks

    _, massive = roots
    r = _record(massive)
    assert len(r["channels"]) == 3
    tts = TTSModel.load(massive)
    texts = _held_out()
    assert len(texts) == 5
    for text in texts:
        p = measure_peaks(tts, texts=(text,), frames=24, layer=r["layer"])
        top = float(p[r["channels"]].max())
        assert 1.5 * FP16_MAX <= top <= 3 * FP16_MAX, (text, top / FP16_MAX)
        assert torch.isinf(torch.tensor(top).half())  # what an fp16 ffn_down sees
        assert float(np.delete(p, r["channels"]).max()) < FP16_MAX / 1000


def test_fp32_codes_are_unchanged(roots):
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions

    plain, massive = (TTSModel.load(r) for r in roots)
    opts = GenerationOptions.greedy(max_new_tokens=30)
    for text in _held_out()[:2]:
        a = plain.generate_codes(text, speaker=plain.speakers[0], language="english", options=opts)
        b = massive.generate_codes(text, speaker=massive.speakers[0], language="english", options=opts)
        assert a.shape[0] > 0
        np.testing.assert_array_equal(a, b)


def test_only_the_chosen_weights_change(roots):
    from safetensors.torch import load_file

    plain, massive = roots
    r = _record(massive)
    a, b = load_file(str(plain / "model.safetensors")), load_file(str(massive / "model.safetensors"))
    assert a.keys() == b.keys()
    prefix = f"talker.code_predictor.model.layers.{r['layer']}.mlp."
    changed = sorted(k for k in a if not torch.equal(a[k], b[k]))
    assert changed == [prefix + "down_proj.weight", prefix + "up_proj.weight"]
    up = b[prefix + "up_proj.weight"] / a[prefix + "up_proj.weight"]
    for c, s in zip(r["channels"], r["scales"]):
        torch.testing.assert_close(up[c], torch.full_like(up[c], s), rtol=1e-5, atol=0)
