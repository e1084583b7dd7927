"""Text to speech without torch (``runtime.tts.numpy_loop``): the host's part of generation in numpy
over a plan whose talker and code predictor are graphs.

The reduced custom-voice model; its talker pair (prefill B=16 + decode, capacity 96) and its code
predictor in both forms (``step``: the stack one position a call, numpy heads; ``frame``: the
15 codebooks unrolled, greedy) exported to ONNX and written into two plans beside the session's
reduced vocoder steps.  What must hold:

* greedy codes of the numpy host loop equal the torch host loop's over the same graphs, for
  several texts, speakers, languages and both prompt modes, with both code-predictor forms;
* ``python -m rkspeech speak`` with torch made unimportable writes the same wav, sample for
  sample, as the torch host loop; so does serve's speech endpoint;
* the numpy sampler draws from the distribution the torch sampler draws from (the random streams
  differ: numpy's PCG64 vs torch.multinomial), checked over many draws from fixed logits;
* voice cloning without torch is refused in one line that says why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkfixtures import TORCH_BLOCKER, rkspeech_child
from streaming_fixtures import step_graphs, write_ort_plan

FRAMES = 12
#: (text, speaker, language, text_in_prompt): mixed speakers, languages and both prompt modes
CASES = [
    ("Stages on graphs, without torch.", "vivian", "english", None),
    ("A second sentence, somewhat longer than the first one was.", "ryan", "auto", None),
    ("Guten Tag, wie geht es?", "vivian", "german", False),
    ("Numbers: 1, 22, 333.", "ryan", "chinese", False),
]

BLOCKER = TORCH_BLOCKER


def _contract(path):
    from rkspeech.contracts.read import read_onnx_metadata

    return json.loads(read_onnx_metadata(path)["rkspeech.contract"])


@pytest.fixture(scope="module")
def plans(tmp_path_factory, reduced_model, tts):
    """``{"frame": plan.json, "step": plan.json}``: the same talker pair, each code-predictor form."""
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.plan.sections import stage_section
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    d = tmp_path_factory.mktemp("numpy_plans")
    graphs = step_graphs(tmp_path_factory, reduced_model)
    talker = export_talker_pair(tts.net.talker.model, d / "talker", capacity=96, prefill_B=16)
    cps = {"frame": export_code_predictor_onnx(CodePredictorFrame(tts.net.talker.code_predictor, embed="onehot").eval(),
                                               d / "cp" / "frame.onnx"),
           "step": export_talker_onnx(code_predictor_step(tts.net.talker.code_predictor), d / "cp" / "step.onnx")}
    out = {}
    for form, cp in cps.items():
        sub = d / form
        sub.mkdir()
        for p in graphs.values():
            shutil.copy(p, sub / p.name)
        plan = write_ort_plan(sub, {r: sub / p.name for r, p in graphs.items()})
        raw = json.loads(plan.read_text())
        raw["code_predictor"] = stage_section(placement="cpu-fp32", target=None, artifacts={form: {"onnx": cp}},
                                              contract=_contract(cp), base=sub)
        raw["talker"] = stage_section(placement="cpu-fp32", target=None,
                                      artifacts={r: {"onnx": p} for r, p in talker.items()},
                                      contract=_contract(talker["decode"]), base=sub)
        plan.write_text(json.dumps(raw))
        out[form] = plan
    return out


def _codes(root, plan, host, cases=CASES, options=None, **kw):
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker

    out = []
    with Speaker(root, plan, threads=1, host=host, **kw) as sp:
        assert sp.host == host and sp.model.talker_backend.name != "torch"
        for text, speaker, language, tip in cases:
            opts = options or GenerationOptions.greedy(max_new_tokens=FRAMES + 1, text_in_prompt=tip)
            out.append(sp.model.generate_codes(text, speaker=speaker, language=language, options=opts))
    return out


@pytest.mark.parametrize("form", ["frame", "step"])
def test_greedy_codes_equal_the_torch_host_loop(tts_custom_ckpt, plans, form):
    got = _codes(tts_custom_ckpt, plans[form], "numpy")
    ref = _codes(tts_custom_ckpt, plans[form], "torch")
    for (text, *_), g, r in zip(CASES, got, ref):
        assert r.shape == (FRAMES, 16), text
        np.testing.assert_array_equal(g, r, err_msg=text)


def test_a_format_1_plan_speaks_the_same_codes(tts_custom_ckpt, plans):
    """A plan written before the stage record (format 1: speech_decoder, impl) runs as it is."""
    from rkfixtures import format_1

    old = plans["step"].parent / "plan_format_1.json"
    old.write_text(json.dumps(format_1(json.loads(plans["step"].read_text()))))
    assert "speech_decoder" in json.loads(old.read_text())
    for got, ref in zip(_codes(tts_custom_ckpt, old, "numpy"), _codes(tts_custom_ckpt, plans["step"], "numpy")):
        np.testing.assert_array_equal(got, ref)


def _speak_cli(tmp_path, root, plan, name, *extra, blocked=False):
    """``python -m rkspeech speak`` in a child process (torch made unimportable when ``blocked``):
    (wav samples, codes, report, stderr)."""
    out, codes, report = tmp_path / f"{name}.wav", tmp_path / f"{name}.npy", tmp_path / f"{name}.json"
    res = rkspeech_child(["speak", CASES[0][0], "--model-dir", str(root), "--plan", str(plan), "-o", str(out),
                          "--speaker", "vivian", "--language", "english", "--max-frames", str(FRAMES), "--threads",
                          "1", "--codes-out", str(codes), "--report", str(report), *extra], blocked=blocked)
    assert res.returncode == 0, res.stderr[-3000:]
    from rkspeech.runtime.wav import read_wav_int16

    samples, rate = read_wav_int16(out)
    assert rate == 24000
    return samples, np.load(codes), json.loads(report.read_text()), res.stdout + res.stderr


def test_speak_without_torch_writes_the_torch_host_loops_wav(tts_custom_ckpt, plans, tmp_path):
    plan = plans["step"]
    got, got_codes, report, err = _speak_cli(tmp_path, tts_custom_ckpt, plan, "numpy", "--greedy", "--margins-out",
                                             str(tmp_path / "numpy.margins.npy"), blocked=True)
    assert "TORCH-MODULES [] ATTEMPTS 0" in err, err[-2000:]  # torch never loaded, nothing even tried
    assert "host loop: numpy" in err  # the summary table says which loop ran
    assert report["host_loop"] == "numpy" and report["stage_backends"]["talker"] != "torch"
    ref, ref_codes, ref_report, _ = _speak_cli(tmp_path, tts_custom_ckpt, plan, "torch", "--greedy",
                                               "--host-loop", "torch", "--margins-out",
                                               str(tmp_path / "torch.margins.npy"))
    assert ref_report["host_loop"] == "torch"
    assert got_codes.shape == (FRAMES, 16)
    np.testing.assert_array_equal(got_codes, ref_codes)
    assert got.size == ref.size > 0 and np.abs(ref).max() > 0
    np.testing.assert_array_equal(got, ref)
    # each greedy decision's margin: a row a talker step (the frames', then the one that ended), both
    # hosts measuring the same logits
    margins, ref_margins = np.load(tmp_path / "numpy.margins.npy"), np.load(tmp_path / "torch.margins.npy")
    assert margins.shape == (FRAMES + 1, 16) and margins.dtype == np.float32
    assert np.isfinite(margins[:FRAMES]).all() and (margins[:FRAMES] >= 0).all() and margins[:FRAMES].max() > 0
    assert np.isfinite(margins[FRAMES, 0]) and np.isnan(margins[FRAMES, 1:]).all()
    np.testing.assert_allclose(margins, ref_margins, atol=2e-3)


def test_voice_cloning_without_torch_says_why(tmp_path_factory, plans):
    """A Base checkpoint on the numpy loop without the plan's speaker encoder graph: the speaker
    encoder needs torch; without it, one line (with the graph: tests/runtime/test_clone_graphs.py)."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel

    root = write_tts_checkpoint(tmp_path_factory.mktemp("tts_base"), "reduced", "base", 0)
    code = BLOCKER + textwrap.dedent(f"""
        import numpy as np
        from rkspeech.core.errors import RkspeechError
        from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel
        m = NumpyTTSModel.load({str(root)!r})
        try:
            m.build_prompt("Hello.", ref_audio=np.zeros(24000, np.float32) + 0.1)
        except RkspeechError as e:
            print("REFUSED:", e)
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    line = res.stdout.strip()
    assert line.startswith("REFUSED:") and "\n" not in line
    assert "speaker encoder graph" in line and "rebuild the plan" in line and "pip install torch" in line
    # with torch present, cloning on the numpy loop builds the same prompt as the torch model
    from rkspeech.models.qwen3_tts.generate import TTSModel

    audio = np.random.default_rng(3).uniform(-0.3, 0.3, 24000).astype(np.float32)
    ref, got = TTSModel.load(root), NumpyTTSModel.load(root)
    codes = np.random.default_rng(4).integers(0, 2048, (7, 16))
    for kw in ({}, {"ref_text": "Reference words.", "ref_codes": codes},
               {"ref_text": "Reference words.", "ref_codes": codes, "text_in_prompt": True}):
        p_ref = ref.build_prompt("Hello there.", ref_audio=audio, **kw)
        p_got = got.build_prompt("Hello there.", ref_audio=audio, **kw)
        for a, b in zip(p_ref, p_got):
            assert b.shape == tuple(a.shape[1:])
            np.testing.assert_allclose(b, a.detach().numpy()[0], rtol=0, atol=1e-5)


def test_numpy_sampler_draws_from_the_torch_samplers_distribution():
    """The random streams differ (numpy PCG64 inverse CDF vs torch.multinomial), so the check is
    statistical: over N draws from fixed logits, both samplers' frequencies are within 5 sigma of
    ``warped_probs`` (temperature, top-k, top-p, after the repetition penalty), and neither draws
    a token the warpers removed."""
    torch = pytest.importorskip("torch")
    from rkspeech.models.qwen3_tts import torch_host
    from rkspeech.models.qwen3_tts import numpy_host

    rng = np.random.default_rng(11)
    logits = (rng.standard_normal(96) * 2).astype(np.float32)
    history = [3, 5, 5, 40]
    N = 20000
    for temperature, top_k, top_p in ((0.9, 50, 1.0), (0.7, 20, 0.8), (1.0, 0, 0.95)):
        lg = numpy_host.penalize(logits, history, 1.05)
        lt = torch_host.penalize(torch.from_numpy(logits), history, 1.05)
        np.testing.assert_array_equal(lg, lt.numpy())  # the penalty is exact
        p = numpy_host.warped_probs(lg, temperature, top_k, top_p).astype(np.float64)
        assert abs(p.sum() - 1) < 1e-5 and (p > 0).sum() <= (top_k or 96)
        r = np.random.default_rng(0)
        g = torch.Generator().manual_seed(0)
        ours = np.array([numpy_host.choose_token(lg, True, temperature, top_k, top_p, r) for _ in range(N)])
        theirs = np.array([torch_host.choose_token(lt, True, temperature, top_k, top_p, g) for _ in range(N)])
        assert not (ours != theirs).sum() == 0  # different streams (documented): not draw-for-draw equal
        sigma = np.sqrt(p * (1 - p) / N) + 1e-12
        for name, draws in (("numpy", ours), ("torch", theirs)):
            freq = np.bincount(draws, minlength=96) / N
            assert set(np.flatnonzero(freq)) <= set(np.flatnonzero(p)), (name, temperature, top_k, top_p)
            z = np.abs(freq - p) / sigma
            assert z.max() < 5, (name, temperature, top_k, top_p, z.max())
        # the same seed, the same draws: the numpy stream is reproducible
        r1, r2 = np.random.default_rng(5), np.random.default_rng(5)
        a = [numpy_host.choose_token(lg, True, temperature, top_k, top_p, r1) for _ in range(50)]
        assert a == [numpy_host.choose_token(lg, True, temperature, top_k, top_p, r2) for _ in range(50)]
    # greedy is argmax, as torch's
    assert numpy_host.choose_token(logits, False, 1, 0, 1, None) == int(torch.argmax(torch.from_numpy(logits)))


def test_sampled_generation_on_the_step_graph(tts_custom_ckpt, plans):
    """Both stages sampling (the step form is not greedy-only): valid codes, the same for the same
    seed, other codes for another seed; the frame form refuses sampling code-predictor options."""
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions

    case = CASES[:1]
    a, b, c = (_codes(tts_custom_ckpt, plans["step"], "numpy", case,
                      options=GenerationOptions(seed=s, max_new_tokens=FRAMES + 1))[0] for s in (1, 1, 2))
    np.testing.assert_array_equal(a, b)
    assert a.shape[1] == 16 and a.shape[0] > 0 and not np.array_equal(a, c)
    assert a.min() >= 0 and a[:, 1:].max() < 2048
    with pytest.raises(RkspeechError, match="greedy graph"):
        _codes(tts_custom_ckpt, plans["frame"], "numpy", case, options=GenerationOptions(seed=0, max_new_tokens=4))


def test_host_loop_choice(tts_custom_ckpt, plans, tmp_path, tts):
    """numpy needs both stage graphs in the plan: a vocoder-only plan is refused in one line; auto
    picks numpy for a stage plan and torch with --host-stages."""
    from rkspeech.runtime.tts.speak import Speaker

    raw = json.loads(plans["frame"].read_text())
    raw.pop("talker")
    vocoder_only = plans["frame"].parent / "no_talker.json"
    vocoder_only.write_text(json.dumps(raw))
    with pytest.raises(RkspeechError, match="numpy host loop") as e:
        Speaker(tts_custom_ckpt, vocoder_only, host="numpy")
    assert "\n" not in str(e.value)
    with Speaker(tts_custom_ckpt, plans["frame"], threads=1, stage_threads=2) as sp:
        assert sp.host == "numpy"
        # every onnxruntime session of a Speaker sleeps between parallel sections (speak.SPIN), the
        # stages with their own thread count
        talker, cp = sp.stage_backends["talker"].decode[0], sp.stage_backends["code_predictor"].runner
        sessions = [talker.session, cp.session] + [r.session for r in sp.pool._owned]
        assert len(sessions) == 4
        for s in sessions:
            assert s.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert [s.get_session_options().intra_op_num_threads for s in sessions] == [2, 2, 1, 1]
    with Speaker(tts_custom_ckpt, plans["frame"], threads=1, host_stages=True) as sp:
        assert sp.host == "torch" and sp.stage_names == {"talker": "torch", "code_predictor": "torch"}
    with pytest.raises(RkspeechError, match="host loop numpy was asked for with a loaded TTSModel"):
        Speaker(tts_custom_ckpt, plans["frame"], model=tts, host="numpy")


def test_safetensors_reader_equals_torch(tmp_path):
    """bfloat16 (the published files), float16 and float32 read without torch equal torch's
    ``.to(torch.float32)`` bit for bit; embedding rows convert alone; a missing key is one line."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    from rkspeech.runtime.tts.host_weights import EmbeddingRows, SafetensorsFile

    g = torch.Generator().manual_seed(0)
    tensors = {"bf": torch.randn(5, 7, generator=g).to(torch.bfloat16),
               "f16": torch.randn(3, 4, generator=g).to(torch.float16),
               "f32": torch.randn(6, generator=g)}
    save_file(tensors, str(tmp_path / "w.safetensors"), metadata={"format": "pt"})
    f = SafetensorsFile(tmp_path / "w.safetensors")
    for k, t in tensors.items():
        got = f.get(k)
        assert got.dtype == np.float32 and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(np.uint32), t.to(torch.float32).numpy().view(np.uint32))
    rows = EmbeddingRows(f, "bf", (5, 7)).rows([4, 0, 4])
    np.testing.assert_array_equal(rows, tensors["bf"].to(torch.float32).numpy()[[4, 0, 4]])
    with pytest.raises(RkspeechError, match="missing key nope"):
        f.get("nope")
    with pytest.raises(RkspeechError, match=r"has shape \(5, 7\)"):
        f.get("bf", (7, 5))


