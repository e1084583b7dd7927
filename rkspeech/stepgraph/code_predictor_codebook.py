"""The code predictor as one NPU call per position: its decoder stack as a B = 1 step graph.

The frame graph (``code_predictor_step.CodePredictorFrame``) unrolls the 15-codebook loop and
feeds its own argmax back; the NPU compiler then stores the stack's weights once per unrolled
pass (published 0.6B: a 2.88 GB .rknn, 18.9 GB to convert) and sampling is impossible.  Here the
stack alone is the graph (``talker_step.TalkerStep`` over ``code_predictor.model``, capacity
G = 16 positions, B = 1, named ``CODE_PREDICTOR_STEP_MODEL`` in its contract); the host does
what is cheap per codebook (``runtime.tts.code_predictor_codebook``).

``mask_value=INT16_MASK`` (the contract records it; the host's ``step_mask`` uses it): the
graph's mask input stays inside w16a16i_dfp's +-16384, for the ``int16-hybrid`` conversion.
"""

from __future__ import annotations

from rkspeech.contracts.talker import CODE_PREDICTOR_STEP_MODEL, MASK_VALUE


def code_predictor_step(cp, *, mask_value: float = MASK_VALUE, kv_layout: str = "heads", cache_io: str = "flat",
                        B: int = 1):
    """The B = 1 step graph (a ``TalkerStep``) over ``cp`` (``talker.code_predictor``);
    ``kv_layout`` / ``cache_io`` as ``TalkerStep``'s (the defaults are the NPU's).  ``B=2``: the
    *start* graph, a frame's first two positions (the talker's hidden state and codebook 0's
    embedding) in one call (``pipelines.cpu_start``)."""
    from rkspeech.stepgraph.talker_step import TalkerStep

    cfg = cp.model.cfg
    return TalkerStep(cp.model, capacity=cfg.num_code_groups, B=B, kv_layout=kv_layout, cache_io=cache_io,
                      name=CODE_PREDICTOR_STEP_MODEL, mask_value=mask_value)
