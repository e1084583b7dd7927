"""``rkspeech estimate --plan``: the whole text-to-speech plan, every stage from its files.

Synthetic plan folders, no conversion: tiny talker / code predictor step graphs (onnx.helper, the
real contracts), fake .rknn containers carrying vocoder contracts, and build logs in the layer
table format ``steptime`` parses."""

import json
import struct

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from rkspeech.cli import main
from rkspeech.contracts.base import CONTRACT_KEY
from rkspeech.contracts.talker import CODE_PREDICTOR_STEP_MODEL, TalkerContract
from rkspeech.contracts.vocoder import VocoderContract, make_segments
from rkspeech.core.errors import RkspeechError
from rkspeech.estimate.calls import CpuCall, NpuCall, onnx_call
from rkspeech.estimate.plan_inputs import StageInput, _record
from rkspeech.estimate.plan_time import PlanAssumptions, estimate_plan, estimate_stages
from rkspeech.plan.plan import write_plan
from rkspeech.plan.sections import stage_section

H, HD, L = 32, 8, 2
#: bytes a second a CPU stage reads at the runtime's default 2 threads (public 1 / 4 A76 figures, interpolated)
BW2 = PlanAssumptions().cpu_bandwidth(2)[0] * 1e9

_HEAD = """\
I rknn building ...
D RKNN: [20:05:59.943]                          Network Layer Information Table
D RKNN: [20:05:59.943] ----------------------------------------------------------------------
D RKNN: [20:05:59.943] ID   OpType             DataType Target InputShape                               OutputShape            Cycles(DDR/NPU/Total)    RW(KB)       FullName
D RKNN: [20:05:59.943] ----------------------------------------------------------------------
D RKNN: [20:05:59.943] 0    InputOperator      FLOAT16  CPU    \\                                        (1,16,16)              0/0/0                    0            InputOperator:audio_codes
"""
_ROW = ("D RKNN: [20:05:59.943] {i:<4} Conv               FLOAT16  NPU    (1,48,16,1920),(24,48,1,8)               "
        "(1,24,16,1920)         124881/{npu}/{npu}     2898         Conv:/conv_{i}/Conv\n")
_TAIL = """\
D RKNN: [20:05:59.943] ----------------------------------------------------------------------
I rknn building done.
"""


def fake_rknn(path, target, custom):
    """A minimal .rknn container (format 6) the reader accepts (as tests/plan/test_plan.py)."""
    vt_fields = 12
    vtable = struct.pack("<HH", 4 + 2 * vt_fields, 8) + b"".join(
        struct.pack("<H", 4 if i == 11 else 0) for i in range(vt_fields))
    table_at = 8 + len(vtable)
    s = (custom or "").encode()
    table = struct.pack("<i", table_at - 8) + struct.pack("<I", 4)
    blob = struct.pack("<I", table_at) + b"RKNN" + vtable + table + struct.pack("<I", len(s)) + s + b"\0"
    meta = json.dumps({"target_platform": [target], "version": "2.5.0"}).encode()
    data = b"RKNN" + b"\0" * 4 + struct.pack("<QQ", 6, len(blob)) + b"\0" * 40 + blob
    data += struct.pack("<Q", len(meta)) + meta
    path.write_bytes(data)
    return path


def rknn_with_log(path, custom, layers, npu_cycles=1_000_000, target="rk3588"):
    fake_rknn(path, target, custom)
    rows = "".join(_ROW.format(i=i + 1, npu=npu_cycles) for i in range(layers))
    (path.parent / (path.name + ".build.log")).write_text(_HEAD + rows + _TAIL)
    return path


def voc_contract(B):
    return VocoderContract(codes_length=B, num_quantizers=16, codebook_size=2048, head_dim=64, sliding_window=72,
                           rope_theta=10000.0, samples_per_token=1920, sample_rate=24000,
                           segments=make_segments([("kv", (2, 3))]))