def test_graphs_of_another_checkpoint_are_refused(tmp_path_factory, plans):
    """The numpy loop checks each stage graph's contract (fingerprint from the numpy weights): a
    model root with other weights of the same shape is refused in one line before any frame."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.runtime.tts.speak import Speaker

    other = write_tts_checkpoint(tmp_path_factory.mktemp("tts_other"), "reduced", "custom-voice", 1)
    for form in ("step", "frame"):
        with pytest.raises(RkspeechError, match="does not match this model") as e:
            Speaker(other, plans[form], threads=1, host="numpy")
        assert "\n" not in str(e.value)


def test_serve_without_torch_speaks_what_the_torch_loop_speaks(tts_custom_ckpt, plans, tmp_path):
    """``rkspeech serve``'s speech endpoint over the numpy loop in a child process where torch
    cannot be imported: the wav it streams is the torch loop's PCM for the same text and options."""
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker
    from rkspeech.runtime.wav import to_int16

    text, voice = CASES[1][0], CASES[1][1]
    opts = GenerationOptions.greedy(max_new_tokens=FRAMES + 1)
    with Speaker(tts_custom_ckpt, plans["step"], threads=1, host="torch", options=opts) as sp:
        want = to_int16(sp.speak(text, speaker=voice)).astype("<i2").tobytes()
    out = tmp_path / "served.wav"
    code = BLOCKER + textwrap.dedent(f"""
        import json, urllib.request
        from rkspeech.models.qwen3_tts.sampling import GenerationOptions
        from rkspeech.runtime.tts.speak import Speaker
        from rkspeech.serve.engines import ServePool
        from rkspeech.serve.options import ServeOptions
        from rkspeech.serve.server import ServerThread

        sp = Speaker({str(tts_custom_ckpt)!r}, {str(plans["step"])!r}, threads=1,
                     options=GenerationOptions.greedy(max_new_tokens={FRAMES + 1}))
        assert sp.host == "numpy"
        st = ServerThread(ServePool(speakers=[sp], max_queue=2), ServeOptions(wyoming=None, http="127.0.0.1:0")).start()
        try:
            req = urllib.request.Request(f"http://{{st.addresses['http']}}/v1/audio/speech", method="POST",
                                         data=json.dumps({{"model": "tts-1", "voice": {voice!r}, "input": {text!r},
                                                          "response_format": "wav"}}).encode(),
                                         headers={{"Content-Type": "application/json"}})
            with urllib.request.urlopen(req, timeout=300) as r:
                open({str(out)!r}, "wb").write(r.read())
        finally:
            assert st.stop()
        assert not [m for m in sys.modules if m.split(".")[0] == "torch"] and not attempts, attempts
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-3000:]
    from rkspeech.serve.audio import wav_header

    assert len(want) > 0 and out.read_bytes() == wav_header(24000) + want


def test_one_loop_over_either_host():
    """The generation loop is written once (``models.qwen3_tts.loop``): both model classes inherit
    the prompt and the frames from ``HostModel``, and each host implements the whole
    ``HostOps`` interface, so a method added to one host only fails here."""
    import inspect

    from rkspeech.models.qwen3_tts.generate import HostModel, TTSModel
    from rkspeech.models.qwen3_tts.loop import HostOps
    from rkspeech.models.qwen3_tts.numpy_host import NumpyHost
    from rkspeech.models.qwen3_tts.torch_host import TorchHost
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel

    wanted = {n for n, v in vars(HostOps).items() if inspect.isfunction(v)} | {"name", "rope"}
    assert len(wanted) > 15
    for host in (NumpyHost, TorchHost):
        missing = sorted(n for n in wanted if not hasattr(host, n))
        assert not missing, (host.__name__, missing)
    assert (NumpyHost.name, TorchHost.name) == ("numpy", "torch")
    for cls in (TTSModel, NumpyTTSModel):
        assert issubclass(cls, HostModel)
        assert "prompt_rows" not in vars(cls) and "prompt_request" not in vars(cls)  # the prompt is HostModel's
