"""Hostile but honest input, per command: every case ends in one clear line, exit code 2.

One TABLE of cases (command line, expected message) runs through ``rkspeech.cli.main``; each case
asserts exit code 2, exactly one line on stderr, no traceback, and no stray file left in the
folders the case writes to.  Besides the table: SIGTERM / SIGINT / SIGHUP to a running
``rkspeech convert`` (the converter child and its temp folder must go, the earlier .rknn must
stay), two writers of one path, the build-folder lock, and a long decode whose peak memory must
not grow with its length.

The plans here use tiny stand-in step graphs (``_tiny_step``): real contract and I/O, trivial
ops, so a decode step costs ~0.1 ms and the tests measure the CLI, not the vocoder.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

REPO = Path(__file__).resolve().parents[1]


# ---- fixtures ------------------------------------------------------------------------------

def _contract(B: int):
    from rkspeech.contracts.vocoder import VocoderContract, make_segments

    return VocoderContract(codes_length=B, num_quantizers=16, codebook_size=2048, head_dim=64,
                        sliding_window=72, rope_theta=10000.0, samples_per_token=1920, sample_rate=24000,
                        segments=make_segments([("kv", (2, 71, 64))]), codes_dtype="float32")


def _tiny_step(path: Path, contract, graph_contract=None) -> Path:
    """A step graph with the contract's I/O: audio = 0, cache_out = cache_in.  ``graph_contract``
    gives the graph other shapes than the metadata says (an edited contract)."""
    import onnx
    from onnx import TensorProto, helper

    from rkspeech.contracts.base import CONTRACT_KEY

    g = graph_contract or contract
    ins, outs = g.input_shapes(), g.output_shapes()
    dtypes = {"audio_codes": TensorProto.FLOAT}
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["audio_values"],
                         value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0])),
        helper.make_node("Identity", ["cache_in"], ["cache_out"]),
    ]
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], outs["audio_values"])
    graph = helper.make_graph(
        nodes, "tiny_step",
        [helper.make_tensor_value_info(n, dtypes.get(n, TensorProto.FLOAT), s) for n, s in ins.items()],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outs.items()], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    helper.set_model_props(model, {CONTRACT_KEY: contract.to_json()})
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def plan_dir(tmp_path_factory) -> Path:
    """plan.json (onnx impl) over a B=4 first and a B=16 main tiny step, and codes files."""
    from rkspeech.plan.plan import write_plan

    d = tmp_path_factory.mktemp("hostile_plan")
    paths = {"first": _tiny_step(d / "first.onnx", _contract(4)), "main": _tiny_step(d / "main.onnx", _contract(16))}
    write_plan(d / "plan.json", placement="cpu-fp32", target=None,
               contracts={"first": _contract(4), "main": _contract(16)}, onnx=paths)
    rng = np.random.default_rng(0)
    np.save(d / "codes.npy", rng.integers(0, 2048, (40, 16)))
    return d


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, plan_dir) -> Path:
    """Broken copies of the plan, its artifacts and a checkpoint config, one file per case."""
    from rkspeech.models.qwen3_tts.synthetic_vocoder import CONFIGS, MODEL_TYPE

    d = tmp_path_factory.mktemp("hostile_bad")
    (d / "a_dir").mkdir()
    (d / "a_dir.wav").mkdir()
    (d / "text.onnx").write_text("this is not a model\n")
    (d / "afile").write_text("x")
    plan = json.loads((plan_dir / "plan.json").read_text())

    import shutil

    for role in ("first", "main"):  # the artifacts beside the variants: a plan names files in its folder only
        shutil.copy(plan_dir / plan["vocoder"]["artifacts"][role]["onnx"], d)

    def plan_variant(name, edit):
        p = json.loads(json.dumps(plan))
        edit(p["vocoder"])
        (d / name).write_text(json.dumps(p))

    plan_variant("plan_number_path.json", lambda sd: sd["artifacts"]["main"].__setitem__("onnx", 5))
    plan_variant("plan_N_abc.json", lambda sd: sd["contract"].__setitem__("N", "abc"))
    plan_variant("plan_rate.json", lambda sd: sd["contract"].__setitem__("sample_rate", 16000))
    edited = _tiny_step(d / "edited.onnx", _contract(16), graph_contract=_contract(8))
    plan_variant("plan_edited_onnx.json", lambda sd: sd["artifacts"]["main"].__setitem__("onnx", edited.name))

    base = {"model_type": MODEL_TYPE, "decoder_config": CONFIGS["reduced"].to_dict()}
    for name, dec, top in [("kv0", {"num_key_value_heads": 0}, {}), ("hidden_str", {"hidden_size": "128"}, {}),
                           ("huge", {"hidden_size": 10_000_000}, {}), ("rate_abc", {}, {"decode_upsample_rate": "abc"})]:
        folder = d / f"ckpt_{name}" / "speech_tokenizer"
        folder.mkdir(parents=True)
        cfg = {**base, **top, "decoder_config": {**base["decoder_config"], **dec}}
        (folder / "config.json").write_text(json.dumps(cfg))
        (folder / "model.safetensors").write_bytes(b"never read: the config is refused first")
    return d


def _run(argv: list[str], capsys) -> tuple[int, str]:
    from rkspeech.cli import main

    rc = main(argv)
    return rc, capsys.readouterr().err


def _listing(folders) -> dict:
    return {str(f): sorted(os.listdir(f)) for f in folders if Path(f).is_dir()}


# ---- the table ---------------------------------------------------------------------------
# (id, argv with {plan} {bad} {tmp} {ckpt} placeholders, regex of the message, folders that must
# not change).  /proc stands for a read-only folder: it refuses new files even to root (these tests
# run as root here), which a chmod'ed folder does not.
TABLE = [
    # outputs checked up front, by the CLI for every command (cli.outputs), naming the flag (3)
    ("decode-o-readonly", "decode --plan {plan}/plan.json {plan}/codes.npy -o /proc/x.wav",
     r"cannot write --output /proc/x\.wav: folder /proc is not writable", []),
    ("decode-o-missing-folder", "decode --plan {plan}/plan.json {plan}/codes.npy -o {tmp}/nope/x.wav",
     r"folder .*nope does not exist", ["{tmp}"]),
    ("decode-o-directory", "decode --plan {plan}/plan.json {plan}/codes.npy -o {bad}/a_dir.wav",
     r"--output .*a_dir\.wav is a directory", ["{bad}"]),
    ("decode-report-readonly", "decode --plan {plan}/plan.json {plan}/codes.npy -o {tmp}/x.wav --report /proc/r.json",
     r"cannot write --report /proc/r\.json", ["{tmp}"]),
    ("decode-report-directory", "decode --plan {plan}/plan.json {plan}/codes.npy -o {tmp}/x.wav --report {bad}/a_dir",
     r"--report .*a_dir is a directory", ["{tmp}", "{bad}"]),
    ("convert-o-directory", "convert {plan}/main.onnx --target rk3588 -o {bad}/a_dir",
     r"--output .*a_dir is a directory", ["{bad}", "{plan}"]),
    ("convert-report-readonly", "convert {plan}/main.onnx --target rk3588 -o {tmp}/m.rknn --report /proc/r.json",
     r"cannot write --report /proc/r\.json", ["{tmp}", "{plan}"]),
    ("build-out-is-file", "build qwen3-tts-vocoder --model-dir {ckpt} --out-dir {bad}/afile",
     r"--out-dir folder .*afile is a file; pass a folder", ["{bad}"]),
    ("build-out-readonly", "build qwen3-tts-vocoder --model-dir {ckpt} --out-dir /proc/b",
     r"cannot write --out-dir /proc/b: folder /proc is not writable", []),
    ("synth-out-is-file", "synth-checkpoint qwen3-tts-vocoder --out-dir {bad}/afile",
     r"--out-dir folder .*afile is a file", ["{bad}"]),
    ("export-o-readonly", "export qwen3-tts-vocoder --model-dir {ckpt} -B 4 -o /proc/s.onnx",
     r"cannot write --output /proc/s\.onnx", []),
    # bad files (4)
    ("convert-missing-onnx", "convert {tmp}/missing.onnx --target rk3588", r"missing\.onnx: no such ONNX file", ["{tmp}"]),
    ("convert-text-onnx", "convert {bad}/text.onnx --target rk3588 -o {tmp}/t.rknn",
     r"text\.onnx: not an ONNX model", ["{tmp}"]),
    ("convert-directory-onnx", "convert {bad}/a_dir --target rk3588 -o {tmp}/t.rknn", r"a_dir is a directory", ["{tmp}"]),
    ("decode-threads-negative", "decode --plan {plan}/plan.json {plan}/codes.npy -o {tmp}/x.wav --threads -3",
     r"--threads must be >= 1, got -3", ["{tmp}"]),
    ("decode-plan-is-directory", "decode --plan {bad}/a_dir {plan}/codes.npy -o {tmp}/x.wav",
     r"plan .*a_dir is a directory", ["{tmp}"]),
    ("decode-codes-is-directory", "decode --plan {plan}/plan.json {bad}/a_dir -o {tmp}/x.wav",
     r"codes file .*a_dir is a directory", ["{tmp}"]),
    # config validation (5): refused before anything is built, naming the key
    ("build-config-kv-heads-0", "build qwen3-tts-vocoder --model-dir {bad}/ckpt_kv0 --out-dir {tmp}/b",
     r"num_key_value_heads must be a positive integer, got 0", []),
    ("export-config-hidden-str", "export qwen3-tts-vocoder --model-dir {bad}/ckpt_hidden_str -B 4 -o {tmp}/s.onnx",
     r"hidden_size must be a positive integer, got '128'", ["{tmp}"]),
    ("export-config-huge", "export qwen3-tts-vocoder --model-dir {bad}/ckpt_huge -B 4 -o {tmp}/s.onnx",
     r"more than 20x the published model.*check hidden_size", ["{tmp}"]),
    ("build-config-rate-abc", "build qwen3-tts-vocoder --model-dir {bad}/ckpt_rate_abc --out-dir {tmp}/b",
     r"decode_upsample_rate must be a positive integer, got 'abc'", []),
    # wrong types in a plan or contract (6)
    ("decode-plan-path-number", "decode --plan {bad}/plan_number_path.json {plan}/codes.npy -o {tmp}/x.wav",
     r"vocoder\.artifacts\.main\.onnx must be a file path \(a string\), got 5", ["{tmp}"]),
    ("decode-contract-N-abc", "decode --plan {bad}/plan_N_abc.json {plan}/codes.npy -o {tmp}/x.wav",
     r"N must be an integer, got 'abc'", ["{tmp}"]),
    ("decode-onnx-contract-edited", "decode --plan {bad}/plan_edited_onnx.json {plan}/codes.npy -o {tmp}/x.wav",
     r"contract says audio_codes is \[1, 16, 16\], the graph's audio_codes is \[1, 16, 8\]", ["{tmp}"]),
    ("verify-onnx-contract-edited", "verify --model-dir {ckpt} --onnx {bad}/edited.onnx",
     r"contract says audio_codes is \[1, 16, 16\], the graph's audio_codes is \[1, 16, 8\]", ["{bad}"]),
    # messages name what differs (7)
    ("decode-plan-rate-mismatch", "decode --plan {bad}/plan_rate.json {plan}/codes.npy -o {tmp}/x.wav",
     r"plan vs artifact: sample_rate 16000 vs 24000\)", ["{tmp}"]),
]


@pytest.mark.parametrize("case", TABLE, ids=[c[0] for c in TABLE])
def test_hostile_table(case, plan_dir, bad_files, reduced_ckpt, tmp_path, capsys):
    _, argv, pattern, watched = case
    fill = {"plan": str(plan_dir), "bad": str(bad_files), "tmp": str(tmp_path), "ckpt": str(reduced_ckpt)}
    folders = [w.format(**fill) for w in watched]
    before = _listing(folders)
    rc, err = _run(argv.format(**fill).split(), capsys)
    lines = err.strip().splitlines()
    assert rc == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    import re

    assert re.search(pattern, lines[0]), lines[0]
    assert _listing(folders) == before  # nothing new: no output, no temp file, no probe


# ---- signals: a conversion child and its temp folder go with the parent -------------------

@pytest.mark.rknn
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_signal_stops_converter_child(sig, tmp_path):
    import psutil
    from rkfixtures import conv_relu_sin, have_rknn

    if not have_rknn():
        pytest.skip("rknn-toolkit2 not installed")
    onnx_path = conv_relu_sin(tmp_path / "m.onnx")
    prev = tmp_path / "prev.rknn"
    prev.write_bytes(b"previous good artifact")
    env = {**os.environ, "RKSPEECH_TEST_CHILD_SLEEP": "30"}
    parent = subprocess.Popen([sys.executable, "-m", "rkspeech", "convert", str(onnx_path), "--target", "rk3588",
                               "-o", str(prev)], cwd=REPO, env=env, stderr=subprocess.PIPE, text=True)
    log = Path(str(prev) + ".build.log")
    deadline = time.time() + 60
    while "[rkspeech child] hooks" not in (log.read_text(errors="replace") if log.exists() else ""):
        assert parent.poll() is None and time.time() < deadline, "the converter child never reached its sleep"
        time.sleep(0.2)
    children = psutil.Process(parent.pid).children(recursive=True)
    assert children and any(p.name().startswith("python") for p in children)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and p.is_dir()]  # its temp folder
    t0 = time.time()
    parent.send_signal(sig)
    err = parent.communicate(timeout=10)[1]
    assert time.time() - t0 < 5
    assert parent.returncode == 128 + sig
    want = "interrupted" if sig == signal.SIGINT else f"terminated by {sig.name}"
    assert err.strip().splitlines() == [f"rkspeech convert: {want}"], err
    _, alive = psutil.wait_procs(children, timeout=3)
    assert not alive, alive
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert prev.read_bytes() == b"previous good artifact"


# ---- two writers, one path; the build-folder lock -----------------------------------------

def test_two_writers_of_one_path_never_corrupt_it(tmp_path):
    from rkspeech.core.atomic import write_json
    from rkspeech.runtime.wav import WavWriter, read_wav_int16, write_wav

    out = tmp_path / "same.wav"
    a = np.full(48_000, 0.25, dtype=np.float32)
    b = np.full(96_000, -0.5, dtype=np.float32)
    errors = []

    def streaming(pcm):
        try:
            for _ in range(5):
                with WavWriter(out, 24000) as w:
                    for i in range(0, pcm.size, 4800):
                        w.write(pcm[i:i + 4800])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    def oneshot(pcm):
        try:
            for _ in range(5):
                write_wav(out, pcm, 24000)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=f, args=(x,)) for f in (streaming, oneshot) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    data, rate = read_wav_int16(out)  # a whole file: its header's size is its data's size
    assert rate == 24000 and out.stat().st_size == 44 + 2 * data.size
    assert data.size in (a.size, b.size) and len(set(data.tolist())) == 1
    js = tmp_path / "same.json"
    ts = [threading.Thread(target=lambda n=n: [write_json(js, {"n": n, "pad": "x" * 100_000 * n}) for _ in range(5)])
          for n in (1, 2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert json.loads(js.read_text())["n"] in (1, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.json", "same.wav"]  # no temp left


def test_outputs_get_the_mode_of_a_new_file(tmp_path):
    """Outputs are written under a private temporary name (mkstemp: 0600) and renamed; the user
    gets what any new file gets (0666 & ~umask), e.g. a wav a media player in another account
    can read."""
    from rkspeech.core.atomic import write_json
    from rkspeech.runtime.wav import WavWriter

    umask = os.umask(0o022)
    os.umask(umask)
    with WavWriter(tmp_path / "a.wav", 24000) as w:
        w.write(np.zeros(480, dtype=np.float32))
    write_json(tmp_path / "r.json", {"ok": True})
    for name in ("a.wav", "r.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask, name


def test_build_folder_lock(tmp_path, reduced_ckpt, capsys):
    from rkspeech.core.atomic import LOCK_FILE, folder_lock

    out = tmp_path / "build"
    out.mkdir()
    with folder_lock(out):
        rc, err = _run(["build", "qwen3-tts-vocoder", "--model-dir", str(reduced_ckpt), "--out-dir", str(out),
                        "-B", "4", "--skip-sim"], capsys)
        assert rc == 2 and f"another build is using this folder (pid {os.getpid()})" in err
        # another process gets the same answer
        code = f"from rkspeech.core.atomic import folder_lock\nwith folder_lock({str(out)!r}): pass"
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False)
        assert p.returncode != 0 and f"pid {os.getpid()}" in p.stderr
    # a lock file left by a dead process does not block
    (out / LOCK_FILE).write_text("999999")
    with folder_lock(out):
        pass
    with pytest.raises(RkspeechError, match="another build"), folder_lock(out), folder_lock(out):
        pass


def test_second_decode_to_one_output_is_refused(tmp_path, plan_dir, capsys):
    """Two decodes to one -o: atomic writes keep the file whole, but the run whose result is
    replaced would still exit 0; the output lock refuses the second at once."""
    from rkspeech.core.atomic import output_lock

    out = tmp_path / "x.wav"
    argv = ["decode", "--plan", str(plan_dir / "plan.json"), str(plan_dir / "codes.npy"), "-o", str(out)]
    with output_lock(out, what="output wav"):
        rc, err = _run(argv, capsys)
        assert rc == 2 and f"another rkspeech (pid {os.getpid()}) is writing output wav {out}" in err, err
        assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # the lock file goes with its holder
    rc, err = _run(argv, capsys)
    assert rc == 0 and out.exists(), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.wav"]


# ---- a long decode keeps memory flat --------------------------------------------------------

_RSS_SCRIPT = """
import resource, sys
from rkspeech.cli import main
rc = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rc)
"""


def _decode_peak_mb(plan_dir: Path, tokens: int, tmp_path: Path) -> float:
    codes = tmp_path / f"codes{tokens}.npy"
    np.save(codes, np.random.default_rng(1).integers(0, 2048, (tokens, 16), dtype=np.int16))
    out = tmp_path / f"out{tokens}.wav"
    p = subprocess.run([sys.executable, "-c", _RSS_SCRIPT, "decode", "--plan", str(plan_dir / "plan.json"),
                        str(codes), "-o", str(out), "--threads", "1"],
                       capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    peak_kb, rc = p.stdout.split()[-2:]
    assert rc == "0"
    assert out.stat().st_size == 44 + 2 * tokens * 1920
    return int(peak_kb) / 1024


def test_long_decode_memory_is_flat(plan_dir, tmp_path):
    """100,000 tokens (192 M samples, a 384 MB wav) against 1,000 tokens: the peak RSS may differ
    by a small constant only (the codes themselves, 12.8 MB as int64).  Measured here: 57 vs 72 MB;
    the decode that held all audio until the end peaked at 86 vs 3,002 MB on the same plans."""
    short = _decode_peak_mb(plan_dir, 1_000, tmp_path)
    long = _decode_peak_mb(plan_dir, 100_000, tmp_path)
    print(f"decode peak RSS: 1,000 tokens {short:.0f} MB, 100,000 tokens {long:.0f} MB")
    assert long - short < 40, (short, long)


@pytest.mark.rknn
def test_sigterm_stops_simulator_children(plan_dir, tmp_path):
    """``decode --backend sim`` builds each graph in a multiprocessing child: SIGTERM to the
    parent while a child builds ends them all at once and writes no wav."""
    import psutil
    from rkfixtures import have_rknn

    if not have_rknn():
        pytest.skip("rknn-toolkit2 not installed")
    out = tmp_path / "x.wav"
    parent = subprocess.Popen([sys.executable, "-m", "rkspeech", "decode", "--plan", str(plan_dir / "plan.json"),
                               str(plan_dir / "codes.npy"), "-o", str(out), "--backend", "sim", "--target", "rk3588"],
                              cwd=REPO, stderr=subprocess.PIPE, text=True)
    proc = psutil.Process(parent.pid)
    deadline = time.time() + 60
    while not proc.children(recursive=True):
        assert parent.poll() is None and time.time() < deadline, "no simulator child started"
        time.sleep(0.1)
    time.sleep(1.0)  # into the child's build
    children = proc.children(recursive=True)
    parent.send_signal(signal.SIGTERM)
    err = parent.communicate(timeout=15)[1]
    assert parent.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines()[-1] == "rkspeech decode: terminated by SIGTERM", err
    assert "Traceback" not in err
    _, alive = psutil.wait_procs(children, timeout=5)
    assert not alive, alive
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("corrupt", ["int8", "nan"])
def test_corrupt_weights_are_refused_naming_the_key(corrupt, reduced_ckpt, tmp_path):
    """Integer / bool weights and NaN weights are refused at load, not cast and blamed later."""
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    from rkspeech.models.qwen3_tts.vocoder_checkpoint import (
        read_decoder_state,
        resolve_checkpoint,
    )

    shutil.copytree(reduced_ckpt, tmp_path / "ckpt")
    files = resolve_checkpoint(tmp_path / "ckpt")
    state = load_file(str(files.weights))
    key = next(k for k in state if k.startswith("decoder.") and state[k].ndim >= 2)
    state[key] = state[key].to(torch.int8) if corrupt == "int8" else state[key].fill_(float("nan"))
    save_file(state, str(files.weights))
    want = "is stored as torch.int8; weights must be floating point" if corrupt == "int8" else "holds NaN or inf"
    with pytest.raises(RkspeechError, match=f"{key} {want}"):
        read_decoder_state(files)
