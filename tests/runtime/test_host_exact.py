"""On the host, exact audio: the build exports exact (reference-formulation) step graphs beside the
npu ones, the plan says which graph each backend runs, and ``decode`` / ``speak --backend ort``
run the exact ones.

The acceptance (issue 24 item 5), on the session's reduced build (B=16, first B=4; the fixture
``reduced_vocoder_build``, shared with tests/pipelines/test_build.py): ``rkspeech decode --backend ort``
and ``rkspeech speak --backend ort`` reach >= 100 dB against the official qwen-tts decoder on
the float samples they write and >= 80 dB in the 16-bit wav.  The same plan with ``ort`` pointed
at the npu graph (``backends.ort = "onnx"``) lands below both (its phase Snake: ~72 dB).

The first tests need no build: plan routing and validation on the session's small step graphs.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.read import read_contract
from rkspeech.plan.plan import BUILD_BACKENDS, load_plan, write_plan
from rkfixtures import have_rknn
from streaming_fixtures import step_graphs, write_ort_plan

FLOAT_MIN_DB = 100.0  # float samples vs the official decoder
WAV_MIN_DB = 80.0  # the 16-bit wav vs the official decoder (16-bit rounding: ~84+ dB here)
TOKENS = 43  # a B=4 first step, two B=16 main steps, a flushed tail of 7
FRAMES = 24  # speak: a first step, one main step and a flushed tail


# ---- routing and validation (no build) -------------------------------------------------------

@pytest.fixture
def two_sets(tmp_path, tmp_path_factory, reduced_model):
    """The session's B=4/B=16 graphs copied twice: ``npu_*`` stand for the NPU graphs (the
    ``onnx`` section), ``host_*`` for the exact ones (``host_onnx``)."""
    graphs = step_graphs(tmp_path_factory, reduced_model)
    sets = {}
    for kind in ("npu", "host"):
        sets[kind] = {r: tmp_path / f"{kind}_{p.name}" for r, p in graphs.items()}
        for r, p in graphs.items():
            shutil.copy(p, sets[kind][r])
    contracts = {r: read_contract(p) for r, p in sets["npu"].items()}
    plan = write_plan(tmp_path / "plan.json", placement="cpu-fp32", target=None, contracts=contracts, onnx=sets["npu"],
                      host_onnx=sets["host"], host_contracts=contracts)
    return tmp_path, plan, sets


def test_each_backend_runs_the_graph_its_plan_names(two_sets, monkeypatch):
    import rkspeech.runtime.tts.pool as pool_module

    d, plan_path, sets = two_sets
    opened = []
    real_open = pool_module.open_runner
    monkeypatch.setattr(pool_module, "open_runner",
                        lambda backend, path, **kw: opened.append((backend, path)) or real_open(backend, path, **kw))
    raw = json.loads(plan_path.read_text())["vocoder"]
    assert {r: k["host_onnx"] for r, k in raw["artifacts"].items()} == {r: p.name for r, p in sets["host"].items()}
    assert raw["backends"] == BUILD_BACKENDS and raw["host_contract"]["B"] == 16
    plan = load_plan(plan_path, backend="ort")
    assert plan.graphs("ort") == sets["host"] and plan.graphs("sim") == sets["npu"]
    assert plan.graphs("rknnlite") == {}  # an onnx-only plan
    with pool_module.open_pool(plan, "ort", size=1, threads=1) as pool:
        np.testing.assert_array_equal(pool.open_stream().decode(np.zeros((5, 16), np.int64)).shape, (5 * 1920,))
    assert sorted(opened) == sorted(("ort", p) for p in sets["host"].values())  # what onnxruntime opened
    # the plan's word decides: ort pointed back at the npu graphs
    data = json.loads(plan_path.read_text())
    data["vocoder"]["backends"]["ort"] = "onnx"
    plan_path.write_text(json.dumps(data))
    assert load_plan(plan_path, backend="ort").graphs("ort") == sets["npu"]


def test_plan_without_host_graphs_runs_as_before(tmp_path, tmp_path_factory, reduced_model):
    """An old plan (no host_onnx, no backends): ort and sim run its onnx section."""
    graphs = step_graphs(tmp_path_factory, reduced_model)
    plan_path = write_ort_plan(tmp_path, graphs)
    sd = json.loads(plan_path.read_text())["vocoder"]
    assert not {"host_contract", "backends"} & set(sd) and all(set(k) == {"onnx"} for k in sd["artifacts"].values())
    plan = load_plan(plan_path, backend="ort")
    ort = plan.graphs("ort")  # the graphs, linked into the plan's folder (plan.bundle): the same files
    assert set(ort) == set(graphs) and all(os.path.samefile(ort[r], graphs[r]) for r in graphs)
    assert all(p.parent == plan_path.parent for p in ort.values()) and plan.host_onnx == {}
    assert plan.graphs("sim") == plan.graphs("ort") == plan.onnx
    assert plan.contract == read_contract(graphs["main"])


def _edit(plan_path, fn):
    data = json.loads(plan_path.read_text())
    fn(data["vocoder"])
    plan_path.write_text(json.dumps(data))


BAD = [
    (lambda sd: sd.__setitem__("backends", ["ort"]), r"vocoder\.backends must be an object"),
    (lambda sd: sd["backends"].__setitem__("gpu", "onnx"), r"backends names unknown backend 'gpu'"),
    (lambda sd: sd["backends"].__setitem__("ort", "rknn"),
     r"backends\.ort is 'rknn'; ort runs host_onnx or onnx"),
    (lambda sd: sd.pop("host_contract"), r"host_onnx graphs without their host_contract"),
    (lambda sd: sd["host_contract"].__setitem__("sliding_window", 64),
     r"the host_contract in the plan disagrees with the main artifact host_step_B16\.onnx .*sliding_window 64 vs 72"),
    (lambda sd: sd["codes_length"].__setitem__("first", 8),
     r"host graphs do not match the NPU graphs \(host vs npu: first B 4 vs 8\)"),
    (lambda sd: sd["codes_length"].pop("first"),
     r"host graphs hold roles \['first', 'main'\], the NPU graphs \['main'\]"),
    (lambda sd: sd["contract"].__setitem__("sample_rate", 16000),
     r"host graphs do not match the NPU graphs .*sample_rate 24000 vs 16000"),
    (lambda sd: sd["artifacts"]["main"].__setitem__("host_onnx", "main.rknn"),
     r"artifacts\.main\.host_onnx must be an \.onnx file"),
    (lambda sd: sd["artifacts"]["main"].__setitem__("host_onnx", "gone.onnx"), r"main artifact .*gone\.onnx is missing"),
]


@pytest.mark.parametrize("edit,pattern", BAD, ids=["backends-type", "backend-name", "backend-kind", "no-host-contract",
                                                    "host-contract", "first-B", "roles", "signal", "kind", "missing"])
def test_bad_host_sections_are_one_line(two_sets, edit, pattern):
    _, plan_path, _ = two_sets
    _edit(plan_path, edit)
    with pytest.raises(RkspeechError, match=pattern) as exc:
        load_plan(plan_path, backend="ort")
    assert "\n" not in str(exc.value)


def test_sim_never_needs_the_host_graphs(two_sets):
    _, plan_path, sets = two_sets
    _edit(plan_path, lambda sd: sd["host_contract"].__setitem__("B", 99))  # host side broken
    plan = load_plan(plan_path, backend="sim")  # the simulator's graphs are the npu ones
    assert plan.contract.codes_length == 16 and plan.graphs("sim") == sets["npu"]


# ---- the acceptance, on the session's reduced build ------------------------------------------

def needs_build(test):
    """rknn + slow, skipped without rknn-toolkit2 (the build converts and simulates)."""
    for mark in (pytest.mark.rknn, pytest.mark.slow,
                 pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 is not installed")):
        test = mark(test)
    return test


@pytest.fixture(scope="module")
def official(reduced_ckpt):
    from official_reference import load_official_decoder

    return load_official_decoder(reduced_ckpt)


def _official_pcm(decoder, codes_tq: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return decoder(torch.from_numpy(np.ascontiguousarray(codes_tq.T[None]))).reshape(-1).numpy()


class _Recorder:
    """Patches ``runtime.wav.WavWriter`` (the CLIs import it when they run) to keep the float
    samples each CLI writes."""

    def __init__(self, monkeypatch):
        import rkspeech.runtime.wav as wav

        self.pcm: list[np.ndarray] = []
        rec = self

        class Recording(wav.WavWriter):
            def write(self, pcm):
                rec.pcm.append(np.asarray(pcm, dtype=np.float32).reshape(-1).copy())
                return super().write(pcm)

        monkeypatch.setattr(wav, "WavWriter", Recording)

    def samples(self) -> np.ndarray:
        return np.concatenate(self.pcm) if self.pcm else np.zeros(0, np.float32)


def _measure(want: np.ndarray, pcm: np.ndarray, wav_path) -> dict:
    from rkspeech.runtime.wav import read_wav_int16
    from rkspeech.core.compare import snr_db

    wav, rate = read_wav_int16(wav_path)
    assert rate == 24000 and wav.size == pcm.size == want.size
    return {"float_db": snr_db(want, pcm), "wav_db": snr_db(want * 32767.0, wav.astype(np.float64))}


def _run_decode(plan, codes_path, out, monkeypatch, capsys) -> np.ndarray:
    from rkspeech.cli import main

    rec = _Recorder(monkeypatch)
    rc = main(["decode", "--plan", str(plan), str(codes_path), "-o", str(out), "--backend", "ort", "--threads", "2"])
    assert rc == 0, capsys.readouterr().err
    return rec.samples()


@pytest.fixture(scope="module")
def built(reduced_vocoder_build):
    return reduced_vocoder_build


@needs_build
def test_build_exports_checked_exact_host_graphs(built):
    out, summary = built
    host = summary["export_host"]
    assert host["formulation"] == "reference" and host["B"] == 16 and host["first_B"] == 4
    assert host["snr_db"]["torch_step"] >= 100.0 and host["snr_db"]["onnxruntime_step"] >= 100.0
    assert "export_host" not in summary["lint"] and set(summary["convert"]) == {"main", "first"}  # host-only
    sd = json.loads((out / "plan.json").read_text())["vocoder"]
    assert sd["backends"] == BUILD_BACKENDS
    assert {r: k["host_onnx"] for r, k in sd["artifacts"].items()} == \
        {"main": "onnx/vocoder_step_B16.onnx", "first": "onnx/vocoder_step_B16_first_B4.onnx"}
    assert sd["artifacts"]["main"]["onnx"] == "onnx/vocoder_npu_step_B16.onnx"
    ort, sim = load_plan(out / "plan.json", backend="ort"), load_plan(out / "plan.json", backend="sim")
    assert ort.contract.formulation == "reference" and ort.contract.codes_dtype == "int64"
    assert sim.contract.formulation == "npu" and sim.contract.codes_dtype == "float32"
    assert {r: c.codes_length for r, c in ort.contracts.items()} == \
        {r: c.codes_length for r, c in sim.contracts.items()}
    assert ort.contract.cache_numel == sim.contract.cache_numel


@needs_build
def test_decode_ort_is_exact_against_the_official_decoder(built, official, tmp_path, monkeypatch, capsys):
    from rkspeech.verify.stepwise import random_codes

    out, _ = built
    codes = random_codes(TOKENS, 16, 2048, seed=11)
    np.save(tmp_path / "codes.npy", codes)
    want = _official_pcm(official, codes)
    pcm = _run_decode(out / "plan.json", tmp_path / "codes.npy", tmp_path / "a.wav", monkeypatch, capsys)
    got = _measure(want, pcm, tmp_path / "a.wav")
    print(f"decode --backend ort vs official: float {got['float_db']:.2f} dB, wav {got['wav_db']:.2f} dB")
    assert got["float_db"] >= FLOAT_MIN_DB and got["wav_db"] >= WAV_MIN_DB, got

    # the same plan with ort pointed at the npu graph falls short of both bars
    npu_plan = out / "plan_ort_on_npu.json"
    data = json.loads((out / "plan.json").read_text())
    data["vocoder"]["backends"]["ort"] = "onnx"
    npu_plan.write_text(json.dumps(data))
    try:
        pcm = _run_decode(npu_plan, tmp_path / "codes.npy", tmp_path / "b.wav", monkeypatch, capsys)
    finally:
        npu_plan.unlink()
    bad = _measure(want, pcm, tmp_path / "b.wav")
    print(f"decode --backend ort on the npu graph vs official: float {bad['float_db']:.2f} dB, "
          f"wav {bad['wav_db']:.2f} dB")
    assert bad["float_db"] < FLOAT_MIN_DB and bad["wav_db"] < WAV_MIN_DB, bad


@needs_build
def test_speak_ort_is_exact_against_the_official_decoder(built, official, tts_custom_ckpt, tmp_path,
                                                         monkeypatch, capsys):
    from rkspeech.cli import main

    out, _ = built
    rec = _Recorder(monkeypatch)
    rc = main(["speak", "The quick brown fox.", "--model-dir", str(tts_custom_ckpt), "--plan", str(out / "plan.json"),
               "-o", str(tmp_path / "s.wav"), "--speaker", "vivian", "--language", "english", "--greedy",
               "--max-frames", str(FRAMES), "--threads", "2", "--backend", "ort",
               "--codes-out", str(tmp_path / "codes.npy")])
    assert rc == 0, capsys.readouterr().err
    codes = np.load(tmp_path / "codes.npy")
    assert codes.shape[0] > 16  # a first step, a main step and more
    got = _measure(_official_pcm(official, codes), rec.samples(), tmp_path / "s.wav")
    print(f"speak --backend ort vs official ({codes.shape[0]} frames): float {got['float_db']:.2f} dB, "
          f"wav {got['wav_db']:.2f} dB")
    assert got["float_db"] >= FLOAT_MIN_DB and got["wav_db"] >= WAV_MIN_DB, got
