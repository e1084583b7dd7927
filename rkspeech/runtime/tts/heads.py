"""A step-form code predictor's heads as graphs (``pipelines.cpu_heads``: one quantized ``lm_head``
per codebook) on onnxruntime: ``logits(j, hidden)`` in place of the host's fp32 ``hidden @
lm_head[j - 1].T``.  Each file's ``HeadContract`` is checked against the code predictor it
serves (codebooks, sizes, weight fingerprint) before anything runs."""

from __future__ import annotations

import numpy as np

from rkspeech.core.errors import RkspeechError


class HeadGraphs:
    """``paths``: codebook j (1 .. G-1) -> head graph; ``hidden`` / ``vocab`` / ``groups`` /
    ``fingerprint``: the code predictor's; runner keywords (``threads``, ``spin``) as
    ``open_runner``.  Always onnxruntime: the heads are CPU graphs whatever runs the stack."""

    def __init__(self, paths: dict, *, hidden: int, vocab: int, groups: int, fingerprint: str | None = None,
                 **runner_kw):
        from rkspeech.contracts.head import HeadContract
        from rkspeech.contracts.read import read_contract
        from rkspeech.runtime.runners import open_runner

        want = set(range(1, groups))
        if {int(j) for j in paths} != want:
            raise RkspeechError(f"the plan's code predictor heads cover codebooks {sorted(int(j) for j in paths)}, "
                                f"this model has 1..{groups - 1}; rebuild the plan")
        self._runners: dict[int, object] = {}
        try:
            for j, path in sorted((int(j), p) for j, p in paths.items()):
                c = read_contract(path, HeadContract)
                if (c.index, c.hidden, c.vocab_size) != (j, hidden, vocab) or (
                        fingerprint is not None and c.fingerprint != fingerprint):
                    raise RkspeechError(f"{path}: head {c.index} ({c.hidden} -> {c.vocab_size}, fingerprint "
                                        f"{c.fingerprint}) is not codebook {j}'s head of this model; rebuild the plan")
                self._runners[j] = open_runner("ort", path, **runner_kw)
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self._runners)

    def logits(self, j: int, hidden: np.ndarray) -> np.ndarray:
        """Codebook ``j``'s logits (float32 ``[V]``) for ``hidden`` (``[H]`` or ``[1, H]``)."""
        x = np.asarray(hidden, dtype=np.float32).reshape(1, -1)
        return self._runners[j].infer({"hidden": x})["logits"].reshape(-1)

    def wrap_runners(self, wrap) -> None:
        """``wrap(f"head{j}", runner)`` in each head graph's runner's place (as
        ``GraphTalker.wrap_runners``)."""
        self._runners = {j: wrap(f"head{j}", r) for j, r in self._runners.items()}

    def close(self) -> None:
        runners, self._runners = getattr(self, "_runners", {}), {}
        for r in runners.values():
            r.close()


def open_heads(paths: dict | None, cfg, fingerprint: str | None, **runner_kw) -> HeadGraphs | None:
    """``HeadGraphs`` for the code predictor config ``cfg`` (``DecoderStackConfig``), or None when
    the plan has no head graphs (fp32 heads on the host)."""
    if not paths:
        return None
    return HeadGraphs(paths, hidden=cfg.hidden_size, vocab=cfg.vocab_size, groups=cfg.num_code_groups,
                      fingerprint=fingerprint, **runner_kw)
