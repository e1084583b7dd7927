"""``rkspeech estimate``: the layer table's cycles / traffic, the time model, the report, errors.

The real-log tests reuse the session's tiny rk3588 conversion (Conv+Relu, CPU Sin, Mul); the time
model is checked on hand-made layers with known figures."""

import json
import math
import shutil

import pytest
from rkfixtures import have_rknn, session_rknn

from rkspeech.cli import main
from rkspeech.convert.placement import Layer, parse_log_lines
from rkspeech.core.errors import RkspeechError
from rkspeech.estimate import (
    Assumptions,
    classify,
    estimate_layers,
    estimate_path,
    find_build_log,
)
from rkspeech.estimate.steptime import block_of, with_assumptions

needs_rknn = pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 not installed")

#: Rows in the exact format of rknn-toolkit2 2.5.0's table (from a reduced npu step log).
_LOG = """\
I rknn building ...
D RKNN: [20:05:59.943]                          Network Layer Information Table
D RKNN: [20:05:59.943] ----------------------------------------------------------------------
D RKNN: [20:05:59.943] ID   OpType             DataType Target InputShape                               OutputShape            Cycles(DDR/NPU/Total)    RW(KB)       FullName
D RKNN: [20:05:59.943] ----------------------------------------------------------------------
D RKNN: [20:05:59.943] 0    InputOperator      FLOAT16  CPU    \\                                        (1,16,16)              0/0/0                    0            InputOperator:audio_codes
D RKNN: [20:05:59.943] 9    ConvLeakyRelu      FLOAT16  NPU    (1,16,1,16),(32768,16,1,1),(32768)       (1,32768,1,16)         94223/65536/94223        1152         Conv:/codebook/Conv
D RKNN: [20:05:59.943] 40   Conv               FLOAT16  NPU    (1,1536,1,16),(128,1536,1,1)             (1,128,1,16)           3312/1024/3312           72           Conv:/input_proj/MatMul#2
D RKNN: [20:05:59.943] 972  Clip               FLOAT16  NPU    (1,24,1,30720)                           (1,24,1,30720)         0/0/0                    1440         Clip:/s22/Clip
D RKNN: [20:05:59.943] 968  Conv               FLOAT16  NPU    (1,48,16,1920),(24,48,1,8)               (1,24,16,1920)         124881/737280/737280     2898         Conv:/conv_19/Conv
D RKNN: [20:05:59.943] 1068 Reshape            FLOAT16  NPU    (1,24,1,30720),(4)                       (1,24,15,2048)         0/0/0                    1440         Reshape:/Reshape_95
D RKNN: [20:05:59.943] 1100 Sin                FLOAT16  CPU    (1,24,1,30720)                           (1,24,1,30720)         0/0/0                    2880         Sin:/s25/Sin
D RKNN: [20:05:59.943] 1237 OutputOperator     FLOAT16  CPU    (1,1,1,30720)                            \\                      0/0/0                    60           OutputOperator:audio_values
D RKNN: [20:05:59.943] ----------------------------------------------------------------------
E RKNN: [20:06:00.001] REGTASK: The bit width of field value exceeds the limit, target: v2, offset: 0x5048, shift = 19, limit: 0x1fff, value: 0x77fa
I rknn building done.
"""


@pytest.fixture(scope="module")
def log_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("est") / "m.rknn.build.log"
    p.write_text(_LOG)
    return p


def _layer(i, op, target="NPU", ddr=0, npu=0, rw=0.0, out="(1,1,1,1)", name=None):
    return Layer(id=i, op_type=op, dtype="FLOAT16", target=target, input_shapes="", output_shapes=out,
                 full_name=name or f"{op}:/n{i}/{op}", cycles=max(ddr, npu), rw_kb=rw, ddr_cycles=ddr,
                 npu_cycles=npu)


# ---- parser ---------------------------------------------------------------------------------

def test_parser_keeps_cycle_columns(log_file):
    (table,), regtask = parse_log_lines(log_file.read_text().splitlines(True))
    assert regtask == 1
    by = {la.id: la for la in table}
    cb = by[9]
    assert (cb.ddr_cycles, cb.npu_cycles, cb.cycles, cb.rw_kb) == (94223, 65536, 94223, 1152.0)
    assert (by[968].ddr_cycles, by[968].npu_cycles, by[968].cycles) == (124881, 737280, 737280)
    assert by[972].cycles == by[972].ddr_cycles == by[972].npu_cycles == 0 and by[972].rw_kb == 1440.0
    assert by[1100].target == "CPU" and by[9].full_name == "Conv:/codebook/Conv"


