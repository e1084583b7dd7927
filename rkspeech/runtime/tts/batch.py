"""Several streams, one weight read a step: a plan's lanes graphs as one running batch.

Every CPU stage of a board plan is bound by reading its weights: one frame of one stream reads
the talker once and the code predictor 16 times.  A plan built with ``--streams N`` holds each
CPU-placed talker and step-form code predictor once more as a step graph for N lanes
(``pipelines.lane_graphs``, plan role ``lanes``).  :class:`StreamBatch` opens them as
``runtime.tts.lanes`` groups under one :class:`~rkspeech.runtime.tts.lanes.Rounds`: each
generating stream runs the one generation loop (``models.qwen3_tts.loop``) in its own thread on
its own lanes, and a step's graph call serves every stream that asked for it.

Continuous batching: a stream joins the running batch at its next step (:meth:`StreamBatch.stream`
waits for a free lane) and leaves it when it ends (codec_eos, the frame bound, an error, or its
listener gone), its lanes free at once; a stream waiting on its listener steps out of the rounds
(``Rounds.away``) so the others go on.  Its prompt and each frame's first two code-predictor
positions run through the plan's one-stream graphs (talker prefill, code predictor start) outside
the rounds, and each step's row sits at its lane's own index of the call (``LaneGroup``'s
``prefill``): in int4 and int8 (rows quantized apart, ``convert.int8_rows``) a stream's codes do
not depend on its companions (``tests/runtime/test_batch.py``); in fp32 a row's products round
differently at another index, and the lane a stream gets depends on which were free
(docs/batching.md).
"""

from __future__ import annotations

import contextlib
import threading

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.sections import plan_streams


#: fewer usable cores than this: one stream at a time unless asked (each stream's host loop, heads
#: and vocoder steps want a core; on this 2-core x86 host the published int4 plan's 20 sentences
#: took 35.9 s in 2 streams against 21.7 s one at a time, docs/batching.md)
MIN_CORES_TO_BATCH = 4


def default_streams(plan) -> int:
    """Streams at once when the caller names none: the plan's lanes, at most one per two usable
    cores, and 1 below :data:`MIN_CORES_TO_BATCH` cores."""
    import os

    cores = len(os.sched_getaffinity(0))
    if cores < MIN_CORES_TO_BATCH:
        return 1
    return max(1, min(plan_streams(plan), cores // 2))


class StreamBatch:
    """The plan's talker and code predictor lanes for ``model`` (a ``NumpyTTSModel``: its numpy
    host and weights; each graph's contract checked against them); ``streams``: at most this many
    at once (None: all the graphs' lanes); ``threads`` / ``spin``: onnxruntime's."""

    def __init__(self, plan, model, *, streams: int | None = None, threads: int | None = None, spin: bool = True):
        from rkspeech.contracts.read import read_contract
        from rkspeech.runtime.runners import open_runner
        from rkspeech.runtime.tts.heads import open_heads
        from rkspeech.runtime.tts.lanes import CodePredictorLanes, LaneGroup, Rounds
        from rkspeech.runtime.tts.open_stages import stage_threads
        from rkspeech.runtime.tts.talker_backend import check_stack_contract

        lanes = plan_streams(plan)
        if lanes < 2:
            raise RkspeechError("this plan generates one stream at a time: its talker and code predictor have no "
                                "lanes graphs (rebuild with rkspeech build qwen3-tts --streams N and both stages "
                                "placed cpu-fp32 or cpu-int4)")
        if getattr(model, "weights", None) is None:
            raise RkspeechError("batched generation runs the numpy host loop (--host-loop numpy)")
        self.streams = lanes if streams is None else int(streams)
        if not 1 <= self.streams <= lanes:
            raise RkspeechError(f"--streams must be 1-{lanes} for this plan (its lanes graphs serve {lanes}), "
                                f"got {streams}")
        self.rounds = Rounds()
        self.groups: list = []
        try:
            for name, cfg, fp in (("talker", model.cfg.talker, model.weights.talker_fingerprint),
                                  ("code_predictor", model.cfg.code_predictor, model.weights.cp_fingerprint)):
                stage = plan.stages[name]
                n = stage_threads(stage, threads)
                contract = read_contract(stage.lanes)
                check_stack_contract(contract, cfg, fp, f"the {name.replace('_', ' ')} lanes graph")
                # a lane's rows beyond one: the stage's own one-stream graph (talker prefill, code predictor start)
                first = stage.paths("ort").get("prefill") if name == "talker" else stage.start
                prefill = None
                if first is not None:
                    pc = read_contract(first)
                    check_stack_contract(pc, cfg, fp, f"the {name.replace('_', ' ')} graph {first.name}")
                    prefill = (open_runner("ort", first, threads=n, spin=spin), pc)
                try:
                    runner = open_runner("ort", stage.lanes, threads=n, spin=spin)
                except BaseException:
                    if prefill is not None:
                        prefill[0].close()
                    raise
                group = LaneGroup(runner, contract, lanes=contract.B, lane_capacity=contract.capacity // contract.B,
                                  rounds=self.rounds, rope=model.ops.rope, prefill=prefill,
                                  name=(f"talker lanes ({stage.lanes.name})" if name == "talker" else
                                        f"lanes ({stage.lanes.name})"))  # CodePredictorLanes says whose
                if name == "code_predictor":
                    heads = open_heads(stage.heads or None, model.cfg.code_predictor, model.weights.cp_fingerprint,
                                       threads=n, spin=spin)
                    group = CodePredictorLanes(group, model.ops, model.cfg.code_predictor.num_code_groups, heads)
                self.groups.append(group)
        except BaseException:
            self.close()
            raise
        self.talker, self.code_predictor = self.groups
        self._slots = threading.BoundedSemaphore(self.streams)
        self._lock = threading.Lock()
        #: streams generating now (``/metrics``' batch size)
        self.active = 0

    @property
    def capacity(self) -> int:
        """Positions of a talker lane (prompt + frames of one utterance)."""
        return self.talker.lane_capacity

    def reserved(self) -> dict:
        """``use_backends`` keywords that let a host check a request and build its prompt against
        the lanes' capacity before it has lanes (replaced by :meth:`stream`'s before it runs)."""
        return {"talker": _Reserved(self.talker.name, self.capacity),
                "code_predictor": _Reserved(self.code_predictor.name, self.code_predictor.group.lane_capacity)}

    @contextlib.contextmanager
    def stream(self):
        """``(talker lane, code predictor lane)`` for one generation, waiting for a free pair."""
        self._slots.acquire()
        talker = cp = None
        try:
            talker, cp = self.talker.lane(), self.code_predictor.lane()
            with self._lock:
                self.active += 1
            try:
                yield talker, cp
            finally:
                with self._lock:
                    self.active -= 1
        finally:
            for lane in (cp, talker):
                if lane is not None:
                    lane.close()
            self._slots.release()

    def close(self) -> None:
        groups, self.groups = getattr(self, "groups", []), []
        for g in groups:
            g.close()


class _Reserved:
    """A stage backend to come: its name and capacity, nothing to run."""

    def __init__(self, name: str, capacity: int):
        self.name, self.capacity = name, capacity

    def forward(self, *_):
        raise RuntimeError(f"{self.name}: no lane was taken for this generation")

    frame = forward
