"""Open the talker and code predictor backends a plan places (``plan.sections``) for a loaded model.

A stage in the plan runs as its graph on the backend ``StagePlan.backend_for`` picks (the vocoder's
backend for NPU stages: the simulator here, rknnlite on a board; onnxruntime for host-ONNX
stages); a stage the plan does not hold stays in torch.  The model is either host's: a
``TTSModel`` (torch; graphs checked against its modules, torch's RoPE recipe) or a
``runtime.tts.numpy_loop.NumpyTTSModel`` (no torch: graphs checked against its numpy weights,
the numpy RoPE recipe, the code predictor's heads on the numpy host).  ``host_stages`` keeps both in torch
whatever the plan says (to compare, or when the graphs' limits do not suit a request).

A CPU stage (``placement`` ``cpu-fp32`` / ``cpu-int8`` / ``cpu-int4``: impl ``onnx``, its plan
artifacts the variant's ONNX) runs on onnxruntime with the caller's ``threads`` when given, else
the plan's ``threads`` for that stage, else ``core.threads.default_threads()``.  Each opened
backend's ``name`` and progress line say the placement and the file.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core import progress
from rkspeech.core.errors import RkspeechError
from rkspeech.plan.sections import STAGE_ROLES

TALKER_ROLES = STAGE_ROLES["talker"][0]  # ("prefill", "decode")


def open_talker(artifacts: dict, backend: str = "ort", *, model=None, **runner_kw):
    """A ``GraphTalker`` over a plan's talker graphs (``{role: {"onnx": .., "rknn": ..}}``): ONNX
    for ``ort`` / ``sim``, .rknn for ``rknnlite``; named ``talker graph (BACKEND: DECODE FILE)``."""
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    kind = "rknn" if backend == "rknnlite" else "onnx"
    paths = {role: (artifacts.get(role) or {}).get(kind) for role in TALKER_ROLES}
    if not paths["decode"]:
        raise RkspeechError(f"the plan has no talker decode graph as {kind} (backend {backend}); "
                            "rebuild without --skip-talker-rknn" if kind == "rknn" else
                            "the plan has no talker decode graph; rebuild it")
    talker = open_graph_talker(paths["decode"], paths["prefill"], backend=backend, model=model, **runner_kw)
    talker.name = f"talker graph ({backend}: {Path(paths['decode']).name})"
    return talker


def open_talker_for(model, artifacts: dict, backend: str, **runner_kw):
    """``open_talker`` for the generation loop of ``model``: a ``NumpyTTSModel`` (its host's RoPE
    recipe, the decode graph's contract checked against its numpy weights, closed again when it
    does not match), a ``TTSModel`` (checked against its torch stack) or None (unchecked)."""
    weights = getattr(model, "weights", None)
    if weights is None:
        stack = model.net.talker.model if model is not None else None  # the talker's DecoderStack
        return open_talker(artifacts, backend, model=stack, **runner_kw)
    from rkspeech.runtime.tts.talker_backend import check_stack_contract

    talker = open_talker(artifacts, backend, rope=model.ops.rope, **runner_kw)
    try:
        check_stack_contract(talker.contract, model.cfg.talker, weights.talker_fingerprint, "the talker decode graph")
    except BaseException:
        talker.close()
        raise
    return talker


def open_code_predictor(form: str, path, backend: str, *, model=None, heads: dict | None = None, start=None, **kw):
    """The code predictor graph of ``form`` on ``backend``: ``step`` (its stack at one position a
    call, the host's heads choosing each code; ``heads``: their graphs, ``start``: its start graph,
    when the plan has them) or
    ``frame`` (the 15 codebooks unrolled, greedy)."""
    if form == "step":
        from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor

        return CodebookCodePredictor(path, backend, model=model, heads=heads, start=start, **kw)
    if form == "frame":
        from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor as Graph
    else:
        raise RkspeechError(f"unknown code predictor form {form!r}; choose one of step, frame")
    return Graph(path, backend, model=model, **kw)


def stage_threads(stage, threads: int | None) -> int | None:
    """The caller's ``threads`` when given, else the plan's for ``stage`` (None: the runtime's)."""
    return threads if threads is not None else getattr(stage, "threads", None)


def describe_placement(stage, backend: str, threads: int | None) -> str:
    """``cpu-int4 on ort, 2 threads`` / ``npu on sim``: the progress line's account of a stage."""
    from rkspeech.core.threads import default_threads

    return f"{stage.placement} on {backend}" + (f", {threads or default_threads()} threads" if backend == "ort" else "")


def open_stage_backends(plan, backend: str, *, model=None, threads: int | None = None, target: str | None = None,
                        host_stages: bool = False, core_mask: str | None = None, spin: bool = True) -> dict:
    """``{"talker": TalkerBackend, "code_predictor": CodePredictorBackend}`` for the stages the
    plan holds (either key may be absent: torch).  ``model``: the loaded ``TTSModel`` or
    ``NumpyTTSModel`` whose loop runs them, each graph's contract checked against it (one line on
    a mismatch).  ``core_mask``: rknn-lite core of a
    stage whose plan section names none; ``spin``: onnxruntime's."""
    if host_stages:
        return {}
    out = {}
    where = describe_placement
    cp = plan.stages.get("code_predictor")
    if cp is not None:
        be = cp.backend_for(backend)
        build = cp.simulator_build() if be == "sim" else {}  # a board loads the .rknn as built
        (role, path), = cp.paths(backend).items()  # "step" or "frame"
        n = stage_threads(cp, threads)
        out["code_predictor"] = open_code_predictor(role, path, be, model=model, threads=n, target=target,
                                                    heads=cp.heads or None, start=cp.start,
                                                    core_mask=cp.core_mask or core_mask, spin=spin, **build)
        progress.info(f"code predictor: {role} graph {path.name}, {where(cp, be, n)}"
                      + (f" ({build['dtype']})" if build else ""))
    talker = plan.stages.get("talker")
    if talker is not None:
        be = talker.backend_for(backend)
        n = stage_threads(talker, threads)
        try:
            out["talker"] = open_talker_for(model, talker.artifacts, be, threads=n, target=target,
                                            core_mask=talker.core_mask or core_mask, spin=spin)
        except BaseException:
            for b in out.values():
                b.close()
            raise
        decode = talker.paths(backend)["decode"]
        progress.info(f"talker: graph {decode.name}, {where(talker, be, n)}"
                      + (" (numpy host loop)" if getattr(model, "weights", None) is not None else ""))
    if getattr(model, "weights", None) is not None:  # the numpy host clones through the plan's graphs
        try:
            out.update(open_clone_encoders(plan, backend, model=model, threads=threads, spin=spin))
        except BaseException:
            for b in out.values():
                b.close()
            raise
    return out


def open_clone_encoders(plan, backend: str, *, model, threads: int | None = None, spin: bool = True) -> dict:
    """``{"speaker_encoder": GraphSpeakerEncoder, "speech_encoder": GraphSpeechEncoder}`` for the
    cloning encoders the plan holds (``Plan.encoders``), each checked against ``model`` (a
    ``NumpyTTSModel`` of a Base root; other variants clone nothing, so nothing is opened)."""
    from rkspeech.runtime.tts.clone_encoders import (
        GraphSpeakerEncoder,
        GraphSpeechEncoder,
        speaker_fingerprint,
        speech_fingerprint,
    )

    encoders = getattr(plan, "encoders", None) or {}
    if not encoders or model.cfg.tts_model_type != "base":
        return {}
    out: dict = {}
    try:
        for name, stage in encoders.items():
            be = stage.backend_for(backend)
            (role, path), = stage.paths(backend).items()
            n = stage_threads(stage, threads)
            if name == "speaker_encoder":
                out[name] = GraphSpeakerEncoder(path, be, config=model.cfg.speaker_encoder,
                                                fingerprint=speaker_fingerprint(model.weights.file), threads=n,
                                                spin=spin)
            else:
                from rkspeech.models.qwen3_tts.vocoder_checkpoint import resolve_checkpoint

                out[name] = GraphSpeechEncoder(path, be, num_code_groups=model.num_code_groups,
                                               fingerprint=speech_fingerprint(resolve_checkpoint(model.files.root).weights),
                                               threads=n, spin=spin)
            progress.info(f"{name.replace('_', ' ')}: graph {path.name}, {describe_placement(stage, be, n)}")
    except BaseException:
        for b in out.values():
            b.close()
        raise
    return out