@needs_rknn
@pytest.mark.rknn
def test_parser_on_a_real_build_log(tmp_path_factory):
    rknn = session_rknn(tmp_path_factory)
    log = find_build_log(rknn)
    assert log.name == rknn.name + ".build.log"
    with open(log, encoding="utf-8", errors="replace") as f:
        (table,), _ = parse_log_lines(f)
    conv = next(la for la in table if la.op_type.startswith("Conv"))
    assert conv.npu_cycles > 0 and conv.ddr_cycles > 0 and conv.rw_kb > 0
    assert conv.cycles == max(conv.ddr_cycles, conv.npu_cycles)  # Total = max(DDR, NPU) in 2.5.0
    sin = next(la for la in table if la.op_type == "Sin")
    assert sin.target == "CPU" and sin.cycles == 0


# ---- classification, blocks ------------------------------------------------------------------

@pytest.mark.parametrize("op,target,name,cls", [
    ("ConvAdd", "NPU", "Conv:/conv_21/Conv_ConvAdd", "conv"),
    ("ConvLeakyRelu", "NPU", "Conv:/codebook/Conv", "conv"),
    ("Conv", "NPU", "Conv:/layers.0/self_attn/q_proj/MatMul#2", "matmul"),
    ("exSDPAttention", "NPU", "exSDPAttention:/layers.0/self_attn/MatMul_5_2sdpa", "matmul"),
    ("Mul", "NPU", "Mul:/s3/Mul_1", "elementwise"),
    ("BatchNormalization", "NPU", "BatchNormalization:/s8/Mul_7_2bn", "elementwise"),
    ("Reshape", "NPU", "Reshape:/Reshape_95", "data movement"),
    ("Gather", "NPU", "Gather:/polyphase.1/x", "data movement"),
    ("Sin", "CPU", "Sin:/s25/Sin", "cpu"),
    ("Reshape", "CPU", "Reshape:x", "cpu"),
    ("InputOperator", "CPU", "InputOperator:x", "io"),
    ("SomethingNew", "NPU", "SomethingNew:x", "other"),
])
def test_classify(op, target, name, cls):
    assert classify(op, target, name) == cls


def test_blocks_by_rate_and_by_name():
    # step graph, B=16: the output width / B picks the vocoder stage
    assert block_of("Clip:/s22/Clip", "(1,24,1,30720)", 16, True) == "decoder block 4 + output (x1920)"
    assert block_of("Reshape:/Reshape_95", "(1,24,15,2048)", 16, True) == "decoder block 4 + output (x1920)"
    assert block_of("Mul:/s8/Mul_1", "(1,96,1,2560)", 16, True) == "decoder block 2 (x160)"
    assert block_of("Slice:/layers.1/self_attn/Slice_4", "(2,71,1,64)", 16, True).startswith("token rate")
    # other graphs: the first indexed module of the node name
    assert block_of("Conv:/blocks.3/mlp/fc1/MatMul", "(1,2048,1,1500)", None, False) == "blocks.3"
    assert block_of("Conv:/decoder/decoder.2/block.1/conv/Conv", "(1,96,1,2560)", None, False) == "decoder/decoder.2"
    assert block_of("Conv:/conv1/Conv", "(1,512,1,3000)", None, False) == "conv1"


# ---- the time model -------------------------------------------------------------------------

def test_sums_overlap_cores():
    layers = [
        _layer(0, "InputOperator", target="CPU"),                       # not counted
        _layer(1, "Conv", ddr=1000, npu=2_000_000, rw=1000.0),           # compute-bound: 2 ms
        _layer(2, "Mul", rw=17e6 / 1024),                                # traffic: 17e6 B / 17 GB/s = 1 ms
        _layer(3, "Sin", target="CPU", rw=1e6 / 1024),                   # 1e6 B / 1 GB/s = 1 ms
    ]
    e = estimate_layers(layers, Assumptions())
    r = e.to_report()
    assert len(r["layers"]) == 3 and r["cpu_ops"] == 1
    conv_traffic = (1000 * 1024 + 2) / 17e9 * 1e3  # reads (RW) + the 2-byte output
    assert r["est_step_ms"] == pytest.approx(2 + 1 + 1, abs=1e-3)
    assert r["rw_mb"] == pytest.approx((1000 + 17e6 / 1024 + 1e6 / 1024) / 1024, abs=0.1)
    assert r["traffic_mb"] == pytest.approx(r["rw_mb"], abs=0.1)  # 2-byte outputs
    assert [x["bound"] for x in r["layers"]] == ["compute", "traffic", "cpu"]
    # sum: the conv's traffic adds to its compute
    s = with_assumptions(e, overlap="sum").to_report()
    assert s["est_step_ms"] == pytest.approx(4 + conv_traffic, abs=1e-3)
    # 2 cores halve compute, not DDR traffic or CPU layers
    assert r["est_step_ms_by_cores"][2] == pytest.approx(1 + 1 + 1, abs=1e-3)
    # the clock and the efficiency scale compute only
    assert with_assumptions(e, npu_mhz=500).to_report()["est_step_ms"] == pytest.approx(6, abs=1e-3)
    assert with_assumptions(e, npu_efficiency=0.5).to_report()["est_step_ms"] == pytest.approx(6, abs=1e-3)
    assert with_assumptions(e, ddr_gbps=8.5).to_report()["est_step_ms"] == pytest.approx(5, abs=1e-3)
    # classes and blocks add up to the whole
    for key in ("classes", "blocks", "op_types"):
        assert sum(g["est_ms"] for g in r[key]) == pytest.approx(r["est_step_ms"], abs=1e-3)
        assert sum(g["layers"] for g in r[key]) == 3


