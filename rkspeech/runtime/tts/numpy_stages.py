"""The opening of a plan's talker and code predictor for ``runtime.tts.numpy_loop.NumpyTTSModel``:
graphs only, their contracts checked against the numpy weights; nothing here imports torch.
"""

from __future__ import annotations

from rkspeech.core.errors import RkspeechError


def open_numpy_talker(artifacts: dict, backend: str, *, model, **runner_kw):
    """``open_stages.open_talker`` for the numpy loop of ``model`` (``NumpyTTSModel``): the numpy
    RoPE recipe, the decode graph's contract checked against the numpy weights (closed again when
    it does not match)."""
    from rkspeech.runtime.tts.open_stages import open_talker
    from rkspeech.runtime.tts.talker_backend import check_stack_contract

    talker = open_talker(artifacts, backend, rope=model.ops.rope, **runner_kw)
    try:
        check_stack_contract(talker.contract, model.cfg.talker, model.weights.talker_fingerprint,
                             "the talker decode graph")
    except BaseException:
        talker.close()
        raise
    return talker


def open_numpy_stages(plan, backend: str, *, model, threads: int | None = None, target: str | None = None,
                      core_mask: str | None = None, spin: bool = True) -> dict:
    """``{"talker": GraphTalker, "code_predictor": ...}`` for a plan that places both stages,
    without torch (``runtime.tts.open_stages.open_stage_backends``' numpy twin; ``core_mask`` and
    ``spin`` as there)."""
    from rkspeech.core import progress
    from rkspeech.runtime.tts.open_stages import describe_placement, stage_threads

    out: dict = {}
    caller_threads = threads
    try:
        cp = plan.stages["code_predictor"]
        be = cp.backend_for(backend)
        threads = stage_threads(cp, caller_threads)
        build = cp.simulator_build() if be == "sim" else {}
        (role, path), = cp.paths(backend).items()
        if role == "step":
            from rkspeech.runtime.tts.code_predictor_codebook import CodebookCodePredictor

            out["code_predictor"] = CodebookCodePredictor(path, be, model=model, heads=cp.heads, start=cp.start,
                                                          threads=threads, target=target, spin=spin,
                                                          core_mask=cp.core_mask or core_mask, **build)
        elif role == "frame":
            from rkspeech.runtime.tts.code_predictor_backend import GraphCodePredictor

            out["code_predictor"] = GraphCodePredictor(path, be, model=model.cfg, threads=threads, target=target,
                                                       spin=spin, core_mask=cp.core_mask or core_mask, **build)
        else:
            raise RkspeechError(f"unknown code predictor form {role!r}; choose one of step, frame")
        progress.info(f"code predictor: {role} graph {path.name}, {describe_placement(cp, be, threads)}"
                      + (f" ({build['dtype']})" if build else ""))
        talker = plan.stages["talker"]
        be = talker.backend_for(backend)
        threads = stage_threads(talker, caller_threads)
        out["talker"] = open_numpy_talker(talker.artifacts, be, model=model, threads=threads, target=target,
                                          spin=spin, core_mask=talker.core_mask or core_mask)
        progress.info(f"talker: graph {talker.paths(backend)['decode'].name}, {describe_placement(talker, be, threads)} "
                      "(numpy host loop)")
    except BaseException:
        for b in out.values():
            b.close()
        raise
    return out
