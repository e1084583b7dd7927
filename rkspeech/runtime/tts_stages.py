"""Open the talker and code predictor backends a plan places (``plan.stages``) for a loaded model.

A stage in the plan runs as its graph on the backend ``StagePlan.backend_for`` picks (the vocoder's
backend for NPU stages: the simulator here, rknnlite on a board; onnxruntime for host-ONNX
stages); a stage the plan does not hold stays in torch.  ``host_stages`` keeps both in torch
whatever the plan says (to compare, or when the graphs' limits do not suit a request).
"""

from __future__ import annotations

from rkspeech.core import progress


def open_stage_backends(plan, backend: str, *, threads: int | None = None, target: str | None = None,
                        host_stages: bool = False) -> dict:
    """``{"talker": TalkerBackend, "code_predictor": CodePredictorBackend}`` for the stages the
    plan holds (either key may be absent: torch)."""
    if host_stages:
        return {}
    out = {}
    cp = plan.stages.get("code_predictor")
    if cp is not None:
        from rkspeech.stepgraph.code_predictor_backend import GraphCodePredictor

        be = cp.backend_for(backend)
        out["code_predictor"] = GraphCodePredictor(cp.paths(backend)["frame"], backend=be, threads=threads,
                                                   target=target)
        progress.info(f"code predictor: {cp.impl} graph on {be}")
    talker = plan.stages.get("talker")
    if talker is not None:
        from rkspeech.pipelines.talker_build import open_talker

        be = talker.backend_for(backend)
        out["talker"] = open_talker(talker.paths(backend), be, threads=threads, target=target)
        progress.info(f"talker: {talker.impl} graph on {be}")
    return out


def check_stages_for_model(backends: dict, model) -> None:
    """Each graph backend checks its contract against the model it will serve (one line on a
    mismatch); backends without such a check pass."""
    for b in backends.values():
        check = getattr(b, "check_model", None)
        if check is not None:
            check(model)
