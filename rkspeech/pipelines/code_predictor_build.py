"""Checkpoint -> verified .rknn of the Qwen3-TTS code predictor.

``form`` (``pipelines.code_predictor_forms``): ``step`` (default; the stack as a one-position
step graph, 16 calls a frame, the host choosing each code: greedy or sampled) or ``frame`` (the
greedy frame unrolled into one call).  Stages (``pipelines.resumable``; each skipped when its
inputs are unchanged), all under ``out/code_predictor/``: export (the form's graph, onnxruntime
codes checked against torch on one frame) -> lint -> convert (``rkspeech.convert``, the contract
in the .rknn custom string) -> inspect (target, contract survived and equals the ONNX's) ->
verify (the simulator: greedy codes of ``verify_frames`` frames against torch's).

``dtype="int16-hybrid"`` (``rkspeech build qwen3-tts --code-predictor-dtype int16-hybrid``):
the int16-legal graph (``*_i16.onnx``: mask -20), a calibration stage (``calibration_frames``
greedy frames of ``CALIB_TEXTS`` on other speakers than the verify runs', saved as
``calib/dataset.txt``: one line per graph call) and the hybrid int16 + fp16 conversion
(``convert.hybrid_int16``), verified on the simulator built the same way; fp16 stays the
default (reduced checkpoint, simulator: frame form 99.56 % greedy agreement over 720 frames
against fp16's 98.48 %; step form 99.06 % against fp16's 98.14 % over the build's 720 verify frames;
docs/code-predictor-step.md).

``build_code_predictor`` returns the JSON-able report the ``rkspeech build qwen3-tts`` plan keeps
per graph: ``artifacts``, ``placement``, ``build``, ``rknn``, ``sim`` (None with ``skip_sim``).
The verify frames come from greedy ``TTSModel`` runs (the talker in torch) whose code-predictor
inputs are captured (``greedy_frames_with_inputs``) and replayed through the simulator; the talker
is the slow part at the published size (~2 s a frame on the 2-core build host).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rkspeech.core.capture import CALM_CLEAR_VOICE, sample_request, tone_clip
from rkspeech.core.compare import energies, json_number, snr_db_of_energy
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import TARGETS
from rkspeech.pipelines.code_predictor_forms import DEFAULT_FORM, get_form
from rkspeech.pipelines.sequence import Graph, record_sim_golden, run_sequence

SUBDIR = "code_predictor"
EMBED = "onehot"  # the frame form's in-graph feedback (the reference logits come from it too)
DTYPES = ("fp16", "int16-hybrid")
#: Texts of the int16-hybrid calibration runs (not in the verify set).
CALIB_TEXTS = ("Seven large boxes arrived at the office late on Thursday afternoon.",
               "Turn left at the second traffic light and park behind the blue building.",
               "She played the violin while her brother read the newspaper aloud.")
#: Texts of the verify runs, in order, each run until it ends or the frames are collected.
VERIFY_TEXTS = ("Hello there, this is a test of the code predictor.",
                "The quick brown fox jumps over the lazy dog near the river bank.",
                "Speech synthesis on a small board needs every stage to keep up with real time.",
                "Numbers like twelve point five frames a second add up quickly.")


def _request(tts, i: int) -> dict:
    """generate_frames keywords for verify run ``i`` (a base model clones a 1 s two-tone clip)."""
    return sample_request(tts, i, instruct=CALM_CLEAR_VOICE, ref_audio=tone_clip((220, 0.3), (1330, 0.1)))


def capture_frames(tts, frames: int, texts=VERIFY_TEXTS, first_run: int = 0) -> list[tuple]:
    """``frames`` greedy frames' code-predictor inputs and torch codes (``texts`` in turn; run i
    uses ``_request(tts, first_run + i)``: the calibration runs start at another speaker)."""
    from rkspeech.stepgraph.code_predictor_step import greedy_frames_with_inputs

    out: list[tuple] = []
    for i, text in enumerate(tuple(texts) * max(1, math.ceil(frames / 8))):
        if len(out) >= frames:
            break
        out += greedy_frames_with_inputs(tts, text, frames - len(out), **_request(tts, first_run + i))
    if not out:
        raise RkspeechError("the greedy verify runs produced no frame (the talker ended at once)")
    return out


def compare_frames(torch_logits, torch_codes, graph_logits) -> dict:
    """Greedy agreement and logit SNR of a graph against torch over frames.

    ``*_logits [F, G-1, V]``, ``torch_codes [F, G-1]``.  ``code_agreement``: fraction of codebook
    entries whose graph code (argmax) equals torch's; ``logit_snr_db``: torch logits' energy over
    the error energy, each frame counted up to and including its first disagreeing codebook
    (after it the two see different inputs); ``frames_identical``; ``worst_frame_snr_db``;
    ``decisions`` (the code decisions made on the same inputs as torch's: each frame's up to and
    including its first miss) and ``decision_agreement`` (the share of them that agree).  One near-tie
    early in a frame makes ``code_agreement`` lose the frame's later codebooks too (the published
    massive root's simulator build: 2 misses cost 23 of 750 entries), so the two say different things:
    how often the graph picks another code on the same input, and how much of the output changes.
    ``misses``: each frame's first miss with torch's margin for its code over the graph's
    (``fp32_gap``) beside the row's logit RMS and the graph's logit error there (``error_rms``): a
    gap inside the error is a near-tie that any rounding may flip."""
    tl, gl = np.asarray(torch_logits, np.float64), np.asarray(graph_logits, np.float64)
    tc = np.asarray(torch_codes)
    if tl.shape != gl.shape or tc.shape != tl.shape[:2]:
        raise RkspeechError(f"compare_frames: shapes {tl.shape} / {gl.shape} / {tc.shape} do not match")
    gc = gl.argmax(-1)
    sig = err = 0.0
    identical, decisions, worst, misses = 0, 0, math.inf, []
    for f in range(tl.shape[0]):
        bad = np.nonzero(gc[f] != tc[f])[0]
        k = int(bad[0]) + 1 if bad.size else tc.shape[1]
        identical += not bad.size
        decisions += k
        if bad.size:
            j, row = int(bad[0]), tl[f, int(bad[0])]
            misses.append({"frame": f, "codebook": j + 1, "fp32_gap": float(row[tc[f, j]] - row[gc[f, j]]),
                           "row_rms": float(np.sqrt(np.mean(row ** 2))),
                           "error_rms": float(np.sqrt(np.mean((gl[f, j] - row) ** 2)))})
        s, e = energies(tl[f, :k], gl[f, :k])
        sig, err = sig + s, err + e
        worst = min(worst, snr_db_of_energy(s, e))
    return {"frames": int(tl.shape[0]), "code_agreement": float((gc == tc).mean()),
            "frames_identical": identical, "decisions": decisions,
            "decision_agreement": (decisions - (tl.shape[0] - identical)) / decisions if decisions else None,
            "logit_snr_db": json_number(snr_db_of_energy(sig, err)),
            "worst_frame_snr_db": json_number(worst), "misses": misses}


def torch_frame_logits(tts, captured) -> np.ndarray:
    """The fp32 torch frame graph's logits ``[F, G-1, V]`` on captured inputs."""
    import torch

    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    step = CodePredictorFrame(tts.net.talker.code_predictor, embed=EMBED).eval()
    with torch.no_grad():
        return np.stack([step(h, f).numpy() for h, f, _ in captured])


