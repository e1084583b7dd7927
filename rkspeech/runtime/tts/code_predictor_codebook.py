"""The code predictor's step graph run from the host: one NPU call per position.

The frame graph (``code_predictor_step.CodePredictorFrame``) unrolls the 15-codebook loop and
feeds its own argmax back; the NPU compiler then stores the stack's weights once per unrolled
pass (published 0.6B: a 2.88 GB .rknn, 18.9 GB to convert) and sampling is impossible.  Here the
stack alone is the graph (``talker_step.TalkerStep`` over ``code_predictor.model``, capacity
G = 16 positions, B = 1, named ``qwen3-tts-code-predictor-step`` in its contract) and the host
does what is cheap per codebook: ``small_to_mtp_projection``, ``lm_head[j-1]`` (H x V), the
choice (greedy or sampled: ``choose``), ``codec_embedding[j-1]``.  The host keeps the KV cache
(``runtime.tts.talker_backend.GraphTalker``): 16 NPU calls per frame (positions 0 and 1 are the
talker's hidden state and codebook 0's embedding), 200 a second of audio.

:class:`CodebookCodePredictor` is a ``CodePredictorBackend`` (``models.qwen3_tts.backends``) that
is not greedy-only; its frame is ``models.qwen3_tts.loop.predict_frame`` over the loaded model's
host (torch for ``TTSModel``, numpy for ``NumpyTTSModel``).  Its ``infer(hidden, first_embed)`` returns the greedy frame's logits
``[G-1, V]`` like ``GraphCodePredictor.infer``, so the build verifies both forms alike.

``mask_value=INT16_MASK`` (the contract records it; the host's ``step_mask`` uses it): the
graph's mask input stays inside w16a16i_dfp's +-16384, for the ``int16-hybrid`` conversion.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.read import read_contract
from rkspeech.contracts.talker import CODE_PREDICTOR_START_B, CODE_PREDICTOR_STEP_MODEL, TalkerContract


def check_step_contract(contract: TalkerContract, path: Path, B: int = 1) -> TalkerContract:
    """``contract`` when it is a code-predictor step's with ``B`` positions a call; one line when
    the file holds another graph (a talker step, a frame graph, a step of another B)."""
    if contract.model != CODE_PREDICTOR_STEP_MODEL or contract.B != B:
        raise RkspeechError(f"{path.name}: a {contract.model} graph with B={contract.B}, not a code-predictor step "
                            f"({CODE_PREDICTOR_STEP_MODEL}, B={B})")
    return contract


def _stack_options(model, path) -> tuple[object, object, str, dict]:
    """``(host ops, code predictor config, its weight fingerprint, open_step_stack keywords)`` of a
    loaded model: a ``NumpyTTSModel`` (numpy weights; the graph's contract checked against the
    config, the numpy RoPE recipe) or a ``TTSModel`` (torch: the contract checked against the
    module)."""
    from rkspeech.runtime.tts.host_weights import fingerprint

    ops = getattr(model, "ops", None)
    weights = getattr(model, "weights", None)
    if ops is not None and weights is not None:
        from rkspeech.runtime.tts.talker_backend import check_stack_contract

        cfg, fp = model.cfg.code_predictor, weights.cp_fingerprint

        def check(contract):
            check_stack_contract(contract, cfg, fp, Path(path).name)

        return ops, cfg, fp, {"check": check, "rope": ops.rope}
    net = getattr(model, "net", None)
    cp = getattr(getattr(net, "talker", None), "code_predictor", None)
    if ops is None or cp is None:
        raise RkspeechError(f"a code-predictor step needs the loaded model (TTSModel), got {type(model).__name__}")
    m = cp.model
    fp = fingerprint(m.norm.weight.detach().numpy(), m.layers[0].self_attn.q_proj.weight.detach().numpy())
    return ops, m.cfg, fp, {"model": m, "rope": ops.rope}


def open_step_stack(path, backend: str, groups: int, *, check=None, model=None, rope: str = "torch",
                    start=None, **runner_kw):
    """``(path, name, contract, GraphTalker)`` for the step graph at ``path`` on ``backend``: the
    file and its contract checked (a step's, capacity >= ``groups``; ``check(contract)`` for the
    caller's own), the runner closed again when the stack cannot be made.  ``start``: the start
    graph (B = 2, ``pipelines.cpu_start``), run for a frame's first two positions (the stack's
    prefill); one call a frame fewer."""
    from rkspeech.runtime.runners import check_runner_file, open_runner
    from rkspeech.runtime.tts.talker_backend import GraphTalker

    path = check_runner_file(backend, path)
    name = f"code-predictor step ({backend}: {path.name})"
    contract = check_step_contract(read_contract(path, TalkerContract), path)
    if check is not None:
        check(contract)
    if contract.capacity < groups:
        raise RkspeechError(f"{path.name}: capacity {contract.capacity} < {groups} positions a "
                            "frame needs; export it from this checkpoint")
    pair = None
    if start is not None:
        start = check_runner_file(backend, start)
        pair = check_step_contract(read_contract(start, TalkerContract), start, B=CODE_PREDICTOR_START_B)
        if not pair.same_model(contract):
            raise RkspeechError(f"{start.name} and {path.name} are not the same code predictor (their contracts "
                                "differ); rebuild the plan")
        name += f" + start graph {start.name}"
    runners = [open_runner(backend, path, **runner_kw)]
    try:
        if pair is not None:
            runners.append(open_runner(backend, start, **runner_kw))
        prefill = runners[1] if pair is not None else None
        return path, name, contract, GraphTalker(runners[0], contract, prefill, pair, model=model, name=name,
                                                 rope=rope)
    except BaseException:
        for r in runners:
            r.close()
        raise


class CodebookCodePredictor:
    """A ``CodePredictorBackend`` over the step graph at ``path`` on ``backend`` (``ort``, ``sim``,
    ``rknnlite``); ``model``: the loaded ``TTSModel`` or ``NumpyTTSModel`` (its host runs the
    projection, embeddings and heads here, and the graph's contract is checked against it);
    ``heads``: head graphs (``runtime.tts.heads``) in place of the host's; ``start``: the start
    graph.  Runner keywords as ``open_runner``."""

    greedy_only = False

    def __init__(self, path: str | os.PathLike, backend: str = "ort", *, model, heads: dict | None = None,
                 start=None, **runner_kw):
        self.ops, cfg, fp, stack_kw = _stack_options(model, path)
        self.groups = cfg.num_code_groups
        self.path, self.name, self.contract, self.stack = open_step_stack(path, backend, self.groups, start=start,
                                                                          **stack_kw, **runner_kw)
        self.heads = None
        if heads:
            from rkspeech.runtime.tts.heads import open_heads

            try:
                self.heads = open_heads(heads, cfg, fp, threads=runner_kw.get("threads"),
                                        spin=runner_kw.get("spin", True))
                if self.heads is not None:
                    self.name += f" + {len(self.heads)} head graphs"
            except BaseException:
                self.close()
                raise

    @property
    def calls(self) -> int:
        """Graph calls since the last frame started (16 a frame; 15 with a start graph)."""
        return sum(self.stack.calls.values())

    def frame(self, hidden: np.ndarray, first_embed: np.ndarray, choose) -> list[int]:
        """Codebooks 1..G-1 of one frame; ``choose(j, logits)`` picks each (``logits``: the host's [V])."""
        from rkspeech.models.qwen3_tts.loop import predict_frame

        return predict_frame(self.stack, self.ops, self.groups, hidden, first_embed, choose, self.heads)

    def infer(self, hidden: np.ndarray, first_embed: np.ndarray) -> dict[str, np.ndarray]:
        """The greedy frame's ``logits [G-1, V]`` (as ``GraphCodePredictor.infer``)."""
        rows: list[np.ndarray] = []

        def greedy(_j, logits):
            rows.append(self.ops.numpy(logits).copy())
            return int(logits.argmax())

        self.frame(hidden, first_embed, greedy)
        return {"logits": np.stack(rows)}

    def wrap_runners(self, wrap) -> None:
        """``wrap(role, runner)`` in each graph's runner's place: ``start``, ``step`` and
        ``head{j}`` (the plan's roles; as ``GraphTalker.wrap_runners``)."""
        self.stack.wrap_runners(wrap, ("start", "step"))
        if self.heads is not None:
            self.heads.wrap_runners(wrap)

    def close(self) -> None:
        for name in ("stack", "heads"):
            part = getattr(self, name, None)
            setattr(self, name, None)
            if part is not None:
                part.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
