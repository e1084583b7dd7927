"""Many generations at once over one graph call: lanes of a step graph exported for N sequences.

A step graph (``stepgraph.talker_step.TalkerStep``) takes ``B`` rows, each with its own RoPE
cos/sin and its own mask row over ``cap + B`` columns, so nothing ties its rows to one sequence:
exported with ``capacity = N * c`` and ``B = N`` it serves N sequences of up to ``c`` positions
each (a *lane*: cache slots ``[i*c, (i+1)*c)``), one row per sequence a call, the mask keeping
each row to its lane's slots and its own rows (block diagonal).  A published-size weight read
then serves N rows instead of one: a step of the published fp32 talker or code predictor reads
its weights from memory whatever B is, so the accuracy gate's 20 utterances cost about one.

Generation stays written once (``models.qwen3_tts.loop``): each utterance runs the unchanged
loop in a thread of its own (:meth:`Rounds.map`), its stage backends lanes
(:class:`Lane`, a ``TalkerBackend``; :class:`LaneCodePredictor`, a ``CodePredictorBackend``
whose frame is ``loop.predict_frame`` over a lane).  A lane's ``forward`` waits until every
running thread has asked for a graph call (or finished); the last to ask runs the round: each
group's requests packed into calls of ``B`` rows (a prompt's rows in order, over as many calls
as it needs), the new keys/values written into each lane's slots, every thread released.

The figures are those of the B = 1 graphs up to float rounding: a row's products are the same
weights times the same inputs, but the matrix products run over N rows (another kernel
blocking) and the softmax over more (masked, exactly zero) columns; the accuracy gate's
figures on the trained reduced root with and without lanes are in docs/accuracy-gate.md.
"""

from __future__ import annotations

import threading

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.tts.rounds import Rounds


