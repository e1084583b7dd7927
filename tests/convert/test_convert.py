import json

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.convert.conversion import convert

from rkfixtures import conv_relu_sin, graph, kill_parent_expect_child_gone, session_result, vi

pytestmark = pytest.mark.rknn


def test_convert_report_fields(tmp_path_factory):
    res = session_result(tmp_path_factory)
    r = res.to_report()
    assert r["target"] == "rk3588" and r["dtype"] == "fp16"
    assert r["rknn"]["bytes"] > 1000 and r["rknn"]["path"].endswith(".rknn")
    assert r["build"]["seconds"] > 0 and r["build"]["peak_rss_mb"] > 50
    assert r["build"]["regtask_overflow_lines"] == 0
    with open(r["build"]["log"]) as f:
        assert "Network Layer Information Table" in f.read()  # fd-level capture of the C table
    p = r["placement"]
    # Conv(+Relu fused) and Mul on the NPU; the Sin on the CPU, in the middle, mapped to ONNX
    assert p["npu_ops"] == 2 and p["cpu_ops"] == 1 and p["io_ops"] == 2
    assert p["cpu_op_types"] == {"Sin": 1}
    (sin,) = p["cpu_op_list"]
    assert sin["onnx_node"] == "sin0" and sin["output_shapes"] == "(1,8,16,16)"
    assert sin["position"] == "middle"
    assert p["crosscheck"]["status"] == "ok"  # log targets == per-node bytes in the .rknn
    json.dumps(r)


def test_no_sin_all_npu(tmp_path):
    import tempfile
    from pathlib import Path

    def toolkit_copies():  # rknn-toolkit2's build writes a check.rknn into a mkdtemp() folder
        return {p.parent for p in Path(tempfile.gettempdir()).glob("tmp*/check.rknn")}

    before = toolkit_copies()
    onnx_path = conv_relu_sin(tmp_path / "nosin.onnx", with_sin=False)
    res = convert(onnx_path, tmp_path / "nosin.rknn", target="rk3588", show_progress=False)
    assert res.to_report()["placement"]["cpu_ops"] == 0
    assert toolkit_copies() == before  # the child's TMPDIR is its work folder, removed after
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nosin.onnx", "nosin.rknn", "nosin.rknn.build.log"]


def test_child_signal_keeps_previous_artifact(tmp_path, monkeypatch):
    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    out = tmp_path / "m.rknn"
    out.write_bytes(b"previous good artifact")
    monkeypatch.setenv("RKSPEECH_TEST_CHILD_SIGNAL", "SIGKILL")
    with pytest.raises(RkspeechError, match=r"SIGKILL.*build log: .*m\.rknn\.build\.log"):
        convert(onnx_path, out, target="rk3588", show_progress=False)
    assert out.read_bytes() == b"previous good artifact"
    monkeypatch.setenv("RKSPEECH_TEST_CHILD_SIGNAL", "SIGSEGV")
    with pytest.raises(RkspeechError, match="SIGSEGV"):
        convert(onnx_path, out, target="rk3588", show_progress=False)
    assert out.read_bytes() == b"previous good artifact"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # temp dir cleaned


def test_timeout(tmp_path, monkeypatch):
    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    monkeypatch.setenv("RKSPEECH_TEST_CHILD_SLEEP", "60")
    with pytest.raises(RkspeechError, match="timed out after 3 s"):
        convert(onnx_path, tmp_path / "m.rknn", target="rk3588", timeout=3, show_progress=False)
    assert not (tmp_path / "m.rknn").exists()


def test_memory_limit(tmp_path):
    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    with pytest.raises(RkspeechError, match=r"exceeded the memory limit of 50 MB \(in .*peak RSS.*build log"):
        convert(onnx_path, tmp_path / "m.rknn", target="rk3588", memory_limit_mb=50, show_progress=False)
    assert not (tmp_path / "m.rknn").exists()


