"""The code-predictor frame graph as TTSModel's code-predictor backend, and its build stages.

* ``GraphCodePredictor`` over onnxruntime in the generation loop: greedy codes identical to the
  torch backend's on the reduced root; a graph of another model is refused; sampling options are
  refused with this greedy-only backend.
* ``build_code_predictor`` (export -> lint -> convert -> inspect -> simulator verify) on a *tiny*
  root (the reduced widths with 4 code groups and 1 code-predictor layer: ~20 s conversion
  instead of the reduced graph's ~3.5 min); the reduced and published figures are in
  docs/code-predictor-step.md.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

torch = pytest.importorskip("torch")

TEXT = "Hello there, this is a test of the code predictor."
FRAMES = 30


@pytest.fixture(scope="module")
def cp_onnx(tts, tmp_path_factory):
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    step = CodePredictorFrame(tts.net.talker.code_predictor, embed="onehot").eval()
    return export_code_predictor_onnx(step, tmp_path_factory.mktemp("cp_backend") / "cp_onehot.onnx")


def _codes(tts, backend=None, **kw):
    from rkspeech.models.qwen3_tts.backends import TorchCodePredictor
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    opts = kw.pop("options", None) or GenerationOptions.greedy(max_new_tokens=FRAMES + 1)
    if backend is not None:
        tts.use_backends(code_predictor=backend)
    try:
        return tts.generate_codes(TEXT, speaker=tts.speakers[0], language="english", options=opts, **kw)
    finally:
        tts.use_backends(code_predictor=TorchCodePredictor(tts.net.talker))


def test_graph_backend_codes_identical_to_torch(tts, cp_onnx):
    from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor

    ref = _codes(tts)
    assert ref.shape == (FRAMES, tts.num_code_groups)
    with GraphCodePredictor(cp_onnx, backend="ort", model=tts) as g:
        assert g.greedy_only
        got = _codes(tts, g)
    np.testing.assert_array_equal(got, ref)


def test_greedy_only_backend_refuses_sampling(tts, cp_onnx):
    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor

    with GraphCodePredictor(cp_onnx, backend="ort") as g:
        for opts in (GenerationOptions(), GenerationOptions.greedy(subtalker_repetition_penalty=1.1)):
            with pytest.raises(RkspeechError, match="greedy graph"):
                _codes(tts, g, options=opts)
        # a sampled talker with a greedy code predictor is fine
        codes = _codes(tts, g, options=GenerationOptions(subtalker_dosample=False, seed=3, max_new_tokens=4))
    assert codes.shape[1] == tts.num_code_groups


def test_mismatched_graph_is_refused(tts, cp_onnx, tmp_path):
    import onnx

    from rkspeech.core.errors import RkspeechError
    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor
    from rkspeech.contracts.base import CONTRACT_KEY

    contract = read_contract(cp_onnx)
    other = copy.copy(contract)
    object.__setattr__(other, "layers", contract.layers + 1)
    with pytest.raises(RkspeechError, match=r"does not match this model \(layers 2 != 3\)"):
        GraphCodePredictor(cp_onnx, backend="ort", model=other)
    # an artifact whose contract claims another model's widths: refused by its own I/O when the
    # contract is read (with or without a model), before any frame runs
    m = onnx.load(str(cp_onnx))
    for p in m.metadata_props:
        if p.key == CONTRACT_KEY:
            p.value = p.value.replace('"Ht":64', '"Ht":32').replace('"H":48', '"H":96')
    bad = tmp_path / "cp_other.onnx"
    onnx.save(m, str(bad))
    for model in (tts, None):
        with pytest.raises(RkspeechError, match=r"its contract says talker_hidden is \[1, 32\], the graph's "
                                                r"talker_hidden is \[1, 64\]"):
            GraphCodePredictor(bad, backend="ort", model=model)
    with pytest.raises(RkspeechError, match="needs a .rknn file"):
        GraphCodePredictor(cp_onnx, backend="rknnlite")


def test_compare_frames_counts_up_to_the_first_miss():
    from rkspeech.pipelines.code_predictor_build import compare_frames

    rng = np.random.default_rng(0)
    ref = rng.standard_normal((3, 4, 16))
    codes = ref.argmax(-1)
    same = compare_frames(ref, codes, ref + 1e-4)
    assert same["code_agreement"] == 1.0 and same["frames_identical"] == 3 and same["logit_snr_db"] > 70
    assert same["decisions"] == 12 and same["decision_agreement"] == 1.0
    got = ref.copy()
    got[1, 1, (codes[1, 1] + 1) % 16] = 99.0  # frame 1 misses codebook 1 ...
    got[1, 2:] = 0.0  # ... and its later codebooks diverge: not counted in the SNR
    r = compare_frames(ref, codes, got)
    assert r["frames_identical"] == 2
    assert same["misses"] == [] and [(m["frame"], m["codebook"]) for m in r["misses"]] == [(1, 2)]
    assert r["misses"][0]["fp32_gap"] == pytest.approx(ref[1, 1].max() - ref[1, 1, (codes[1, 1] + 1) % 16])
    assert r["decisions"] == 4 + 2 + 4 and r["decision_agreement"] == pytest.approx(9 / 10)  # frame 1 stops at its miss
    assert r["code_agreement"] == pytest.approx(1 - (1 + int((got[1, 2:].argmax(-1) != codes[1, 2:]).sum())) / 12)
    assert r["logit_snr_db"] < 30 and r["worst_frame_snr_db"] < 10


# -- the build stages on a tiny root ------------------------------------------------------------

@pytest.fixture(scope="session")
def tiny_cp_build(tmp_path_factory):
    """A tiny custom-voice root and its frame-form code-predictor build (converted and simulated once)."""
    from rkfixtures import write_small_code_predictor_root
    from rkspeech.models.qwen3_tts.tts_checkpoint import resolve_model_root
    from rkspeech.pipelines.code_predictor_build import build_code_predictor
    from rkspeech.pipelines.resumable import StageRunner

    root = write_small_code_predictor_root(tmp_path_factory.mktemp("tts_tiny_cp"), layers=1, groups=4)
    files = resolve_model_root(root)
    out = tmp_path_factory.mktemp("cp_build")
    report = build_code_predictor(StageRunner(out), files, out, target="rk3588", verify_frames=4, timeout=900,
                                  form="frame")
    return files, out, report


def test_build_code_predictor_report(tiny_cp_build):
    import json
    from pathlib import Path

    from rkspeech.contracts.read import read_contract

    _, out, r = tiny_cp_build
    json.dumps(r)  # JSON-able
    onnx_path, rknn_path = Path(r["artifacts"]["onnx"]), Path(r["artifacts"]["rknn"])
    assert onnx_path.parent == rknn_path.parent == out / "code_predictor"
    assert rknn_path.is_file() and r["rknn"]["bytes"] == rknn_path.stat().st_size
    c = read_contract(rknn_path)  # the .rknn custom string
    assert c == read_contract(onnx_path)
    assert (c.num_code_groups, c.layers, c.embed) == (4, 1, "onehot")
    assert r["placement"]["npu_ops"] > 0 and r["placement"]["cpu_ops"] == 0, r["placement"]
    assert r["build"]["regtask_overflow_lines"] == 0
    assert r["build"]["seconds"] > 0 and r["build"]["peak_rss_mb"] > 0
    assert r["lint"]["errors"] == 0
    sim = r["sim"]
    assert sim["frames"] == 4
    assert sim["code_agreement"] >= 0.9 and sim["logit_snr_db"] > 40, sim
    # the verify stage's simulator recorded the golden replay beside the .rknn; onnxruntime agrees with it
    from rkspeech.plan.integrity import golden_path
    from rkspeech.runtime.golden import load_golden, replay
    from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
    from rkspeech.core.compare import snr_db

    golden = load_golden(golden_path(rknn_path))
    assert sim["golden"]["golden"] == str(golden_path(rknn_path)) and golden.meta["source"] == "sim"
    with OnnxRuntimeRunner(onnx_path) as ort:
        calls = list(replay(ort, golden))
    assert len(calls) == golden.steps >= 1
    for call, want in zip(calls, golden.outputs):
        assert snr_db(call.outputs["logits"], want["logits"]) > 40


def test_build_code_predictor_resumes(tiny_cp_build):
    from rkspeech.pipelines.code_predictor_build import build_code_predictor
    from rkspeech.pipelines.resumable import StageRunner

    files, out, first = tiny_cp_build
    stages = StageRunner(out)
    again = build_code_predictor(stages, files, out, target="rk3588", verify_frames=4, timeout=900, form="frame")
    assert all(t.get("skipped") is True for t in again["stages"].values()), again["stages"]  # (+ built_seconds)
    assert set(again["stages"]) == {"code_predictor_export", "code_predictor_lint", "code_predictor_convert_frame",
                                    "code_predictor_inspect", "code_predictor_verify"}  # verify writes the golden
    assert {k: again[k] for k in ("artifacts", "placement", "build", "rknn", "sim")} == \
        {k: first[k] for k in ("artifacts", "placement", "build", "rknn", "sim")}


def test_build_summary_names_the_decisions_and_the_near_ties():
    from rkspeech.cli.build_tts import code_predictor_sim_rows
    from rkspeech.pipelines.code_predictor_build import compare_frames

    rng = np.random.default_rng(1)
    ref = rng.standard_normal((2, 3, 8))
    codes = ref.argmax(-1)
    got = ref.copy()
    got[0, 0, (codes[0, 0] + 1) % 8] = 9.0  # frame 0's first decision misses
    sim = compare_frames(ref, codes, got)
    (_, row), = code_predictor_sim_rows({"sim": sim})
    assert f"of the {1 + 3} decisions made on torch's inputs" in row and "75.0 %" in row, row
    assert f"{sim['misses'][0]['fp32_gap']:.2g} vs" in row, row