def check_torch_frame_graph(ref_logits, torch_codes) -> None:
    """Refuse when the fp32 torch frame graph's greedy codes (``ref_logits [F, G-1, V]``) differ
    from ``TTSModel``'s (``torch_codes [F, G-1]``): the verify stage's reference would then be
    wrong.  The message names the first miss and the top-two gap of the codebook before it (the
    graph feeds its choice back in, so a wrong feedback shows one codebook later: the seed-5
    reduced root's near-tie of 9.5e-7, before ``ONEHOT_STAGES``)."""
    ref = np.asarray(ref_logits)
    codes = np.asarray(torch_codes)
    bad = np.argwhere(ref.argmax(-1) != codes)
    if not bad.size:
        return
    f, j = (int(x) for x in bad[0])
    before = ""
    if j > 0:
        top2 = np.sort(ref[f, j - 1])[-2:]
        before = f"; codebook {j}'s top-two logit gap {float(top2[1] - top2[0]):.3g}"
    raise RkspeechError(f"the torch frame graph's codes differ from TTSModel's (export bug): {len(bad)} of "
                        f"{codes.size} code decisions, first at frame {f} codebook {j + 1} (graph's code "
                        f"{int(ref[f, j].argmax())}, TTSModel's {int(codes[f, j])}){before}")


