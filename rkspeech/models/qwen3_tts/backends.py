"""Where the talker and the code predictor run: the two interfaces the generation loop calls.

``TTSModel`` keeps everything that is cheap and host-side (the prompt, the embedding lookups,
``codec_head`` and the sampling) and calls two backends for the decoder stacks:

* :class:`TalkerBackend`: the talker's decoder stack over its own KV cache.  ``start(capacity)``
  opens an utterance; ``forward(embeds [t, Ht] float32)`` appends ``t`` positions (the prompt's
  prefill, then one position per frame) and returns the **last** position's final-normed hidden
  state ``[Ht]`` float32.  That is all an RKLLM runner has to provide on a board (RKLLM takes
  input embeddings and can return the last hidden layer), which is why logits are not part of
  the interface: ``codec_head`` (Ht x 3072) runs on the host.
* :class:`CodePredictorBackend`: one frame's codebooks 1..G-1 from the talker's hidden state
  ``[Ht]`` and codebook 0's embedding ``[Ht]``; ``choose(j, logits)`` picks codebook ``j`` from its
  logits (``torch.Tensor [V]`` float32; greedy or sampled, the loop's choice).  A backend whose
  graph feeds its own argmax back (``greedy_only``) ignores ``choose`` and must be used with
  greedy code-predictor options; the loop refuses the other combination.

The torch backends here are the reference: with them the codes are those qwen-tts generates
(``tests/models/test_tts_generate.py``).  Graph backends (ONNX / .rknn through ``runtime.runners``) live
with their step graphs in ``rkspeech.stepgraph``.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

#: ``choose(j, logits)`` -> codebook j's code (``logits``: ``torch.Tensor [V]`` float32).
Choose = Callable[[int, object], int]


class TalkerBackend(Protocol):
    name: str

    def start(self, capacity: int) -> None: ...

    def forward(self, embeds: np.ndarray) -> np.ndarray: ...

    def close(self) -> None: ...


class CodePredictorBackend(Protocol):
    name: str
    greedy_only: bool

    def frame(self, hidden: np.ndarray, first_embed: np.ndarray, choose: Choose) -> list[int]: ...

    def close(self) -> None: ...


class TorchTalker:
    """The reference talker stack (``talker.model``) with a preallocated ``KVCache``."""

    name = "torch"

    def __init__(self, talker):
        self.model = talker.model
        self.cache = None

    def start(self, capacity: int) -> None:
        self.cache = self.model.new_cache(capacity)

    def forward(self, embeds: np.ndarray) -> np.ndarray:
        import torch

        if self.cache is None:
            raise RuntimeError("TorchTalker.forward before start()")
        x = torch.from_numpy(np.ascontiguousarray(embeds, dtype=np.float32)).unsqueeze(0)
        with torch.no_grad():
            return self.model(x, self.cache)[0, -1].numpy()

    def close(self) -> None:
        self.cache = None


class TorchCodePredictor:
    """The reference code predictor: its stack (``torch_host.TorchStack``, 2-token prefill, then
    one position per codebook) and its heads on the torch host, through ``loop.predict_frame``."""

    name = "torch"
    greedy_only = False

    def __init__(self, talker):
        from rkspeech.models.qwen3_tts.torch_host import TorchHost, TorchStack

        cp = talker.code_predictor
        self.groups = cp.model.cfg.num_code_groups
        self.ops = TorchHost(talker)
        self.stack = TorchStack(cp.model, self.groups + 1)

    def frame(self, hidden: np.ndarray, first_embed: np.ndarray, choose: Choose) -> list[int]:
        from rkspeech.models.qwen3_tts.loop import predict_frame

        return predict_frame(self.stack, self.ops, self.groups, hidden, first_embed, choose)

    def close(self) -> None:
        pass