def step_graph(path, contract: TalkerContract, ffn: int, *, int4: bool = False):
    """A step graph with the contract's I/O: hidden = (embeds @ W1) @ W2 (W1 [H, ffn]), kv_new from
    the cache; ``int4``: W1 as a MatMulNBits (4-bit blocks of 16 + fp32 scales)."""
    B, h = contract.B, contract.hidden
    shape = list(contract.cache_shape())
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((ffn, h)).astype(np.float32), "W2"),
             numpy_helper.from_array(np.array([shape[0], shape[1], B, shape[3]], np.int64), "kv_shape")]
    nodes = []
    if int4:
        blocks = h // 16
        inits += [numpy_helper.from_array(np.zeros((ffn, blocks, 8), np.uint8), "W1q"),
                  numpy_helper.from_array(np.ones((ffn * blocks,), np.float32), "W1s")]
        nodes.append(helper.make_node("MatMulNBits", ["embeds", "W1q", "W1s"], ["a"], domain="com.microsoft",
                                      K=h, N=ffn, bits=4, block_size=16, accuracy_level=4))
    else:
        inits.append(numpy_helper.from_array(rng.standard_normal((h, ffn)).astype(np.float32), "W1"))
        nodes.append(helper.make_node("MatMul", ["embeds", "W1"], ["a"]))
    nodes += [helper.make_node("MatMul", ["a", "W2"], ["hidden"]),
              helper.make_node("ReduceMean", ["cache"], ["m"], axes=[2], keepdims=1),
              helper.make_node("Expand", ["m", "kv_shape"], ["kv_new"])]
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, f, s) for n, s in contract.input_shapes().items()]
    outs = [helper.make_tensor_value_info(n, f, s) for n, s in contract.output_shapes().items()]
    m = helper.make_model(helper.make_graph(nodes, "step", ins, outs, inits),
                          opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    helper.set_model_props(m, {CONTRACT_KEY: contract.to_json()})
    import onnx

    onnx.save(m, str(path))
    return path


def talker(B, cap=64, model=None):
    kw = {"model": model} if model else {}
    return TalkerContract(hidden=H, layers=L, heads=4, kv_heads=4, head_dim=HD, capacity=cap, B=B,
                          rope_theta=1e6, rms_norm_eps=1e-6, **kw)


def make_plan(d, *, ffn=64, cp_ffn=32, tts=True, cp_rknn=False, int4=False, voc_layers=10, extra=None, build=None):
    d.mkdir(parents=True, exist_ok=True)
    first = rknn_with_log(d / "voc_first.rknn", voc_contract(4).to_json(), layers=voc_layers // 2)
    mainr = rknn_with_log(d / "voc_main.rknn", voc_contract(16).to_json(), layers=voc_layers)
    stages = {}
    if tts:
        pre = step_graph(d / "talker_prefill.onnx", talker(16), ffn, int4=int4)
        dec = step_graph(d / "talker_decode.onnx", talker(1), ffn, int4=int4)
        stages["talker"] = stage_section(placement="cpu-fp32", target=None, base=d, contract=talker(1).to_dict(),
                                         artifacts={"prefill": {"onnx": pre}, "decode": {"onnx": dec}})
        cpc = talker(1, cap=16, model=CODE_PREDICTOR_STEP_MODEL)
        cp = step_graph(d / "cp_step.onnx", cpc, cp_ffn, int4=int4)
        files = {"onnx": cp}
        if cp_rknn:
            files["rknn"] = rknn_with_log(d / "cp_step.rknn", cpc.to_json(), layers=20)
        stages["code_predictor"] = stage_section(placement="npu" if cp_rknn else "cpu-fp32", target="rk3588", base=d,
                                                 contract=cpc.to_dict(), artifacts={"step": files})
        for name, sec in (extra or {}).items():
            stages[name].update({k: v for k, v in sec.items() if k != "artifacts"})
            stages[name]["artifacts"].update(sec.get("artifacts", {}))
    return write_plan(d / "plan.json", placement="npu", target="rk3588",
                      contracts={"main": voc_contract(16), "first": voc_contract(4)},
                      rknn={"main": mainr, "first": first}, stages=stages, extra=build)


def by_stage(rep):
    return {r["stage"]: r for r in rep["stages"]}


# ---- CPU stages from the files -----------------------------------------------------------------
def test_cpu_stage_time_is_its_bytes_over_bandwidth(tmp_path):
    a = PlanAssumptions()
    rep = estimate_plan(make_plan(tmp_path / "p", ffn=64), a)
    dec = by_stage(rep)["talker decode"]
    weights = 4 * (H * 64 + 64 * H) + 8 * 4  # fp32 W1, W2 + the int64 Expand shape
    cache = 2 * L * 4 * 64 * HD * 4  # [2L, heads, capacity, hd] fp32
    assert dec["weight_bytes"] == weights
    assert dec["cache_bytes"] == cache * a.cache_passes_flat  # flat cache: split, then read
    assert dec["ms_per_call"] == pytest.approx((weights + 3 * cache) / BW2 * 1e3)
    assert dec["bound"] == "memory" and dec["variant"] == "fp32"
    assert dec["calls_per_audio_s"] == pytest.approx(12.5)  # 24000 / 1920 from the vocoder contract
    assert dec["ms_per_audio_s"] == pytest.approx(12.5 * dec["ms_per_call"])
    cp = by_stage(rep)["code predictor"]
    assert cp["calls_per_audio_s"] == pytest.approx(16 * 12.5)  # the step contract's capacity a frame


def test_weight_size_changes_cpu_time_proportionally(tmp_path):
    a = PlanAssumptions(cache_passes_flat=0.0 + 1e-9)  # weights alone (the cache kept out of the ratio)
    small = by_stage(estimate_plan(make_plan(tmp_path / "s", ffn=64), a))["talker decode"]
    big = by_stage(estimate_plan(make_plan(tmp_path / "b", ffn=256), a))["talker decode"]
    wb_small, wb_big = small["weight_bytes"] - 32, big["weight_bytes"] - 32
    assert wb_big == 4 * wb_small
    assert (big["ms_per_call"] - 32 / BW2 * 1e3) / (small["ms_per_call"] - 32 / BW2 * 1e3) == pytest.approx(4, rel=1e-3)


def test_int4_weights_read_as_stored(tmp_path):
    c = talker(1)
    fp = onnx_call(step_graph(tmp_path / "f.onnx", c, 64))
    q = onnx_call(step_graph(tmp_path / "q.onnx", c, 64, int4=True))
    assert fp.variant == "fp32" and q.variant == "int4" and q.int8_compute
    # W1: 32 x 64 fp32 (8192 B) -> 64 x 2 blocks x 8 B packed + 128 fp32 scales (1536 B)
    assert fp.weight_bytes - q.weight_bytes == 8192 - (64 * 2 * 8 + 64 * 2 * 4)
    assert q.macs == fp.macs == 2 * H * 64
    # prefill B=16: the output shape gives 16 rows (shape inference), so 16x the MACs
    pre = onnx_call(step_graph(tmp_path / "p.onnx", talker(16), 64))
    assert pre.macs == 16 * fp.macs and pre.weight_bytes == fp.weight_bytes


def test_conv_macs_from_shapes(tmp_path):
    """A CPU vocoder is priced by its conv MACs: numel(output) x Cin x k."""
    import onnx

    w = numpy_helper.from_array(np.zeros((8, 4, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1])
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 100])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 100])], [w])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "c.onnx"))
    c = onnx_call(tmp_path / "c.onnx")
    assert c.macs == 8 * 100 * 4 * 3 and c.weight_bytes == 8 * 4 * 3 * 4