def build_code_predictor(stages, files, out: Path, *, target: str, verify_frames: int = 20,
                         skip_sim: bool = False, timeout: float | None = None, model=None,
                         dtype: str = "fp16", calibration_frames: int = 240, hybrid=None,
                         form: str = DEFAULT_FORM, convert: bool = True, layout: dict | None = None,
                         fp16_rescale: list | None = None) -> dict:
    """Run (or resume) the code predictor's stages in ``out / "code_predictor"``; the report.

    ``stages``: a ``pipelines.resumable.StageRunner`` (its state file may be shared with the other
    graphs of the build: the stage names here start with ``code_predictor_``); ``files``: the
    model root's ``ModelFiles``; ``model``: a ``LazyTTSModel`` shared with the build's other
    stages (default: one of its own); ``dtype``: ``DTYPES`` (``int16-hybrid``: calibrated on
    ``calibration_frames`` frames, ``hybrid`` a ``convert.hybrid_int16.HybridInt16Options``); ``form``:
    ``code_predictor_forms.FORMS``; ``convert=False``: export (and its onnxruntime check) only, for a
    CPU placement (no lint, .rknn or simulator; ``placement``, ``build``, ``sim`` are None);
    ``layout``: the step form's ``kv_layout`` / ``cache_io`` (``cpu_stages.CPU_EXPORT`` for a CPU
    placement; None: the NPU's; the frame form has no cache input and ignores it); ``fp16_rescale``:
    the exact rescale ``model`` carries (``pipelines.fp16_headroom``), in the export's key so that
    a changed one re-exports (None or []: none)."""
    shape = get_form(form)
    if not convert and dtype != "fp16":
        raise RkspeechError(f"a code predictor that is not converted has no {dtype} build; use dtype fp16")
    if dtype not in DTYPES:
        raise RkspeechError(f"unknown code predictor dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if calibration_frames < 1:
        raise RkspeechError(f"calibration_frames must be >= 1, got {calibration_frames}")
    if target not in TARGETS:
        raise RkspeechError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    if verify_frames < 1:
        raise RkspeechError(f"verify_frames must be >= 1, got {verify_frames}")
    folder = Path(out) / SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    i16 = dtype == "int16-hybrid"
    stem = shape.stem + ("_i16" if i16 else "")
    onnx_path = folder / f"{stem}.onnx"
    rknn_path = folder / f"{stem}_{target}.rknn"
    dataset = folder / "calib" / "dataset.txt"
    if i16 and hybrid is None:
        from rkspeech.convert.hybrid_int16 import HybridInt16Options

        hybrid = HybridInt16Options()
    hybrid_key = hybrid.to_dict() if i16 else None
    if model is None:
        from rkspeech.models.qwen3_tts.generate import LazyTTSModel

        model = LazyTTSModel(files)
    ckpt = [Path(files.config), Path(files.weights)]

    def do_export():
        tts = model.get()
        contract = shape.export(tts, onnx_path, i16, **layout_kw)
        # one frame through onnxruntime must give torch's greedy codes
        captured = capture_frames(tts, 1)
        with shape.open(onnx_path, "ort", model=tts) as g:
            h, f, codes = captured[0]
            got = [int(c) for c in g.infer(h.numpy()[0], f.numpy()[0])["logits"].argmax(-1)]
        if got != [int(c) for c in codes[1:]]:
            raise RkspeechError(f"{onnx_path.name}: onnxruntime codes {got} differ from torch's {list(codes[1:])}")
        return {"onnx": str(onnx_path), "bytes": onnx_path.stat().st_size, "contract": contract,
                "ort_codes_equal_torch": True}

    layout_kw = dict(layout or {}) if form == "step" else {}
    export_key = {"form": form, "embed": EMBED} if form == "frame" else {"form": form, **layout_kw}
    if fp16_rescale:  # absent when empty: builds without one keep their fingerprints
        export_key["fp16_rescale"] = fp16_rescale
    export = stages.run("code_predictor_export", {**export_key, **({"int16_ready": True} if i16 else {})}, ckpt,
                        lambda: [onnx_path], do_export)

    calib = None
    if i16:
        def do_calib():
            from rkspeech.core.atomic import write_text

            tts = model.get()
            captured = capture_frames(tts, calibration_frames, CALIB_TEXTS, first_run=3)
            dataset.parent.mkdir(parents=True, exist_ok=True)
            lines = shape.write_calibration(tts, captured, dataset.parent, onnx_path)
            write_text(dataset, "\n".join(lines) + "\n")
            return {"frames": len(captured), "samples": len(lines), "dataset": str(dataset)}

        calib = stages.run("code_predictor_calibrate", {"frames": calibration_frames, "form": form},
                           ckpt + [onnx_path], lambda: [dataset], do_calib)

    if not convert:
        return {"target": None, "form": form, "role": shape.role, "dtype": dtype,
                **({"embed": EMBED} if form == "frame" else {}),
                "artifacts": {"onnx": str(onnx_path), "rknn": None},
                "contract": shape.read_contract(onnx_path).to_json(),
                "placement": None, "build": None, "rknn": {"bytes": None, "onnx_bytes": export["bytes"]},
                "lint": None, "sim": None,
                "stages": {k: v for k, v in stages.timings.items() if k.startswith("code_predictor_")}}
    graph = Graph(shape.role, onnx_path, rknn_path, shape.read_contract(onnx_path).to_json(), dtype=dtype,
                  dataset=dataset if i16 else None, hybrid=hybrid if i16 else None)
    # the golden replay: onnxruntime's when the simulator is skipped, else the verify stage's own
    # simulator build records it (one build instead of two)
    seq = run_sequence(stages, [graph], target=target, timeout=timeout, prefix="code_predictor_",
                       golden="ort" if skip_sim else None)
    lint = {k: seq["lint"][shape.role][k] for k in ("errors", "warnings")}
    conv, inspect = seq["convert"][shape.role], seq["inspect"][shape.role]

    sim = None
    if not skip_sim:
        def do_verify():
            tts = model.get()
            captured = capture_frames(tts, verify_frames)
            ref = torch_frame_logits(tts, captured)
            codes = np.stack([c[1:] for _, _, c in captured])
            check_torch_frame_graph(ref, codes)
            with shape.open(onnx_path, "sim", model=tts, target=target, dtype=dtype,
                            dataset=str(dataset) if i16 else None, hybrid=hybrid_key,
                            log_path=str(folder / "simulator.log")) as g:
                golden = record_sim_golden(graph, shape.runner(g), target=target)
                got = np.stack([g.infer(h.numpy()[0], f.numpy()[0])["logits"] for h, f, _ in captured])
            return {**compare_frames(ref, codes, got), "golden": golden}

        from rkspeech.plan.integrity import golden_path

        sim = stages.run("code_predictor_verify", {"frames": verify_frames, "target": target, "dtype": dtype,
                                                   "form": form, "golden": 1, **({"hybrid": hybrid_key} if i16 else {})},
                         ckpt + [onnx_path, rknn_path] + ([dataset] if i16 else []),
                         lambda: [golden_path(rknn_path)], do_verify)

    placement = conv["placement"]
    return {
        "target": target, "form": form, "role": shape.role, "dtype": dtype,
        **({"embed": EMBED} if form == "frame" else {}),
        **({"calibration": calib, "hybrid": (conv.get("extra") or {}).get("hybrid", hybrid_key)} if i16 else {}),
        "artifacts": {"onnx": str(onnx_path), "rknn": str(rknn_path)},
        "contract": graph.custom_string,
        "placement": {"npu_ops": placement.get("npu_ops"), "cpu_ops": placement.get("cpu_ops"),
                      "cpu_op_types": placement.get("cpu_op_types"),
                      "estimate": placement.get("estimate")},
        "build": {k: conv["build"].get(k) for k in ("regtask_overflow_lines", "seconds", "peak_rss_mb", "log")},
        "rknn": {"bytes": inspect["bytes"], "onnx_bytes": export["bytes"]},
        "lint": lint,
        "sim": sim,
        "stages": {k: v for k, v in stages.timings.items() if k.startswith("code_predictor_")},
    }