def test_child_helpers_name_the_death_and_the_error():
    import signal

    from rkspeech.core.child import death_message, last_error_line

    assert death_message(-signal.SIGKILL) == "killed by SIGKILL (often the kernel's out-of-memory killer)"
    assert death_message(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert death_message(3) == "exited with code 3"
    log = ("E RKNN: [1] load_onnx: unsupported op Frobnicate\n"
           "\x1b[1;31mE RKNN: REGTASK: The bit width of field value exceeds the limit\x1b[0m\n"
           "I RKNN: done\n")
    assert last_error_line(log) == "E RKNN: [1] load_onnx: unsupported op Frobnicate"
    assert last_error_line("ValueError: bad shape\nI fine") == "ValueError: bad shape"
    assert last_error_line("I all good") is None


def test_failed_build_is_one_error(tmp_path):
    from onnx import helper

    # an op the toolkit cannot load: a custom-domain node
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="example.custom")
    m = graph([node], [vi("x", [1, 4])], [vi("y", [1, 4])])
    m.opset_import.append(helper.make_opsetid("example.custom", 1))
    import onnx

    m.ir_version = 8
    onnx.save(m, str(tmp_path / "bad.onnx"))
    with pytest.raises(RkspeechError, match="failed.*build log"):
        convert(tmp_path / "bad.onnx", tmp_path / "bad.rknn", target="rk3588", show_progress=False)


def test_argument_errors(tmp_path):
    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    with pytest.raises(RkspeechError, match="1024"):
        convert(onnx_path, tmp_path / "m.rknn", target="rk3588", custom_string="x" * 1025)
    with pytest.raises(RkspeechError, match="unknown target"):
        convert(onnx_path, tmp_path / "m.rknn", target="rk9999")
    with pytest.raises(RkspeechError, match="dataset"):
        convert(onnx_path, tmp_path / "m.rknn", target="rk3588", dtype="int8")


def test_regtask_lines_counted(tmp_path):
    import numpy as np
    from onnx import helper, numpy_helper

    # measured: C=96, k=7, dilation 9, T=2048 -> 28,666 REGTASK lines on rk3588 fp16 (~3 s)
    w = numpy_helper.from_array((np.random.RandomState(0).randn(96, 96, 7) * 0.1).astype(np.float32), "W")
    node = helper.make_node("Conv", ["x", "W"], ["y"], name="dconv", dilations=[9], pads=[27, 27])
    from rkfixtures import save

    p = save(graph([node], [vi("x", [1, 96, 2048])], [vi("y", [1, 96, 2048])], [w]), tmp_path / "d.onnx")
    res = convert(p, tmp_path / "d.rknn", target="rk3588", show_progress=False)
    assert res.to_report()["build"]["regtask_overflow_lines"] > 1000


def test_cli_contract_custom_string_and_fail_on_cpu(tmp_path, capsys):
    import onnx

    from rkspeech.cli import main
    from rkspeech.contracts.base import CONTRACT_KEY

    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    m = onnx.load(str(onnx_path))
    contract = ('{"format":"rkspeech-step/1","model":"qwen3-tts-vocoder","formulation":"seed","B":4,'
                '"Q":16,"codebook_size":2048,"head_dim":64,"sliding_window":72,"rope_theta":10000.0,'
                '"samples_per_token":1920,"sample_rate":24000,"N":6,"segments":[["kv",[2,3]]]}')
    onnx.helper.set_model_props(m, {CONTRACT_KEY: contract})
    onnx.save(m, str(onnx_path))
    report = tmp_path / "r.json"
    rc = main(["convert", str(onnx_path), "--target", "rk3588", "--report", str(report), "--fail-on-cpu"])
    assert rc == 2 and "CPU" in capsys.readouterr().err
    data = json.loads(report.read_text())
    assert data["rknn"]["has_contract"] is True
    out = tmp_path / "m_rk3588.rknn"  # default output name
    assert data["rknn"]["path"] == str(out)
    from rkspeech.contracts.rknn_file import read_container

    assert read_container(out).contract.codes_length == 4


