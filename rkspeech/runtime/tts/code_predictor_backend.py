"""The code-predictor frame graph as a ``CodePredictorBackend`` (``models.qwen3_tts.backends``).

:class:`GraphCodePredictor` runs ``stepgraph.code_predictor_step``'s frame graph, one call per
frame, through a runner of ``rkspeech.runtime.runners``: ``ort`` (the .onnx on onnxruntime),
``sim`` (the .onnx through the rknn-toolkit2 x86 simulator) or ``rknnlite`` (the .rknn on a
board).  The codes are the host's argmax of the graph's ``logits [G-1, V]``
(``greedy_codes``): the graph feeds its own argmax back between codebooks, so the backend is
``greedy_only`` (``TTSModel`` refuses sampling code-predictor options with it).

The contract comes from the artifact (the ONNX metadata ``rkspeech.contract`` or the .rknn
custom string); :meth:`GraphCodePredictor.check_model` (also run by the constructor when
``model=`` is given) refuses a graph exported from another model (Ht, H, V, G, layers) with a
one-line RkspeechError, before the first frame would fail on a shape.
"""

from __future__ import annotations

import os

import numpy as np

from rkspeech.contracts.code_predictor import CodePredictorContract
from rkspeech.contracts.read import read_contract
from rkspeech.core.errors import RkspeechError
from rkspeech.stepgraph.host import greedy_codes

#: contract field -> what it means, for the refusal message
_FIELDS = (("talker_hidden", "Ht (talker hidden)"), ("hidden", "H (code predictor hidden)"),
           ("vocab_size", "V (codebook size)"), ("num_code_groups", "G (code groups)"),
           ("layers", "layers"))


def expected_contract(model) -> dict[str, int]:
    """The contract fields a model needs: ``model`` is a ``TTSModel``, a ``TTSConfig`` or a
    ``CodePredictorContract``."""
    if isinstance(model, CodePredictorContract):
        return {k: getattr(model, k) for k, _ in _FIELDS}
    cfg = getattr(model, "cfg", model)
    try:
        cp, talker = cfg.code_predictor, cfg.talker
        return {"talker_hidden": talker.hidden_size, "hidden": cp.hidden_size, "vocab_size": cp.vocab_size,
                "num_code_groups": cp.num_code_groups, "layers": cp.num_hidden_layers}
    except AttributeError:
        raise RkspeechError(f"cannot read a code-predictor shape from {type(model).__name__}; pass a TTSModel, "
                            "its cfg or a CodePredictorContract") from None


class GraphCodePredictor:
    """A ``CodePredictorBackend`` over the frame graph at ``path`` on ``backend``.

    ``model``: a ``TTSModel`` / ``TTSConfig`` / ``CodePredictorContract`` to check the artifact
    against now (``check_model``); ``target``, ``log_path``: the simulator's; ``threads``:
    onnxruntime's; ``core_mask``: the board's; ``dtype`` / ``dataset``: the simulator's build
    (``int16-hybrid`` with its calibration list for an ``int16_ready`` graph; ``hybrid``:
    ``HybridInt16Options.to_dict()``, default its defaults).
    """

    greedy_only = True

    def __init__(self, path: str | os.PathLike, backend: str = "ort", *, model=None, target: str | None = None,
                 threads: int | None = None, log_path: str | None = None, core_mask: str | None = None,
                 dtype: str = "fp16", dataset: str | None = None, hybrid: dict | None = None, spin: bool = True):
        from rkspeech.runtime.runners import check_runner_file, open_runner

        self.path = check_runner_file(backend, path)
        self.backend = backend
        self.name = f"code-predictor graph ({backend}: {self.path.name})"
        self.contract = read_contract(self.path, CodePredictorContract)
        if model is not None:
            self.check_model(model)
        self.runner = None
        self.runner = open_runner(backend, self.path, threads=threads, target=target, log_path=log_path,
                                  core_mask=core_mask, dtype=dtype, dataset=dataset,
                                  hybrid=hybrid, spin=spin)
        self._check_io()

    def check_model(self, model) -> None:
        """Refuse (one line) when the artifact was not exported from a model of ``model``'s shape."""
        want = expected_contract(model)
        bad = [f"{label} {getattr(self.contract, k)} != {want[k]}" for k, label in _FIELDS
               if getattr(self.contract, k) != want[k]]
        if bad:
            raise RkspeechError(f"{self.path.name}: the code-predictor graph does not match this model ("
                                + ", ".join(bad) + "); export it from this checkpoint")

    def _check_io(self) -> None:
        c = self.contract
        ins = {n: list(s) for n, (s, _) in self.runner.input_specs().items()}
        outs = {n: list(s) for n, (s, _) in self.runner.output_specs().items()}
        if ins != c.input_shapes() or "logits" not in outs or \
                int(np.prod(outs["logits"])) != c.vocab_size * (c.num_code_groups - 1):
            self.close()
            raise RkspeechError(f"{self.path.name}: graph I/O {ins} -> {outs} does not match its contract "
                                f"{c.input_shapes()} -> {c.output_shapes()}")

    def infer(self, hidden: np.ndarray, first_embed: np.ndarray) -> dict[str, np.ndarray]:
        """The graph's outputs (``logits [G-1, V]`` fp32, and ``codes`` for a gather graph)."""
        if self.runner is None:
            raise RkspeechError(f"{self.name}: closed")
        ht = self.contract.talker_hidden
        h = np.asarray(hidden, dtype=np.float32).reshape(-1)
        f = np.asarray(first_embed, dtype=np.float32).reshape(-1)
        if h.size != ht or f.size != ht:
            raise RkspeechError(f"{self.name}: hidden / first_embed have {h.size} / {f.size} values, the graph "
                                f"takes Ht = {ht}; the graph was exported from another model")
        out = self.runner.infer({"talker_hidden": h.reshape(1, ht), "first_embed": f.reshape(1, ht)})
        out["logits"] = out["logits"].reshape(self.contract.num_code_groups - 1, self.contract.vocab_size)
        return out

    def frame(self, hidden: np.ndarray, first_embed: np.ndarray, choose=None) -> list[int]:
        """Codebooks 1..G-1 (greedy; ``choose`` is ignored: the graph feeds its own argmax back)."""
        return [int(c) for c in greedy_codes(self.infer(hidden, first_embed))]

    def wrap_runners(self, wrap) -> None:
        """``wrap("frame", runner)`` in the frame graph's runner's place (as
        ``GraphTalker.wrap_runners``)."""
        self.runner = wrap("frame", self.runner)

    def close(self) -> None:
        runner, self.runner = self.runner, None
        if runner is not None:
            runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
