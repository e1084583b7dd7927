"""``GraphTalker``: the ``TalkerBackend`` (``models.qwen3_tts.backends``) over talker step graphs.

The host keeps the KV cache (``[2L, Hc, cap, hd]`` float32, ``TalkerContract.cache_shape``) and
the position; each call feeds the whole cache, the chunk's embeddings, RoPE cos/sin and mask to a
runner (``runtime.runners.open_runner``: onnxruntime, the simulator or rknn-toolkit-lite2) and
writes the returned ``kv_new`` rows at the chunk's positions.  ``forward`` with one position runs
the decode graph (B = 1); with more, the prefill graph in B-chunks, the last one padded with zero
rows (their outputs and keys/values are dropped; the mask keeps real rows from seeing them).

Refusals are one-line ``RkspeechError``s: the two graphs' contracts disagree, a contract does not
match the model (``talker_step.check_contract_matches``), or an utterance needs more positions
than the graphs' capacity.
"""

from __future__ import annotations

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.read import read_contract
from rkspeech.contracts.talker import TalkerContract
from rkspeech.stepgraph.host import (
    numpy_inverse_frequencies,
    numpy_rope_cos_sin,
    rope_cos_sin,
    step_mask,
    torch_inverse_frequencies,
)

#: where RoPE's cos/sin come from: torch (the reference's values bit for bit) or numpy (no torch;
#: ``stepgraph.host.numpy_rope_cos_sin``)
ROPE_RECIPES = ("torch", "numpy")