class LaneGroup:
    """``lanes`` sequences of at most ``lane_capacity`` positions over one step graph (``runner``
    with ``contract``: capacity ``lanes * lane_capacity``, ``B`` rows a call).  ``rope``: the
    host's RoPE recipe (``talker_backend.ROPE_RECIPES``).  :meth:`lane` hands out the lanes.

    ``prefill``: ``(runner, contract)`` of the stage's one-sequence graph for several rows (the
    talker's prefill, the code predictor's start graph; capacity ``lane_capacity``, the same cache
    layout).  A lane's call of several rows then runs there, outside the rounds, on a copy of the
    lane's slots, and every round call holds one row per lane at the lane's own index: a row's
    products are computed at the same row of the call whoever shares it.  onnxruntime's fp32
    products differ by row index (a row at index 0 and at index 2 of the reduced talker's lanes
    graph: 1.1e-6 apart), so packing rows in arrival order made a stream's hidden states depend on
    its companions.  Without ``prefill`` (the accuracy gate) rows are packed in arrival order."""

    def __init__(self, runner, contract, *, lanes: int, lane_capacity: int, rounds: Rounds, rope: str = "numpy",
                 name: str = "lanes", prefill=None):
        from rkspeech.stepgraph.host import (
            numpy_inverse_frequencies,
            numpy_rope_cos_sin,
            rope_cos_sin,
            torch_inverse_frequencies,
        )

        if contract.capacity != lanes * lane_capacity:
            raise RkspeechError(f"{name}: capacity {contract.capacity} is not {lanes} lanes x {lane_capacity}")
        self.runner, self.contract, self.rounds, self.name = runner, contract, rounds, name
        self.lanes, self.lane_capacity = lanes, lane_capacity
        if rope == "torch":
            self.inv_freq, self._cos_sin = torch_inverse_frequencies(contract.head_dim, contract.rope_theta), rope_cos_sin
        else:
            self.inv_freq = numpy_inverse_frequencies(contract.head_dim, contract.rope_theta)
            self._cos_sin = numpy_rope_cos_sin
        self.cache = np.zeros(contract.cache_shape(), dtype=np.float32)
        if contract.cache_io == "flat":
            self._cache_feed = {"cache": self.cache}
        else:
            self._cache_feed = {f"cache_{kv}{i}": self.cache[2 * i + j:2 * i + j + 1]
                                for i in range(contract.layers) for j, kv in enumerate("kv")}
        self.length = [0] * lanes
        self._free = list(range(lanes))
        self._lock = threading.Lock()
        self.prefill = None
        if prefill is not None:
            pr, pc = prefill
            if contract.B != lanes or pc.capacity != lane_capacity or pc.kv_layout != contract.kv_layout or (
                    pc.cache_io != contract.cache_io or pc.layers != contract.layers):
                raise RkspeechError(f"{name}: the one-sequence graph (B={pc.B}, capacity {pc.capacity}) does not "
                                    f"fit lanes of {lane_capacity} positions in a graph of B={contract.B}")
            self.prefill = (pr, pc)
            self._scratch = np.zeros(pc.cache_shape(), dtype=np.float32)  # one lane's slots, for prefills
            self._scratch_feed = ({"cache": self._scratch} if pc.cache_io == "flat" else
                                  {f"cache_{kv}{i}": self._scratch[2 * i + j:2 * i + j + 1]
                                   for i in range(pc.layers) for j, kv in enumerate("kv")})
            self._prefill_lock = threading.Lock()

    def lane(self) -> Lane:
        with self._lock:
            if not self._free:
                raise RkspeechError(f"{self.name}: all {self.lanes} lanes are in use")
            return Lane(self, self._free.pop(0))

    def _release(self, i: int) -> None:
        with self._lock:
            self._free.append(i)
            self._free.sort()

    def reset(self, i: int) -> None:
        c = self.lane_capacity
        self.cache[:, :, i * c:(i + 1) * c] = 0.0
        self.length[i] = 0

    def prefill_lane(self, i: int, x: np.ndarray) -> np.ndarray:
        """Rows ``x`` appended to lane ``i`` through the one-sequence graph (its B rows a call, the
        last padded), as ``GraphTalker`` runs its prefill; the last row's hidden state."""
        from rkspeech.stepgraph.host import step_mask

        runner, pc = self.prefill
        lc, t = self.lane_capacity, x.shape[0]
        with self._prefill_lock:
            start = first = self.length[i]
            if start + t > lc:
                raise RkspeechError(f"{self.name}: a sequence needs more than the {lc} positions of a lane")
            self._scratch[:, :, :start] = self.cache[:, :, i * lc:i * lc + start]
            self._scratch[:, :, start:] = 0.0
            last = None
            for lo in range(0, t, pc.B):
                n = min(pc.B, t - lo)
                chunk = x[lo:lo + n] if n == pc.B else np.concatenate([x[lo:lo + n], np.zeros((pc.B - n, x.shape[1]),
                                                                                                 np.float32)])
                cos, sin = self._cos_sin(np.arange(start, start + pc.B), self.inv_freq)
                out = runner.infer({"embeds": chunk, "cos": cos, "sin": sin, "mask": step_mask(pc, start),
                                    **self._scratch_feed})
                self._scratch[:, :, start:start + n] = out["kv_new"][:, :, :n]
                last = np.array(out["hidden"][n - 1], dtype=np.float32)
                start += n
            self.cache[:, :, i * lc + first:i * lc + start] = self._scratch[:, :, first:start]
            self.length[i] = start
        return last

    def execute(self, requests: list) -> int:
        """Append each request's rows to its lane (calls of ``B`` rows; a request's rows stay in
        order); sets each request's ``hidden`` (its last row's); returns the calls made.  With a
        ``prefill`` graph every request is one row, at its lane's index of one call.  A request
        its lane has no room for fails alone (its ``error``); the others run."""
        ok = []
        for r in requests:
            if self.length[r.lane] + r.rows.shape[0] > self.lane_capacity:
                r.error = RkspeechError(f"{self.name}: a sequence needs more than the {self.lane_capacity} positions "
                                        "of a lane")
                r.done = True
            else:
                ok.append(r)
        requests = ok
        if not requests:
            return 0
        if self.prefill is not None and all(r.rows.shape[0] == 1 for r in requests):
            self._call([(r, 0) for r in requests], fixed=True)
            for r in requests:
                r.done = True
            return 1
        c, B = self.contract, self.contract.B
        queue = [(r, lo) for r in requests for lo in range(r.rows.shape[0])]
        calls = 0
        for lo in range(0, len(queue), B):
            chunk = queue[lo:lo + B]
            self._call(chunk)
            calls += 1
        for r in requests:
            r.done = True
        return calls

    def _call(self, chunk: list, fixed: bool = False) -> None:
        """One graph call of ``chunk`` (request, row) pairs: rows in order, or (``fixed``) each
        at its lane's index."""
        c, B, cap, lc = self.contract, self.contract.B, self.contract.capacity, self.lane_capacity
        x = np.zeros((B, c.hidden), dtype=np.float32)
        pos = np.zeros(B, dtype=np.int64)
        mask = np.full((B, cap + B), c.mask_value, dtype=np.float32)
        first_row: dict[int, int] = {}  # lane -> its first row in this call
        start: dict[int, int] = {}  # lane -> its length before this call
        rows = [r.lane for r, _ in chunk] if fixed else range(len(chunk))
        for k, (r, row) in zip(rows, chunk):
            i = r.lane
            if i not in start:
                start[i], first_row[i] = self.length[i], k
            p = start[i] + k - first_row[i]  # within the lane: execute() refused what does not fit
            x[k] = r.rows[row]
            pos[k] = p
            mask[k, i * lc:i * lc + start[i]] = 0.0  # the lane's cached positions
            mask[k, cap + first_row[i]:cap + k + 1] = 0.0  # its rows in this call, up to itself
        for k in sorted(set(range(B)) - set(rows)):
            mask[k, cap + k] = 0.0  # padding rows see themselves (none all-masked); dropped
        cos, sin = self._cos_sin(pos, self.inv_freq)
        rep = c.mask_rows // B
        out = self.runner.infer({"embeds": x, "cos": cos, "sin": sin,
                                 "mask": np.tile(mask, (rep, 1)) if rep > 1 else mask, **self._cache_feed})
        kv, hidden = out["kv_new"], out["hidden"]
        for k, (r, row) in zip(rows, chunk):
            i = r.lane
            p = int(pos[k])
            self.cache[:, :, i * lc + p] = kv[:, :, k]
            if row == r.rows.shape[0] - 1:
                r.hidden = np.array(hidden[k], dtype=np.float32)
        for i, s0 in start.items():
            self.length[i] = s0 + sum(1 for r, _ in chunk if r.lane == i)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        self.runner = None
        if self.prefill is not None:
            self.prefill[0].close()
        self.prefill = None