@pytest.mark.parametrize("bad", [{"npu_mhz": 0}, {"ddr_gbps": -1}, {"overlap": "min"}, {"cores": 0},
                                 {"npu_efficiency": float("nan")}, {"layer_us": -1}])
def test_bad_assumptions(bad):
    with pytest.raises(RkspeechError):
        Assumptions(**bad).check()


# ---- files, report, errors ------------------------------------------------------------------

def test_log_report_keys(log_file, tmp_path):
    out = tmp_path / "r.json"
    assert main(["estimate", str(log_file), "--report", str(out), "--ddr-gbps", "10"]) == 0
    rep = json.loads(out.read_text())
    for key in ("layers", "blocks", "assumptions", "traffic_mb", "est_step_ms", "audio_s", "classes",
                "regtask_lines", "cpu_ops"):
        assert key in rep
    assert rep["assumptions"]["ddr_gbps"] == 10 and rep["regtask_lines"] == 1
    assert rep["audio_s"] is None  # a bare log: no contract
    assert len(rep["layers"]) == 6 and rep["cpu_ops"] == 1
    # RW is the reads; writes are the output tensors (fp16): the Clip over (1,24,1,30720) writes 1440 KB
    clip = next(x for x in rep["layers"] if x["op_type"] == "Clip")
    assert clip["rw_kb"] == 1440.0 and clip["write_kb"] == 1440.0
    assert rep["traffic_mb"] == pytest.approx(rep["rw_mb"] + rep["write_mb"], abs=0.11)
    # the compiler's own bandwidth: (reads + writes) / DDR cycles of the conv rows, at 1 GHz
    moved = (1152 + 1024 + 72 + 4 + 2898 + 1440) * 1024
    assert rep["assumptions"]["compiler_ddr_gbps"] == pytest.approx(moved / (94223 + 3312 + 124881), abs=0.01)


def test_assumptions_printed(log_file, capsys):
    assert main(["estimate", str(log_file), "--npu-mhz", "800"]) == 0
    out = capsys.readouterr().out
    assert "assumptions" in out and "800 MHz" in out and "17 GB/s" in out and "est. time per run" in out


@needs_rknn
@pytest.mark.rknn
def test_rknn_finds_its_log_and_step_audio(tmp_path_factory, tmp_path, monkeypatch):
    rknn = session_rknn(tmp_path_factory)
    e = estimate_path(rknn)
    assert e.source == str(rknn) + ".build.log" and e.rknn == str(rknn)
    assert e.audio_s is None and len(e.layers) == 3  # Conv, Sin, Mul
    # the same file with a step contract in its custom string: audio per step, RTF, cores
    from rkspeech.contracts import rknn_file as C
    from rkspeech.contracts.vocoder import VocoderContract, make_segments

    k = VocoderContract(codes_length=16, num_quantizers=16, codebook_size=2048, head_dim=64, sliding_window=72,
                     rope_theta=10000.0, samples_per_token=1920, sample_rate=24000,
                     segments=make_segments([("kv", (2, 3))]))
    real = C.read_container

    def with_contract(path, expect_target=None):
        c = real(path, expect_target)
        c.custom_string = k.to_json()
        C._read_custom(c)
        return c

    monkeypatch.setattr(C, "read_container", with_contract)
    rep = estimate_path(rknn).to_report()
    assert rep["audio_s"] == pytest.approx(16 * 1920 / 24000)
    assert rep["rtf_by_cores"][1] == pytest.approx(rep["est_step_ms"] / 1280, rel=1e-3)
    assert rep["cores_for_realtime"] == 1
    # the log alone (copied away from its .rknn): no audio, a note says why
    lone = tmp_path / "lone.build.log"
    shutil.copy(find_build_log(rknn), lone)
    e2 = estimate_path(lone)
    assert e2.audio_s is None and any("no .rknn" in n for n in e2.notes)
    assert math.isclose(e2.est_step_ms, e.est_step_ms)