def test_plan_records_are_read_tolerantly(tmp_path):
    raw = {"talker": {"impl": "onnx", "quantization": {"variant": "int4", "bits": 4}, "placement": "cpu-int4"},
           "code_predictor": {"quantization": "junk", "placement": 7}}
    assert _record(raw, "talker") == ("int4", "cpu-int4")
    assert _record(raw, "code_predictor") == (None, None)
    assert _record(raw, "absent") == (None, None)
    # a stage placed cpu-int4 without its quantization record: the plan loader refuses it
    plan = make_plan(tmp_path / "p", extra={"talker": {"placement": "cpu-int4"}})
    with pytest.raises(RkspeechError, match="placed cpu-int4 but has no quantization record") as exc:
        estimate_plan(plan)
    assert "\n" not in str(exc.value)


# ---- NPU stages --------------------------------------------------------------------------------
def test_npu_stage_is_layer_table_plus_dispatch(tmp_path):
    plan = make_plan(tmp_path / "p", cp_rknn=True, voc_layers=10)
    rep = estimate_plan(plan)
    voc = by_stage(rep)["vocoder main"]
    cp = by_stage(rep)["code predictor"]
    assert voc["unit"] == "npu" and voc["layers"] == 10
    assert voc["layer_table_ms"] == pytest.approx(10 * 1.0)  # 1 M NPU cycles a layer at 1 GHz
    assert voc["ms_per_call"] == pytest.approx(10.0 + 10 * 0.019)
    assert cp["unit"] == "npu" and cp["ms_per_call"] == pytest.approx(20 * 1.0 + 20 * 0.019)
    # the main step runs the frames the first step did not: (125 - 4) frames / 16 per 10 s
    assert voc["calls_per_audio_s"] == pytest.approx((125 - 4) / 16 / 10)
    assert by_stage(rep)["vocoder first"]["calls_per_audio_s"] == pytest.approx(0.1)
    off = by_stage(estimate_plan(plan, PlanAssumptions(layer_dispatch_us=0)))["vocoder main"]
    assert off["ms_per_call"] == pytest.approx(10.0)