def test_layer_table_columns_by_chip():
    """rk3588 and rk3576 tables (the latter with a SparseRatio column, blank on I/O rows)."""
    from rkspeech.convert.placement import parse_log_lines

    head = ("D RKNN: [18:20:17.538] {}\n" * 2).format(
        "Network Layer Information Table", "-" * 20)
    rk3588 = head + (
        "D RKNN: [1] ID   OpType  DataType Target InputShape OutputShape Cycles(DDR/NPU/Total) RW(KB) FullName\n"
        "D RKNN: [1] 0    InputOperator FLOAT16 CPU \\ (1,16,16) 0/0/0 0 InputOperator:audio_codes\n"
        "D RKNN: [1] 1    Conv FLOAT16 NPU (1,16,1,16),(8,16,1,1) (1,8,1,16) 4158/4096/4158 64 Conv:/codebook/Conv\n"
        "D RKNN: [1] " + "-" * 20 + "\n")
    rk3576 = head + (
        "D RKNN: [1] ID   OpType  DataType Target InputShape OutputShape Cycles(DDR/NPU/Total) SparseRatio RW(KB) FullName\n"
        "D RKNN: [1] 0    InputOperator FLOAT16 CPU \\ (1,16,16) 0/0/0 0 InputOperator:audio_codes\n"
        "D RKNN: [1] 1    ConvAdd FLOAT16 NPU (1,3072,1,16),(512,3072,1,1),... (1,512,1,16) 438956/49152/438956 0% 3184 Conv:/codebook/Conv_1_tile0_ConvAdd\n"
        "D RKNN: [1] " + "-" * 20 + "\n")
    (t88,), _ = parse_log_lines(rk3588.splitlines(True))
    (t76,), _ = parse_log_lines(rk3576.splitlines(True))
    assert [la.full_name for la in t88] == ["InputOperator:audio_codes", "Conv:/codebook/Conv"]
    assert (t88[1].cycles, t88[1].rw_kb) == (4158, 64.0)
    assert [la.full_name for la in t76] == ["InputOperator:audio_codes", "Conv:/codebook/Conv_1_tile0_ConvAdd"]
    assert (t76[1].cycles, t76[1].rw_kb, t76[1].target) == (438956, 3184.0, "NPU")


def test_sigkilled_parent_takes_its_converter_child_and_the_next_conversion_sweeps_its_folder(tmp_path):
    """SIGKILL of a build (no ``finally`` runs) left the rknn-toolkit2 child converting and its
    ``.tmp`` work folder behind (issue 37): the child now dies with its parent
    (``core.orphans.die_with_parent``) and the next conversion into that folder removes the folder
    (its owner lock is free: ``core.workdirs.sweep_stale_workdirs``); a live owner's folder stays."""
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    import psutil

    from rkspeech.core.workdirs import make_workdir, sweep_stale_workdirs

    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    code = ("import sys; from rkspeech.convert.conversion import convert; "
            "convert(sys.argv[1], sys.argv[2], target='rk3588', show_progress=False)")
    env = {**os.environ, "RKSPEECH_TEST_CHILD_SLEEP": "60",
           "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    parent = subprocess.Popen([sys.executable, "-c", code, str(onnx_path), str(tmp_path / "m.rknn")], env=env)
    try:
        deadline, child = time.monotonic() + 60, None
        while child is None and time.monotonic() < deadline:
            kids = [c for c in psutil.Process(parent.pid).children() if "converter_child" in " ".join(c.cmdline())]
            child = kids[0] if kids else None
            time.sleep(0.1)
        assert child is not None, "no converter child started"
        time.sleep(0.5)  # let it get past its start
        kill_parent_expect_child_gone(parent, child, "converter child")
    finally:
        parent.kill()
        if child is not None and child.is_running():
            child.kill()
    stale = [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    assert len(stale) == 1 and stale[0].name.startswith(".m.rknn.")  # what SIGKILL leaves
    live, lock = make_workdir(tmp_path, prefix=".live.")  # also sweeps: the stale one goes
    try:
        assert not stale[0].exists() and live.is_dir()
        assert sweep_stale_workdirs(tmp_path) == []  # a live owner's folder stays
    finally:
        lock.close()
    assert sweep_stale_workdirs(tmp_path) == [str(live)]
