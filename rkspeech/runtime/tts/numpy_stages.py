"""The numpy host loop's graph stages: the code predictor's step graph with its heads on the host,
and the opening of a plan's talker and code predictor for ``runtime.tts.numpy_loop.NumpyTTSModel``.

Split from ``numpy_loop`` (the loop, its numerics and sampling); nothing here imports torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.tts.numpy_loop import linear


class NumpyCodebookCodePredictor:
    """``runtime.tts.code_predictor_codebook.CodebookCodePredictor`` with numpy host heads: the
    step graph (one position a call, host KV cache) with ``small_to_mtp_projection``,
    ``lm_head[j-1]`` and ``codec_embedding[j-1]`` from ``HostWeights``."""

    greedy_only = False

    def __init__(self, path, backend: str, *, weights, cfg, heads: dict | None = None, start=None, **runner_kw):
        from rkspeech.runtime.tts.code_predictor_codebook import open_step_stack
        from rkspeech.runtime.tts.heads import open_heads

        self.w = weights
        self.groups = cfg.code_predictor.num_code_groups

        def check(contract):
            check_stack_contract(contract, cfg.code_predictor, weights.cp_fingerprint, Path(path).name)

        self.path, self.name, _, self.stack = open_step_stack(path, backend, self.groups, check=check, rope="numpy",
                                                              start=start, **runner_kw)
        try:
            self.heads = open_heads(heads, cfg.code_predictor, weights.cp_fingerprint,
                                    threads=runner_kw.get("threads"), spin=runner_kw.get("spin", True))
            if self.heads is not None:
                self.name += f" + {len(self.heads)} head graphs"
        except BaseException:
            self.close()
            raise

    @property
    def calls(self) -> int:
        return sum(self.stack.calls.values())

    def _project(self, x: np.ndarray) -> np.ndarray:
        return x if self.w.cp_proj_w is None else linear(x, self.w.cp_proj_w, self.w.cp_proj_b)

    def frame(self, hidden: np.ndarray, first_embed: np.ndarray, choose) -> list[int]:
        """Codebooks 1..G-1; ``choose(j, logits)`` (numpy float32 ``[V]``) picks each."""
        w, stack = self.w, self.stack
        x = np.stack([np.asarray(hidden, np.float32).reshape(-1), np.asarray(first_embed, np.float32).reshape(-1)])
        codes: list[int] = []
        stack.start(self.groups)
        h = stack.forward(self._project(x))
        for j in range(1, self.groups):
            lg = self.heads.logits(j, h) if self.heads is not None else linear(h, w.cp_head[j - 1])
            code = int(choose(j, lg))
            codes.append(code)
            if j < self.groups - 1:
                h = stack.forward(self._project(w.cp_embedding[j - 1][code:code + 1]))
        return codes

    def close(self) -> None:
        for name in ("stack", "heads"):
            part = getattr(self, name, None)
            setattr(self, name, None)
            if part is not None:
                part.close()


def check_stack_contract(contract, stack_cfg, fingerprint: str, where: str) -> None:
    """``stepgraph.talker_step.check_contract_matches`` from the config and numpy weights: one line
    when the graph was exported from another checkpoint."""
    want = {"hidden": stack_cfg.hidden_size, "layers": stack_cfg.num_hidden_layers,
            "heads": stack_cfg.num_attention_heads, "kv_heads": stack_cfg.num_key_value_heads,
            "head_dim": stack_cfg.head_dim, "rope_theta": float(stack_cfg.rope_theta),
            "rms_norm_eps": float(stack_cfg.rms_norm_eps), "fingerprint": fingerprint}
    for key, need in want.items():
        have = getattr(contract, key)
        if have != need:
            raise RkspeechError(f"{where} does not match this model: its contract has {key}={have!r}, the model "
                                f"{need!r}; export the graphs from this checkpoint")


def open_numpy_stages(plan, backend: str, *, model, threads: int | None = None, target: str | None = None,
                      core_mask: str | None = None, spin: bool = True) -> dict:
    """``{"talker": GraphTalker, "code_predictor": ...}`` for a plan that places both stages,
    without torch (``runtime.tts.open_stages.open_stage_backends``' numpy twin; ``core_mask`` and
    ``spin`` as there)."""
    from rkspeech.core import progress
    from rkspeech.runtime.tts.open_stages import describe_placement, open_talker, stage_threads

    out: dict = {}
    caller_threads = threads
    try:
        cp = plan.stages["code_predictor"]
        be = cp.backend_for(backend)
        threads = stage_threads(cp, caller_threads)
        build = cp.simulator_build() if be == "sim" else {}
        (role, path), = cp.paths(backend).items()
        if role == "step":
            out["code_predictor"] = NumpyCodebookCodePredictor(path, be, weights=model.weights, cfg=model.cfg,
                                                               heads=cp.heads, start=cp.start, threads=threads,
                                                               target=target, spin=spin,
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
        out["talker"] = open_talker(talker.artifacts, be, threads=threads, target=target, rope="numpy", spin=spin,
                                    core_mask=talker.core_mask or core_mask)
        check_stack_contract(out["talker"].contract, model.cfg.talker, model.weights.talker_fingerprint,
                             "the talker decode graph")
        progress.info(f"talker: graph {talker.paths(backend)['decode'].name}, {describe_placement(talker, be, threads)} "
                      "(numpy host loop)")
    except BaseException:
        for b in out.values():
            b.close()
        raise
    return out