# ---- the pipeline ------------------------------------------------------------------------------
def _stages(cpu_ms_call, npu_ms_call):
    """A decode on the CPU (1 call a frame) and a vocoder on the NPU (B=1: 1 call a frame)."""
    gbps = BW2 / 1e9
    return [StageInput("talker decode", CpuCall(weight_bytes=cpu_ms_call * gbps * 1e6), per_frame=1.0),
            StageInput("vocoder main", NpuCall(est_ms=npu_ms_call, layers=0, traffic_bytes=0.0), B=1)]


def test_units_overlap_max_and_the_limiting_stage():
    a = PlanAssumptions(utterance_s=1000.0, ddr_shared_gbps=1e6)
    rep = estimate_stages(_stages(40.0, 10.0), 12.5, a)
    assert rep["units"]["cpu"]["ms_per_audio_s"] == pytest.approx(500.0)
    assert rep["units"]["npu"]["ms_per_audio_s"] == pytest.approx(125.0 * (12500 - 0) / 12500, rel=1e-3)
    assert rep["steady_ms_per_audio_s"] == pytest.approx(500.0)  # max, not 625
    assert rep["rtf"] == pytest.approx(0.5) and rep["limiting_stage"] == "talker decode"
    rep2 = estimate_stages(_stages(4.0, 60.0), 12.5, a)
    assert rep2["steady_ms_per_audio_s"] == pytest.approx(750.0) and rep2["limiting_stage"] == "vocoder main"


def test_cpu_stages_add_up_and_ddr_is_shared():
    a = PlanAssumptions(utterance_s=1000.0)
    two = _stages(40.0, 10.0) + [StageInput("code predictor", CpuCall(weight_bytes=20 * BW2 / 1e3), per_frame=1.0)]
    rep = estimate_stages(two, 12.5, a)
    assert rep["units"]["cpu"]["ms_per_audio_s"] == pytest.approx(750.0)  # (40 + 20) x 12.5
    assert rep["limiting_stage"] == "talker decode"
    # the CPU's bytes (60 ms x 14.7 GB/s a frame = 11 GB/s) over a shared DDR of 10 GB/s: DDR limits
    rep2 = estimate_stages(two, 12.5, PlanAssumptions(utterance_s=1000.0, ddr_shared_gbps=10.0))
    assert rep2["limiting_stage"] == "shared DDR bandwidth"
    assert rep2["steady_ms_per_audio_s"] == pytest.approx(60 * BW2 / 1e3 * 12.5 / 10e9 * 1e3, rel=1e-3)