def _one_line_error(argv, capsys, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("rkspeech estimate: error:"), err
    for n in needles:
        assert n in err, err


def test_missing_file(tmp_path, capsys):
    _one_line_error(["estimate", str(tmp_path / "nope.rknn")], capsys, "no such file")


def test_log_without_table(tmp_path, capsys):
    p = tmp_path / "x.build.log"
    p.write_text("I rknn building ...\nI rknn building done.\n")
    _one_line_error(["estimate", str(p)], capsys, "Network Layer Information Table")


def test_rknn_without_log(tmp_path, capsys):
    p = tmp_path / "m.rknn"
    p.write_bytes(b"RKNN" + b"\0" * 100)
    _one_line_error(["estimate", str(p)], capsys, "m.rknn.build.log", "rkspeech convert")


def test_bad_flag_value(log_file, capsys):
    _one_line_error(["estimate", str(log_file), "--ddr-gbps", "0"], capsys, "--ddr-gbps")


def test_build_summary_estimate(log_file, tmp_path):
    from rkspeech.pipelines.vocoder_build import _board_estimate

    assert "no such file" in _board_estimate(tmp_path / "missing.rknn")["error"]
    rknn = tmp_path / "m.rknn"
    rknn.write_bytes(b"RKNN" + b"\0" * 100)
    assert "build log" in _board_estimate(rknn)["error"]  # not fatal for the build
    shutil.copy(log_file, tmp_path / "m.rknn.build.log")
    est = _board_estimate(rknn)  # container unreadable -> no audio, but the figures are there
    assert est["est_step_ms"] > 0 and est["traffic_mb"] > 0 and est["audio_s"] is None


def test_attention_cycles_from_shapes():
    from rkspeech.estimate.steptime import attention_cycles

    # Whisper base self-attention: 8 heads x 64 over 1500 frames: 2 x 8 x 64 x 1500 x 1500 MACs / 512
    assert attention_cycles("exSDPAttention", "(8,64,1,1500),(8,64,1,1500),...", "FLOAT16") == 4_500_000
    assert attention_cycles("exSDPAttention", "(8,64,1,1500),(8,64,1,1500),...", "INT8") == 2_250_000
    assert attention_cycles("Conv", "(8,64,1,1500),(8,64,1,1500)", "FLOAT16") == 0
    assert attention_cycles("exSDPAttention", "(1,2)", "FLOAT16") == 0  # unreadable: not guessed
    la = _layer(5, "exSDPAttention", rw=1.0, name="exSDPAttention:/blocks.0/attn/MatMul_1_2sdpa")
    la.input_shapes = "(8,64,1,1500),(8,64,1,1500),..."
    r = estimate_layers([la]).to_report()
    assert r["cycles_from_shapes"] == 4_500_000 and r["compute_ms"] == pytest.approx(4.5)


def test_build_summary_rows_show_the_estimate():
    from rkspeech.cli.build_vocoder import summary_rows

    conv = {"placement": {"npu_ops": 10, "cpu_ops": 0}, "rknn": {"bytes": 2e6},
            "build": {"seconds": 1.0, "peak_rss_mb": 10, "regtask_overflow_lines": 0}}
    summary = {"target": "rk3588", "B": 16, "first_B": None, "stages": {}, "plan": "plan.json", "seconds": 1.0,
               "export": {"snr_db": {"torch_step": 110.0, "onnxruntime_step": 109.0}, "onnx": {"nodes": 5}},
               "convert": {"main": conv},
               "estimate": {"main": {"est_step_ms": 525.7, "audio_s": 1.28, "traffic_mb": 7407.1,
                                     "rtf_by_cores": {"1": 0.4107, "2": 0.38, "3": 0.3686}}}}
    rows = dict(summary_rows(summary))
    row = rows["main: est. board step (rkspeech estimate)"]
    assert "525.7 ms per 1.28 s" in row and "RTF 1 core 0.411" in row and "3 cores 0.369" in row
    summary["estimate"]["main"] = {"error": "x.rknn: no build log beside it"}
    assert "no build log" in dict(summary_rows(summary))["main: est. board step"]
