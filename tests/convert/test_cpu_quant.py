"""CPU variants of the step graphs (``convert.cpu_quant``) and their accuracy against fp32
(``accuracy.quantized_stage``), on the reduced synthetic custom-voice root (issue 26, deliver 1).

* int8 (dynamic) and int4 (MatMulNBits) variants are written, keep the ``rkspeech.contract``
  metadata and the graph's inputs and outputs, hold the quantized op once per weight MatMul, run
  through ``open_runner('ort')`` and through the unchanged runtime backends (``GraphTalker``,
  ``CodebookCodePredictor``, ``GraphCodePredictor``): text -> codes end to end;
* teacher-forced greedy agreement and logit SNR against the fp32 graphs above loose floors
  (``FLOORS``; docs/cpu-stages.md measured on this root, 16 frames x 3 texts: talker int8 96 % /
  46 dB, int4 92 % / 27 dB; code predictor step int8 98 % / 37 dB, int4 75 % / 17 dB; random
  weights, flat logits), and an early stop token reported as such;
* one-line refusals: not an ONNX, no contract, unknown variant / placement, bad block size.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

CAPACITY, PREFILL_B, FRAMES = 96, 16, 8
TEXTS = ("Hello there, this is a check of the quantized stages.", "One, two, three: counting frames.")
#: (variant, minimum talker agreement, minimum talker SNR, minimum code-predictor agreement, SNR)
FLOORS = {"int8": (0.85, 35.0, 0.85, 28.0), "int4": (0.6, 18.0, 0.5, 12.0)}


@pytest.fixture(scope="module")
def graphs(tts, tmp_path_factory):
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    out = tmp_path_factory.mktemp("cpu_quant")
    cp = tts.net.talker.code_predictor
    g = export_talker_pair(tts.net.talker.model, out, capacity=CAPACITY, prefill_B=PREFILL_B)
    g["cp_step"] = export_talker_onnx(code_predictor_step(cp), out / "cp_step.onnx")
    g["cp_frame"] = export_code_predictor_onnx(CodePredictorFrame(cp).eval(), out / "cp_frame.onnx")
    return g


@pytest.fixture(scope="module")
def variants(graphs, tmp_path_factory):
    """{variant: {role: (path, record)}} for fp32, int8, int4 (block 32)."""
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph

    out = tmp_path_factory.mktemp("cpu_variants")
    return {v: {role: (out / f"{role}.{v}.onnx", quantize_step_graph(src, out / f"{role}.{v}.onnx",
                                                                     CpuQuantOptions(variant=v)))
                for role, src in graphs.items()}
            for v in ("fp32", "int8", "int4")}


@pytest.fixture(scope="module")
def reference(tts, graphs):
    """Greedy runs with the fp32 graphs on onnxruntime, recorded."""
    from rkspeech.accuracy.quantized_stage import record_greedy_reference
    from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    talker = open_graph_talker(graphs["decode"], graphs["prefill"], threads=2)
    with CodebookCodePredictor(graphs["cp_step"], "ort", model=tts, threads=2) as cp:
        runs = record_greedy_reference(tts, talker=talker, code_predictor=cp, texts=TEXTS, frames=FRAMES)
    talker.close()
    return runs


def _weight_matmuls(path) -> int:
    import onnx

    m = onnx.load(str(path))
    inits = {i.name: i for i in m.graph.initializer}
    return sum(1 for n in m.graph.node if n.op_type == "MatMul" and n.input[1] in inits
               and len(inits[n.input[1]].dims) == 2)


@pytest.mark.parametrize("variant", ["int8", "int4"])
def test_variant_keeps_contract_io_and_runs(graphs, variants, variant):
    from rkspeech.convert.cpu_quant import CONTRACT_KEY
    from rkspeech.contracts.read import read_onnx_metadata
    from rkspeech.contracts.onnx_file import read_graph_io
    from rkspeech.runtime.runners import open_runner
    from rkspeech.core.compare import snr_db

    for role, src in graphs.items():
        path, rec = variants[variant][role]
        assert read_onnx_metadata(path)[CONTRACT_KEY] == read_onnx_metadata(src)[CONTRACT_KEY]
        assert read_graph_io(path) == read_graph_io(src)
        weights = _weight_matmuls(src)
        assert weights >= 10
        op = "MatMulNBits" if variant == "int4" else "MatMulInteger"
        assert rec["quantized_ops"][op] == weights, (role, rec["quantized_ops"])
        assert _weight_matmuls(path) == 0  # every weight MatMul was replaced
        assert rec["bits"] == (4 if variant == "int4" else 8) and rec["bytes_after"] < rec["bytes_before"]
        assert rec["onnxruntime"] and rec["quantizer"].startswith("onnxruntime.quantization")
        if variant == "int4":
            assert (rec["block_size"], rec["symmetric"], rec["accuracy_level"]) == (32, False, 4)
        with open_runner("ort", src, threads=2) as ref, open_runner("ort", path, threads=2) as q:
            assert q.input_specs() == ref.input_specs() and q.output_specs() == ref.output_specs()
            gen = np.random.default_rng(0)
            feed = {n: (gen.standard_normal(s) * (n != "mask")).astype(d) for n, (s, d) in ref.input_specs().items()}
            want, got = ref.infer(feed), q.infer(feed)
        first = next(iter(want))
        # the frame graph feeds its own argmax back: after a first differing codebook the rest
        # see other inputs, so only codebook 1's logits compare like for like
        w, g = (want[first][:1], got[first][:1]) if role == "cp_frame" else (want[first], got[first])
        assert snr_db(w, g) > (25.0 if variant == "int8" else 6.0), (role, snr_db(w, g))


def test_fp32_copy_is_identical(graphs, variants):
    for role, src in graphs.items():
        path, rec = variants["fp32"][role]
        assert path.read_bytes() == src.read_bytes()
        assert rec["quantizer"] == "copy" and rec["size_ratio"] == 1.0


@pytest.mark.parametrize("variant", ["fp32", "int8", "int4"])
def test_quantized_stages_through_the_runtime_backends(tts, variants, reference, variant):
    """Text -> codes with the quantized talker and code predictor on onnxruntime CPU, and the
    teacher-forced agreement with the fp32 graphs."""
    from rkspeech.accuracy.quantized_stage import code_predictor_agreement, talker_agreement
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor
    from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    v = variants[variant]
    talker = open_graph_talker(v["decode"][0], v["prefill"][0], model=tts.net.talker.model, threads=2)
    cp = CodebookCodePredictor(v["cp_step"][0], "ort", model=tts, threads=2)
    saved = (tts.talker_backend, tts.code_predictor_backend)
    try:
        tts.use_backends(talker=talker, code_predictor=cp)
        codes = tts.generate_codes(TEXTS[0], speaker=tts.speakers[0], language="english",
                                   options=GenerationOptions.greedy(max_new_tokens=FRAMES + 1))
        assert codes.shape == (FRAMES, tts.num_code_groups)
        assert talker.calls["decode"] == FRAMES and cp.calls == tts.num_code_groups
        assert (codes[:, 1:] < tts.cfg.code_predictor.vocab_size).all()
        ta = talker_agreement(tts, reference, talker)
        ca = code_predictor_agreement(reference, cp)
    finally:
        tts.talker_backend, tts.code_predictor_backend = saved
        talker.close()
        cp.close()
    with GraphCodePredictor(v["cp_frame"][0], "ort", model=tts, threads=2) as frame:
        fa = code_predictor_agreement(reference, frame)
    assert ta["decisions"] == sum(len(r.talker_calls) for r in reference)
    assert ca["decisions"] == sum(len(r.cp_inputs) for r in reference) * (tts.num_code_groups - 1)
    assert ca["teacher_forced"] and not fa["teacher_forced"]
    assert ta["margin"]["n"] == ta["decisions"] and ta["margin"]["min"] >= 0
    if variant == "fp32":
        assert ta["agreement"] == ca["agreement"] == 1.0 and ta["logit_snr_db"] is None  # identical
        assert ta["same_stop"] and ta["first_diverging_frame"] is None
        assert fa["agreement"] >= 0.95  # the frame graph against the step graph's fp32 run
        return
    t_agree, t_snr, c_agree, c_snr = FLOORS[variant]
    assert ta["agreement"] >= t_agree and ta["logit_snr_db"] >= t_snr, ta
    assert ca["agreement"] >= c_agree and ca["logit_snr_db"] >= c_snr, ca
    assert fa["logit_snr_db"] >= c_snr - 3, fa


def test_metadata_dropped_by_a_quantizer_is_restored(graphs, tmp_path, monkeypatch):
    from rkspeech.convert import cpu_quant
    from rkspeech.contracts.read import read_onnx_metadata

    real = cpu_quant._quantize_model

    def dropping(src, options, scratch):
        model, kept = real(src, options, scratch)
        model.ClearField("metadata_props")
        return model, kept

    monkeypatch.setattr(cpu_quant, "_quantize_model", dropping)
    rec = cpu_quant.quantize_step_graph(graphs["decode"], tmp_path / "d.onnx", cpu_quant.CpuQuantOptions("int4"))
    assert rec["metadata_restored"] == [cpu_quant.CONTRACT_KEY]
    assert read_onnx_metadata(tmp_path / "d.onnx") == read_onnx_metadata(graphs["decode"])


def test_refusals_are_one_line(graphs, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.placement import cpu_variant

    def refused(match, fn, *a, **kw):
        with pytest.raises(RkspeechError, match=match) as exc:
            fn(*a, **kw)
        assert "\n" not in str(exc.value)

    text = tmp_path / "notes.onnx"
    text.write_text("this is not a graph\n" * 10)
    refused("not an ONNX model", quantize_step_graph, text, tmp_path / "o.onnx", CpuQuantOptions("int4"))
    refused("no such ONNX file", quantize_step_graph, tmp_path / "missing.onnx", tmp_path / "o.onnx",
            CpuQuantOptions("int8"))
    bare = tmp_path / "bare.onnx"
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(g), str(bare))
    refused("no rkspeech.contract metadata", quantize_step_graph, bare, tmp_path / "o.onnx", CpuQuantOptions("int4"))
    refused("unknown CPU weight variant 'int3'", CpuQuantOptions, "int3")
    refused("block size must be a power of two", CpuQuantOptions, "int4", block_size=48)
    refused("another file than its source", quantize_step_graph, graphs["decode"], graphs["decode"],
            CpuQuantOptions("int4"))
    refused("unknown placement 'gpu'", cpu_variant, "gpu")
    refused("not a CPU placement", CpuQuantOptions.for_placement, "npu")
    assert CpuQuantOptions.for_placement("cpu-int4", block_size=128) == CpuQuantOptions("int4", block_size=128)
    assert not (tmp_path / "o.onnx").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left behind


def test_placements_module_is_standard_library_only():
    code = ("import sys; from rkspeech.core.placement import PLACEMENTS, CPU_VARIANTS; "
            "assert PLACEMENTS == ('npu', 'cpu-fp32', 'cpu-int8', 'cpu-int4'), PLACEMENTS; "
            "assert set(CPU_VARIANTS) == set(PLACEMENTS[1:]); "
            "bad = [m for m in ('numpy', 'onnx', 'onnxruntime', 'torch') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])


def test_talker_stop_frame_and_first_divergence_are_reported(tts, graphs, reference):
    """A talker that emits ``codec_eos`` from frame 3 on: its stop frame, the first diverging frame
    and ``same_stop`` say so."""
    from rkspeech.accuracy.quantized_stage import talker_agreement
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    head = tts.net.talker.codec_head.weight.detach().numpy()
    eos = tts.cfg.talker.codec_eos_token_id

    class StopsAtFrame3:
        name = "stops at frame 3"

        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def start(self, capacity):
            self.calls = 0
            self.inner.start(capacity)

        def forward(self, embeds):
            hidden = self.inner.forward(embeds)
            self.calls += 1
            return (50 * head[eos]).astype(np.float32) if self.calls > 3 else hidden

        def close(self):
            self.inner.close()

    talker = StopsAtFrame3(open_graph_talker(graphs["decode"], graphs["prefill"], threads=2))
    try:
        a = talker_agreement(tts, reference, talker)
    finally:
        talker.close()
    for t in a["texts"]:
        assert t["stop_frame_quantized"] == 3 and t["stop_frame_reference"] != 3 and not t["same_stop"], t
        assert t["first_diverging_frame"] == 3, t
    assert not a["same_stop"] and a["first_diverging_frame"] == 3
    assert a["agreement"] == round(3 * len(reference) / a["decisions"], 4)


def test_cpu_export_layout_gives_the_same_greedy_codes(tts, graphs, reference, tmp_path):
    """The CPU export (``cpu_stages.CPU_EXPORT``: per-layer cache inputs, grouped k/v) of the
    talker pair and the code predictor step: its inputs are per layer with kv_heads cache heads,
    its fp32 graphs give the default export's greedy codes (the same arithmetic, unrepeated), and
    its int4 variant quantizes every weight MatMul and runs."""
    from rkspeech.accuracy.quantized_stage import record_greedy_reference
    from rkspeech.contracts.read import read_contract
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.pipelines.cpu_stages import export_cpu_code_predictor, export_cpu_talker
    from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    cp = tts.net.talker.code_predictor
    pair = export_cpu_talker(tts.net.talker.model, tmp_path, capacity=CAPACITY, prefill_B=PREFILL_B)
    step = export_cpu_code_predictor(cp, tmp_path / "cp_step_cpu.onnx")
    for path, stack in ((pair["decode"], tts.net.talker.model), (step, cp.model)):
        c = read_contract(path)
        assert (c.cache_io, c.kv_layout, c.cache_heads) == ("layers", "grouped", stack.cfg.num_key_value_heads)
        assert "cache" not in c.input_names and f"cache_v{c.layers - 1}" in c.input_names
    talker = open_graph_talker(pair["decode"], pair["prefill"], model=tts.net.talker.model, threads=2)
    with CodebookCodePredictor(step, "ort", model=tts, threads=2) as cpb:
        runs = record_greedy_reference(tts, talker=talker, code_predictor=cpb, texts=TEXTS, frames=FRAMES)
    talker.close()
    for got, want in zip(runs, reference):
        assert np.array_equal(got.frames, want.frames)
    q = tmp_path / "cp_step_cpu.int4.onnx"
    rec = quantize_step_graph(step, q, CpuQuantOptions(variant="int4"))
    assert rec["quantized_ops"]["MatMulNBits"] == _weight_matmuls(step)
    with CodebookCodePredictor(q, "ort", model=tts, threads=1) as cpb:
        hidden, first = runs[0].cp_inputs[0]
        assert len(cpb.frame(hidden, first, lambda j, lg: int(lg.argmax()))) == tts.num_code_groups - 1


def test_prefill_runs_on_the_default_threads_whatever_the_stage_has(graphs, monkeypatch):
    """The prefill is compute-bound and runs before the vocoder has work: on onnxruntime it gets
    at least ``core.threads``' default; the decode keeps the stage's count."""
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    monkeypatch.setenv("RKSPEECH_THREADS", "2")
    talker = open_graph_talker(graphs["decode"], graphs["prefill"], threads=1)
    try:
        threads = {role: pair[0].session.get_session_options().intra_op_num_threads
                   for role, pair in (("decode", talker.decode), ("prefill", talker.prefill))}
    finally:
        talker.close()
    assert threads == {"decode": 1, "prefill": 2}


def test_a_scratch_folder_a_killed_build_left_is_swept(graphs, tmp_path):
    """The quantizer's scratch folder sits in the build folder; a SIGKILL left it there for good
    (issue 37): it is owner-locked now, and the next quantization into the folder sweeps it."""
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.core.workdirs import make_workdir

    stale, lock = make_workdir(tmp_path, prefix=".cpu-quant.")
    lock.close()  # its owner died (the kernel drops the lock)
    live, live_lock = make_workdir(tmp_path, prefix=".other.")  # a live owner's folder stays
    try:
        quantize_step_graph(graphs["cp_step"], tmp_path / "s.onnx", CpuQuantOptions("int8"))
        assert not stale.exists() and live.is_dir()
    finally:
        live_lock.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".other.")) == ["s.onnx"]


@pytest.mark.parametrize("variant", ["int8", "int4"])
def _keep(tts, layer: int):
    """The ``keep_fp32`` entry of code predictor layer ``layer``'s down_proj (its weight's digest)."""
    from rkspeech.convert.cpu_quant import weight_digest

    w = tts.net.talker.code_predictor.model.layers[layer].mlp.down_proj.weight.detach().numpy().T
    return (f"model.layers.{layer}.mlp.down_proj", w.shape[0], w.shape[1], weight_digest(w))


@pytest.mark.parametrize("variant", ["int8", "int4"])
def test_kept_matmul_stays_fp32_and_its_bytes_are_priced(tts, graphs, variants, tmp_path, variant):
    """``keep_fp32``: the MatMul holding that module's weight (found by its digest: the step graph
    names it ``/mlp/down_proj_1/MatMul``, without the layer) is left out of the quantization, still
    a MatMul on its fp32 weight; the record prices it, and the price is the file's growth against
    the fully quantized variant (to 10 %: the file also holds the nodes and names of each form)."""
    import onnx
    from onnx import numpy_helper

    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph

    keep = _keep(tts, 1)
    rec = quantize_step_graph(graphs["cp_step"], tmp_path / "kept.onnx", CpuQuantOptions(variant, keep_fp32=(keep,)))
    (k,), full = rec["kept_fp32"], variants[variant]["cp_step"]
    assert k["module"] == keep[0] and "down_proj" in k["node"], k
    assert rec["fp32_matmuls"] == full[1]["fp32_matmuls"] + 1
    assert sum(rec["quantized_ops"].values()) == sum(full[1]["quantized_ops"].values()) - 1
    m = onnx.load(str(tmp_path / "kept.onnx"))
    node = next(n for n in m.graph.node if n.name == k["node"])
    weight = next(numpy_helper.to_array(i) for i in m.graph.initializer if i.name == node.input[1])
    w1 = tts.net.talker.code_predictor.model.layers[1].mlp.down_proj.weight.detach().numpy().T
    assert node.op_type == "MatMul" and np.array_equal(weight, w1)  # layer 1's, not layer 0's
    grown = rec["bytes_after"] - full[1]["bytes_after"]
    # the price counts tensor bytes; the file also drops the quantized form's extra nodes and names
    # (int8 here: ~0.9 kB of 13.6 kB)
    assert rec["kept_fp32_bytes"] == k["bytes"] and abs(grown - k["bytes"]) <= 0.1 * k["bytes"], (grown, k)


def test_a_module_with_no_matmul_is_one_line(tts, graphs, tmp_path):
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.core.errors import RkspeechError

    name, K, N, _ = _keep(tts, 1)
    with pytest.raises(RkspeechError, match=f"no MatMul holds {name}'s weight, which should stay fp32"):
        quantize_step_graph(graphs["cp_step"], tmp_path / "x.onnx",
                            CpuQuantOptions("int8", keep_fp32=((name, K, N, "0" * 64),)))