def test_time_to_first_audio(tmp_path):
    rep = estimate_plan(make_plan(tmp_path / "p"))
    s, t = by_stage(rep), rep["time_to_first_audio"]
    per_frame = s["talker decode"]["ms_per_call"] + 16 * s["code predictor"]["ms_per_call"]
    want = 3 * s["talker prefill"]["ms_per_call"] + 4 * per_frame + s["vocoder first"]["ms_per_call"]
    assert t["frames"] == 4 and t["ms"] == pytest.approx(want)  # ceil(40 / 16) = 3 prefill calls


def test_start_graph_takes_two_positions_in_one_call(tmp_path):
    """A code predictor with a start graph (pipelines.cpu_start): 14 step calls + 1 start call a
    frame instead of 16 step calls, in the CPU total, the time to first audio and the peer row."""
    from rkspeech.estimate.plan_time import _g, peer_check

    bare = estimate_plan(make_plan(tmp_path / "a"))
    d = tmp_path / "b"
    d.mkdir()
    step_graph(d / "cp_start.onnx", talker(2, cap=16, model=CODE_PREDICTOR_STEP_MODEL), 32)
    rep = estimate_plan(make_plan(d, extra={"code_predictor": {"artifacts": {"start": {"onnx": "cp_start.onnx"}}}}))
    s = by_stage(rep)
    assert s["code predictor"]["calls_per_audio_s"] == pytest.approx(14 * 12.5)
    assert s["code predictor start"]["calls_per_audio_s"] == pytest.approx(12.5)
    cp_frame = 14 * s["code predictor"]["ms_per_call"] + s["code predictor start"]["ms_per_call"]
    assert cp_frame < 16 * by_stage(bare)["code predictor"]["ms_per_call"]  # one weight read a frame fewer
    assert rep["time_to_first_audio"]["per_frame_ms"] == pytest.approx(s["talker decode"]["ms_per_call"] + cp_frame)
    peer = dict(peer_check(rep))["code predictor, ms a frame"]
    assert peer.startswith(f"ours {_g(cp_frame)} "), peer


def test_host_heads_are_a_cpu_stage_when_the_plan_records_them(tmp_path):
    bare = estimate_plan(make_plan(tmp_path / "a"))
    assert "host heads" not in by_stage(bare) and any("host loop's heads" in n for n in bare["notes"])
    rec = {"codec_head": [3072, H], "code_predictor_heads": [15, 2048, H], "dtype": "float32",
           "bytes_per_frame": 4 * (3072 * H + 15 * 2048 * H)}
    rep = estimate_plan(make_plan(tmp_path / "b", build={"host_heads": rec}))
    heads = by_stage(rep)["host heads"]
    assert heads["unit"] == "cpu" and heads["bytes_per_call"] == rec["bytes_per_frame"]
    assert heads["calls_per_audio_s"] == pytest.approx(12.5)  # once a frame
    assert heads["ms_per_call"] == pytest.approx(rec["bytes_per_frame"] / 12e9 * 1e3)  # numpy: 1 thread, 1 A76
    cpu = rep["units"]["cpu"]["ms_per_audio_s"]
    assert cpu == pytest.approx(bare["units"]["cpu"]["ms_per_audio_s"] + heads["ms_per_audio_s"])
    per_frame = bare["time_to_first_audio"]["per_frame_ms"] + heads["ms_per_call"]
    assert rep["time_to_first_audio"]["per_frame_ms"] == pytest.approx(per_frame)


