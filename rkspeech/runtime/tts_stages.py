"""Open the talker and code predictor backends a plan places (``plan.stages``) for a loaded model.

A stage in the plan runs as its graph on the backend ``StagePlan.backend_for`` picks (the vocoder's
backend for NPU stages: the simulator here, rknnlite on a board; onnxruntime for host-ONNX
stages); a stage the plan does not hold stays in torch.  ``host_stages`` keeps both in torch
whatever the plan says (to compare, or when the graphs' limits do not suit a request).
"""

from __future__ import annotations

from rkspeech.core import progress


def open_stage_backends(plan, backend: str, *, model=None, threads: int | None = None, target: str | None = None,
                        host_stages: bool = False) -> dict:
    """``{"talker": TalkerBackend, "code_predictor": CodePredictorBackend}`` for the stages the
    plan holds (either key may be absent: torch).  ``model``: the loaded ``TTSModel`` each graph's
    contract is checked against (one line on a mismatch)."""
    if host_stages:
        return {}
    out = {}
    cp = plan.stages.get("code_predictor")
    if cp is not None:
        from rkspeech.pipelines.code_predictor_forms import get_form

        be = cp.backend_for(backend)
        build = cp.simulator_build() if be == "sim" else {}  # a board loads the .rknn as built
        (role, path), = cp.paths(backend).items()  # "step" or "frame"
        out["code_predictor"] = get_form(role).open(path, be, model=model, threads=threads, target=target, **build)
        progress.info(f"code predictor: {cp.impl} {role} graph on {be}" + (f" ({build['dtype']})" if build else ""))
    talker = plan.stages.get("talker")
    if talker is not None:
        from rkspeech.pipelines.talker_build import open_talker

        be = talker.backend_for(backend)
        try:
            stack = model.net.talker.model if model is not None else None  # the talker's DecoderStack
            out["talker"] = open_talker(talker.artifacts, be, model=stack, threads=threads, target=target)
        except BaseException:
            for b in out.values():
                b.close()
            raise
        progress.info(f"talker: {talker.impl} graph on {be}")
    return out