class GraphTalker:
    """``start(capacity)`` / ``forward(embeds [t, Ht]) -> [Ht]`` / ``close()`` over a decode runner
    (B = 1) and an optional prefill runner (B > 1; without it the prompt runs one position at a
    time).  ``model`` (``talker.model``), when given, is checked against the contracts.  ``rope``:
    ``ROPE_RECIPES``, torch (default) or numpy (the torch-free host path)."""

    def __init__(self, decode, decode_contract: TalkerContract, prefill=None,
                 prefill_contract: TalkerContract | None = None, *, model=None, name: str = "graph",
                 rope: str = "torch"):
        if rope not in ROPE_RECIPES:
            raise RkspeechError(f"rope must be one of {ROPE_RECIPES}, got {rope!r}")
        if decode_contract.B != 1:
            raise RkspeechError(f"the talker decode graph must have B=1, got B={decode_contract.B}")
        if prefill is not None:
            if prefill_contract is None or prefill_contract.B < 2:
                raise RkspeechError("the talker prefill graph needs its contract with B >= 2")
            if not prefill_contract.same_model(decode_contract):
                raise RkspeechError("the talker prefill and decode graphs do not belong together (their contracts "
                                    "differ in model, capacity or cache layout); export them as a pair")
        if model is not None:
            from rkspeech.stepgraph.talker_step import check_contract_matches

            check_contract_matches(decode_contract, model, "the talker decode graph")
        self.decode, self.prefill = (decode, decode_contract), None
        if prefill is not None:
            self.prefill = (prefill, prefill_contract)
        self.contract = decode_contract
        self.capacity = decode_contract.capacity
        self.name = name
        if rope == "torch":
            self.inv_freq = torch_inverse_frequencies(decode_contract.head_dim, decode_contract.rope_theta)
            self._cos_sin = rope_cos_sin
        else:
            self.inv_freq = numpy_inverse_frequencies(decode_contract.head_dim, decode_contract.rope_theta)
            self._cos_sin = numpy_rope_cos_sin
        self.cache: np.ndarray | None = None
        self._cache_feed: dict[str, np.ndarray] = {}
        #: (B, start) -> {"cos", "sin", "mask"}: the same for every utterance, so computed once
        self._position_feed: dict[tuple[int, int], dict[str, np.ndarray]] = {}
        self.length = 0
        #: calls per graph since start() (the NPU-call count of an utterance)
        self.calls = {"prefill": 0, "decode": 0}

    def start(self, capacity: int) -> None:
        """Open an utterance.  ``capacity`` is what the loop may need at most; the graphs hold
        ``self.capacity`` positions and ``forward`` refuses to go past them."""
        del capacity  # the loop asks for prompt + max_new_tokens; only positions actually used count
        if self.cache is None:
            self.cache = np.zeros(self.contract.cache_shape(), dtype=np.float32)
            if self.contract.cache_io == "flat":
                self._cache_feed = {"cache": self.cache}
            else:  # views of the one buffer, made once
                self._cache_feed = {f"cache_{kv}{i}": self.cache[2 * i + j:2 * i + j + 1]
                                    for i in range(self.contract.layers) for j, kv in enumerate("kv")}
        else:
            self.cache.fill(0.0)
        self.length = 0
        self.calls = {"prefill": 0, "decode": 0}

    def forward(self, embeds: np.ndarray) -> np.ndarray:
        if self.cache is None:
            raise RuntimeError("GraphTalker.forward before start()")
        x = np.ascontiguousarray(embeds, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.contract.hidden:
            raise RkspeechError(f"talker input must be [t, {self.contract.hidden}] embeddings, got {list(x.shape)}")
        t = x.shape[0]
        if self.length + t > self.capacity:
            raise RkspeechError(f"the utterance needs more than the talker graphs' capacity of {self.capacity} "
                                f"positions (at {self.length} + {t}); lower max_new_tokens, shorten the text, or "
                                "export the talker with a larger capacity")
        if t > 1 and self.prefill is not None:
            runner, contract, role = *self.prefill, "prefill"
        else:
            runner, contract, role = *self.decode, "decode"
        last = None
        for lo in range(0, t, contract.B):
            n = min(contract.B, t - lo)
            last = self._step(runner, contract, x[lo:lo + n], role)[n - 1]
        return last.copy()

    def _step(self, runner, contract: TalkerContract, x: np.ndarray, role: str) -> np.ndarray:
        B, n, start = contract.B, x.shape[0], self.length
        if n < B:
            x = np.concatenate([x, np.zeros((B - n, x.shape[1]), dtype=np.float32)])
        out = runner.infer({"embeds": x, **self._positions(contract, start), **self._cache_feed})
        self.cache[:, :, start:start + n] = out["kv_new"][:, :, :n]
        self.length = start + n
        self.calls[role] += 1
        return out["hidden"]

    def _positions(self, contract: TalkerContract, start: int) -> dict[str, np.ndarray]:
        """RoPE cos/sin and the mask of a call at ``start``, computed once per (B, start): the
        code predictor's step runs the same 16 positions every frame, and rebuilding them took
        ~15 % of the host's time per call (reduced plan, cProfile)."""
        key = (contract.B, start)
        got = self._position_feed.get(key)
        if got is None:
            cos, sin = self._cos_sin(np.arange(start, start + contract.B), self.inv_freq)
            got = self._position_feed[key] = {"cos": cos, "sin": sin, "mask": step_mask(contract, start)}
        return got

    def wrap_runners(self, wrap, names: tuple[str, str] = ("prefill", "decode")) -> None:
        """Put ``wrap(name, runner)`` in each graph's runner's place (a recorder: the CPU stages'
        golden replays); ``names``: what the prefill and decode graphs are called (the code
        predictor's: start, step).  ``close`` then closes the wrappers."""
        if self.prefill is not None:
            self.prefill = (wrap(names[0], self.prefill[0]), self.prefill[1])
        self.decode = (wrap(names[1], self.decode[0]), self.decode[1])

    def close(self) -> None:
        for pair in (self.decode, self.prefill):
            if pair is not None:
                pair[0].close()
        self.cache = None
        self._cache_feed = {}


def open_graph_talker(decode_path, prefill_path=None, *, backend: str = "ort", model=None, rope: str = "torch",
                      **runner_kw) -> GraphTalker:
    """A ``GraphTalker`` over ONNX (``ort``, ``sim``) or .rknn (``rknnlite``) files; the contracts
    come from the ONNX metadata (for .rknn: the custom string).

    On onnxruntime the prefill graph gets at least the runtime's default threads
    (``core.threads``) whatever ``threads`` the stage has: it runs once, before the first frame,
    when the vocoder has nothing to do yet, and it is compute-bound (B positions a call), unlike
    the weight-bound decode (published int4 prefill B=32: 123 ms on 1 thread, 81 ms on 2)."""
    from rkspeech.runtime.runners import open_runner

    dc = read_contract(decode_path, TalkerContract)
    pc = read_contract(prefill_path, TalkerContract) if prefill_path else None
    prefill_kw = dict(runner_kw)
    if backend == "ort" and runner_kw.get("threads") is not None:
        from rkspeech.core.threads import default_threads

        prefill_kw["threads"] = max(int(runner_kw["threads"]), default_threads())
    runners = []
    try:
        runners.append(open_runner(backend, decode_path, **runner_kw))
        if prefill_path:
            runners.append(open_runner(backend, prefill_path, **prefill_kw))
        return GraphTalker(runners[0], dc, runners[1] if prefill_path else None, pc, model=model, name=backend,
                           rope=rope)
    except BaseException:
        for r in runners:
            r.close()
        raise


def check_stack_contract(contract, stack_cfg, fingerprint: str, where: str) -> None:
    """``stepgraph.talker_step.check_contract_matches`` from a stack's config (``DecoderStackConfig``)
    and the numpy weights' fingerprint (``host_weights.HostWeights``), without torch: one line when
    the graph was exported from another checkpoint."""
    want = {"hidden": stack_cfg.hidden_size, "layers": stack_cfg.num_hidden_layers,
            "heads": stack_cfg.num_attention_heads, "kv_heads": stack_cfg.num_key_value_heads,
            "head_dim": stack_cfg.head_dim, "rope_theta": float(stack_cfg.rope_theta),
            "rms_norm_eps": float(stack_cfg.rms_norm_eps), "fingerprint": fingerprint}
    for key, need in want.items():
        have = getattr(contract, key)
        if have != need:
            raise RkspeechError(f"{where} does not match this model: its contract has {key}={have!r}, the model "
                                f"{need!r}; export the graphs from this checkpoint")