def test_quantized_head_graphs_are_priced_from_their_files(tmp_path):
    from rkspeech.contracts.head import HeadContract
    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.export.head_onnx import export_head_onnx

    d = tmp_path / "p"
    d.mkdir()
    rng = np.random.default_rng(0)
    heads = {}
    for j in range(1, 16):
        src = export_head_onnx(rng.standard_normal((256, H)).astype(np.float32), HeadContract(j, H, 256),
                               d / f"head{j}.onnx")
        heads[str(j)] = d / f"head{j}.int4.onnx"
        quantize_step_graph(src, heads[str(j)], CpuQuantOptions("int4", block_size=16))
    rec = {"codec_head": [3072, H], "code_predictor_heads": [15, 256, H], "dtype": "float32",
           "bytes_per_frame": 4 * (3072 * H + 15 * 256 * H)}
    plan = make_plan(d, build={"host_heads": rec},
                     extra={"code_predictor": {"artifacts": {f"head{j}": {"onnx": p.name} for j, p in heads.items()}}})
    row = by_stage(estimate_plan(plan))["host heads"]
    per_head = onnx_call(heads["1"], positions=1).weight_bytes  # 4-bit blocks + scales + zero points
    assert per_head < 4 * 256 * H / 4  # under a quarter of the fp32 head
    assert row["bytes_per_call"] == 4 * 3072 * H + 15 * per_head  # the codec head stays fp32
    assert "int4" in row["variant"]


def test_speak_schedule_prices_small_vocoder_steps_throughout(tmp_path):
    rep = estimate_plan(make_plan(tmp_path / "p", voc_layers=40))
    first = by_stage(rep)["vocoder first"]
    sp = rep["speak_schedule"]
    # speak runs the first (B=4) graph for every 4 frames: 12.5 / 4 calls a second, main unused
    assert sp["vocoder_ms_per_audio_s"] == pytest.approx(first["ms_per_call"] * 12.5 / 4)
    npu_main = rep["units"]["npu"]["ms_per_audio_s"]
    assert sp["units"]["npu"] == pytest.approx(sp["vocoder_ms_per_audio_s"]) and sp["units"]["npu"] != npu_main
    assert sp["units"]["cpu"] == pytest.approx(rep["units"]["cpu"]["ms_per_audio_s"])


# ---- the command --------------------------------------------------------------------------------
def test_cli_prints_every_assumption_and_writes_the_report(tmp_path, capsys):
    plan = make_plan(tmp_path / "p")
    r = tmp_path / "r.json"
    assert main(["estimate", "--plan", str(plan), "--report", str(r), "--dispatch-us", "25"]) == 0
    out = capsys.readouterr().out
    for needle in ("nsbb/rknn-stt", "Turing Pi", "HOST-RK3588.md", "by threads: 1 -> 12.0", "talker decode", "vocoder main", "real-time factor",
                   "time to first audio", "limited by", "MasterVVK"):
        assert needle in out, needle
    rep = json.loads(r.read_text())
    assert rep["assumptions"]["layer_dispatch_us"] == 25
    assert {x["stage"] for x in rep["stages"]} == {"talker prefill", "talker decode", "code predictor",
                                                    "vocoder first", "vocoder main"}
    assert rep["rtf"] == pytest.approx(rep["steady_ms_per_audio_s"] / 1000)
    assert rep["sensitivity"] and rep["limiting_stage"]
    f = rep["npu_board_factor_check"]  # every NPU layer 6.7x slower: the NPU vocoder is now the limit
    assert f["factor"] == 6.7 and f["limiting_stage"] == "vocoder main" and f["rtf"] > rep["rtf"]


def _one_line_error(argv, capsys, *needles):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("rkspeech estimate: error:"), err
    for n in needles:
        assert n in err, err


def test_bad_inputs_are_one_line(tmp_path, capsys):
    _one_line_error(["estimate", "--plan", str(tmp_path / "nope.json")], capsys, "does not exist")
    _one_line_error(["estimate"], capsys, "--plan")
    plan = make_plan(tmp_path / "p")
    _one_line_error(["estimate", "--plan", str(plan), "--chip", "rk3576"], capsys, "rk3588", "--target")
    _one_line_error(["estimate", "--plan", str(plan), "--target", "rk3576"], capsys, "built for rk3588")
    _one_line_error(["estimate", "--plan", str(plan), "--a76-gbps", "0"], capsys, "--a76-gbps")
    (tmp_path / "p" / "voc_main.rknn.build.log").unlink()
    _one_line_error(["estimate", "--plan", str(plan)], capsys, "voc_main.rknn.build.log")