class Lane:
    """One sequence of a :class:`LaneGroup`: a ``TalkerBackend`` (``start`` / ``forward`` /
    ``close``, which gives the lane back)."""

    def __init__(self, group: LaneGroup, index: int):
        self.group, self.index = group, index
        self.name = f"{group.name} lane {index}"
        self.capacity = group.lane_capacity
        self.calls = {"prefill": 0, "decode": 0}

    def start(self, capacity: int) -> None:
        del capacity  # positions actually used count (as GraphTalker)
        self.group.reset(self.index)
        self.calls = {"prefill": 0, "decode": 0}

    def forward(self, embeds: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(embeds, dtype=np.float32)
        if x.ndim != 2 or x.shape[1] != self.group.contract.hidden:
            raise RkspeechError(f"input must be [t, {self.group.contract.hidden}] embeddings, got {list(x.shape)}")
        self.calls["prefill" if x.shape[0] > 1 else "decode"] += 1
        if x.shape[0] > 1 and self.group.prefill is not None:
            with self.group.rounds.away():  # the others' rounds go on meanwhile
                return self.group.prefill_lane(self.index, x)
        return self.group.rounds.request(self.group, self.index, x)

    def close(self) -> None:
        if self.group is not None:
            self.group._release(self.index)
        self.group = None


class LaneCodePredictor:
    """A step-form ``CodePredictorBackend`` whose stack is a lane of ``group`` (the code
    predictor's step graph exported for N lanes of 16 positions); ``ops`` the model's host (its
    projection, embeddings and, without ``heads``, its heads); ``heads``: head graphs
    (``runtime.tts.heads.HeadGraphs``, shared by the lanes)."""

    greedy_only = False

    def __init__(self, group: LaneGroup, ops, groups: int, heads=None):
        self.stack = group.lane()
        self.ops, self.groups, self.heads = ops, groups, heads
        self.name = f"code predictor {self.stack.name}" + (f" + {len(heads)} head graphs" if heads else "")

    def frame(self, hidden: np.ndarray, first_embed: np.ndarray, choose) -> list[int]:
        from rkspeech.models.qwen3_tts.loop import predict_frame

        return predict_frame(self.stack, self.ops, self.groups, hidden, first_embed, choose, self.heads)

    def close(self) -> None:
        self.stack.close()  # the heads are the caller's


class CodePredictorLanes:
    """Hands out :class:`LaneCodePredictor` s over ``group`` (``lane()``), as a ``LaneGroup``
    hands out talker lanes; ``close`` closes the group and the heads."""

    def __init__(self, group: LaneGroup, ops, groups: int, heads=None):
        self.group, self.ops, self.groups, self.heads = group, ops, groups, heads
        self.rounds, self.lanes = group.rounds, group.lanes
        self.name = f"code predictor {group.name}" + (f" + {len(heads)} head graphs" if heads else "")

    def lane(self) -> LaneCodePredictor:
        return LaneCodePredictor(self.group, self.ops, self.groups, self.heads)

    def close(self) -> None:
        self.group.close()
        if self.heads is not None:
            self.heads.close()
        self.heads = None