def test_plan_without_tts_stages_estimates_the_vocoder_alone(tmp_path, capsys):
    plan = make_plan(tmp_path / "p", tts=False)
    assert main(["estimate", "--plan", str(plan)]) == 0
    cap = capsys.readouterr()
    assert "no talker / code_predictor stage" in cap.err and cap.err.count("no talker") == 1
    rep = estimate_plan(plan)
    assert set(by_stage(rep)) == {"vocoder first", "vocoder main"}
    assert rep["limiting_stage"] == "vocoder main"


def test_layer_count_needs_a_log_not_a_guess(tmp_path):
    plan = make_plan(tmp_path / "p", cp_rknn=True)
    (tmp_path / "p" / "cp_step.rknn.build.log").unlink()
    with pytest.raises(RkspeechError, match="cp_step.rknn.build.log"):
        estimate_plan(plan)


# ---- the published figures recorded in docs/ ----------------------------------------------------
def _bench():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_estimate_plan.py"
    spec = importlib.util.spec_from_file_location("bench_estimate_plan", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_published_all_npu_reproduces_the_budget():
    """docs/tts-build.md: talker 1,350 + code predictor step 2,184 + phase vocoder 239 ms per audio
    second (ideal, no dispatch); the plan model adds the prefill amortised over 10 s."""
    b = _bench()
    a = PlanAssumptions()
    rep = b.summarize("npu", b.npu_plan(a), PlanAssumptions(layer_dispatch_us=0.0))
    s = by_stage(rep)
    assert s["talker decode"]["ms_per_audio_s"] == pytest.approx(1350.0)
    assert s["code predictor"]["ms_per_audio_s"] == pytest.approx(2184.0)
    assert s["vocoder main"]["ms_per_audio_s"] == pytest.approx(239.3, abs=0.1)
    assert rep["steady_ms_per_audio_s"] == pytest.approx(3773 + s["talker prefill"]["ms_per_audio_s"], rel=1e-3)
    assert rep["limiting_stage"] == "code predictor"
    best = b.summarize("cpu-int4", b.cpu_plan("int4", a), a)
    assert best["limiting_unit"].startswith("cpu") and best["units"]["npu"]["ms_per_audio_s"] < 300


def vocoder_graph(path, k: VocoderContract, channels=8):
    """A vocoder step graph with the contract's I/O: a Conv over the codes, a ConvTranspose to
    the samples (stride = samples per token), the cache passed through."""
    import onnx

    B = k.codes_length
    w = numpy_helper.from_array(np.zeros((channels, k.num_quantizers, 3), np.float32), "w")
    wt = numpy_helper.from_array(np.zeros((channels, 1, k.samples_per_token), np.float32), "wt")
    nodes = [helper.make_node("Conv", ["audio_codes", "w"], ["h"], pads=[1, 1]),
             helper.make_node("ConvTranspose", ["h", "wt"], ["audio_values"], strides=[k.samples_per_token]),
             helper.make_node("Identity", ["cache_in"], ["cache_out"])]
    f = TensorProto.FLOAT
    ins = [helper.make_tensor_value_info(n, f, s) for n, s in k.input_shapes().items()]
    outs = [helper.make_tensor_value_info(n, f, s) for n, s in k.output_shapes().items()]
    m = helper.make_model(helper.make_graph(nodes, "voc", ins, outs, [w, wt]),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    helper.set_model_props(m, {CONTRACT_KEY: k.to_json()})
    onnx.save(m, str(path))
    return path


def test_vocoder_on_the_cpu_is_priced_by_its_convs(tmp_path, capsys):
    k = voc_contract(4)
    g = vocoder_graph(tmp_path / "voc.onnx", k)
    plan = write_plan(tmp_path / "plan.json", placement="cpu-fp32", target=None, contracts={"main": k}, onnx={"main": g})
    rep = estimate_plan(plan)
    voc = by_stage(rep)["vocoder main"]
    assert voc["unit"] == "cpu" and voc["calls_per_audio_s"] == pytest.approx(12.5 / 4)
    assert voc["detail"]["macs_per_call"] == 8 * 4 * 16 * 3 + 8 * 4 * 1920  # conv + transposed conv
    assert voc["weight_bytes"] == (8 * 16 * 3 + 8 * 1920) * 4
    assert rep["limiting_stage"] == "vocoder main" and "cpu" in rep["units"] and "npu" not in rep["units"]
    assert main(["estimate", "--plan", str(plan)]) == 0
    err = capsys.readouterr().err
    assert "vocoder on the CPU" in err and "no talker / code_predictor stage" in err


# ---- CPU bandwidth by the threads a stage runs with (issue 40) -------------------------------------
def test_cpu_stages_priced_at_the_bandwidth_of_their_threads(tmp_path):
    """Public RK3588 STREAM: one A76 ~12 GB/s, four ~20 GB/s; a memory-bound decode with the plan's
    ``threads`` 1 takes 20/12 of the time it takes with 4, and says which figure it used."""
    a = PlanAssumptions(cache_passes_flat=1.0)
    one = by_stage(estimate_plan(make_plan(tmp_path / "1", extra={"talker": {"threads": 1}}), a))
    four = by_stage(estimate_plan(make_plan(tmp_path / "4", extra={"talker": {"threads": 4}}), a))
    d1, d4 = one["talker decode"], four["talker decode"]
    assert (d1["threads"], d1["cpu_gbps"], d4["threads"], d4["cpu_gbps"]) == (1, 12.0, 4, 20.0)
    assert d1["bound"] == d4["bound"] == "memory"
    assert d1["ms_per_call"] / d4["ms_per_call"] == pytest.approx(20 / 12)
    assert d1["ms_per_call"] == pytest.approx(d1["bytes_per_call"] / 12e9 * 1e3)
    # the code predictor records no threads: the runtime's default 2, interpolated
    cp = one["code predictor"]
    assert cp["threads"] == 2 and cp["cpu_gbps"] == pytest.approx(12 + 8 / 3)
    assert "interpolated between 1 (12) and 4 (20 GB/s)" in cp["cpu_gbps_how"]
    # the prefill gets at least the runtime's 2 threads (talker_backend), whatever the plan says
    assert one["talker prefill"]["threads"] == 2
    # 3 threads: interpolated; more than 4: the 4-core figure
    assert PlanAssumptions().cpu_bandwidth(3)[0] == pytest.approx(12 + 16 / 3)
    assert PlanAssumptions().cpu_bandwidth(8)[0] == 20.0


def test_callers_threads_and_a_flat_figure_override_the_plan(tmp_path):
    plan = make_plan(tmp_path / "p", extra={"talker": {"threads": 1}})
    rep = estimate_plan(plan, PlanAssumptions(cpu_threads=4))
    s = by_stage(rep)
    assert s["talker decode"]["cpu_gbps"] == s["code predictor"]["cpu_gbps"] == 20.0
    assert rep["assumptions"]["cpu_threads"] == 4
    flat = by_stage(estimate_plan(plan, PlanAssumptions(cpu_gbps=17.0)))
    assert {flat[n]["cpu_gbps"] for n in ("talker decode", "code predictor")} == {17.0}
    for bad in (0, 1.5):
        with pytest.raises(RkspeechError, match="--threads must be"):
            PlanAssumptions(cpu_threads=bad).check()


def test_cli_threads_says_which_figure_it_used(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # the table's rows unwrapped
    plan = make_plan(tmp_path / "p")
    rows = {}
    for n in ("1", "4"):
        r = tmp_path / f"r{n}.json"
        assert main(["estimate", "--plan", str(plan), "--threads", n, "--report", str(r)]) == 0
        out, err = capsys.readouterr()
        gbps = {"1": "12.0", "4": "20.0"}[n]
        assert f"{n} thread(s) at {gbps} GB/s" in out
        assert f"talker decode {n} thread(s) -> {gbps} GB/s" in err and "HOST-RK3588.md" in err
        rows[n] = by_stage(json.loads(r.read_text()))["talker decode"]
    assert rows["1"]["ms_per_call"] / rows["4"]["ms_per_call"] == pytest.approx(20 / 12)
    _one_line_error(["estimate", "--plan", str(plan), "--threads", "0"], capsys, "--threads")
