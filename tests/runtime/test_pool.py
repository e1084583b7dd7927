"""EnginePool: several independent streams at once, interleaved and from threads, equal arrays."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.read import read_contract
from rkspeech.plan.plan import load_plan
from rkspeech.runtime.tts.pool import EnginePool, Slot, open_pool
from rkspeech.runtime.runners.base import Runner
from rkspeech.runtime.runners.onnxruntime import OnnxRuntimeRunner
from rkspeech.runtime.tts.streaming import StreamingVocoder
from rkspeech.verify.stepwise import random_codes

from streaming_fixtures import ort_engines, step_graphs, write_ort_plan


@pytest.fixture(scope="module")
def setup(tmp_path_factory, reduced_model):
    paths = step_graphs(tmp_path_factory, reduced_model)
    plan = load_plan(write_ort_plan(tmp_path_factory.mktemp("pool"), paths), backend="ort")
    streams = [random_codes(n, 16, 2048, seed=20 + i) for i, n in enumerate((37, 29, 45))]
    main, first = ort_engines(paths)
    separate = [StreamingVocoder(main, first).decode(c) for c in streams]
    return paths, plan, streams, separate


def interleave(pool, streams, rng):
    """Push pieces of every stream in turn (random sizes), then flush each."""
    svs = [pool.open_stream() for _ in streams]
    outs = [[] for _ in streams]
    pos = [0] * len(streams)
    while any(p < len(c) for p, c in zip(pos, streams)):
        for k, (sv, c) in enumerate(zip(svs, streams)):
            if pos[k] < len(c):
                n = int(rng.integers(1, 13))
                outs[k].append(sv.push(c[pos[k]:pos[k] + n]))
                pos[k] += n
    return [np.concatenate(o + [sv.flush()]) for o, sv in zip(outs, svs)]


def test_interleaved_streams_equal_separate_runs(setup):
    _, plan, streams, separate = setup
    with open_pool(plan, "ort", size=2, threads=1) as pool:
        got = interleave(pool, streams, np.random.default_rng(0))
    for g, s in zip(got, separate):
        np.testing.assert_array_equal(g, s)


def test_threads_equal_separate_runs(setup):
    _, plan, streams, separate = setup
    with open_pool(plan, "ort", size=3, threads=1) as pool:
        got = pool.decode_many(streams, piece=5)
        # and with hand-made threads pushing random pieces
        results = [None] * 3

        def worker(k):
            results[k] = interleave(pool, [streams[k]], np.random.default_rng(k))[0]

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(3)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for g, r, s in zip(got, results, separate):
        np.testing.assert_array_equal(g, s)
        np.testing.assert_array_equal(r, s)


def test_slots_round_robin_and_bounded(setup):
    """Three distinct contexts (as a board's three NPU cores): steps rotate over them, and no
    more than three steps run at once."""
    paths, _, streams, separate = setup
    contracts = {r: read_contract(p) for r, p in paths.items()}
    runners = [{r: OnnxRuntimeRunner(p, threads=1) for r, p in paths.items()} for _ in range(3)]
    active, peak, lock = [0], [0], threading.Lock()

    class Counting(Runner):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner
            self._inputs, self._outputs = inner.input_specs(), inner.output_specs()

        def _infer(self, arrays):
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            try:
                return self.inner.infer(arrays)
            finally:
                with lock:
                    active[0] -= 1

    slots = [Slot(f"npu{i}", {r: Counting(x) for r, x in rs.items()}) for i, rs in enumerate(runners)]
    pool = EnginePool(slots, contracts, owned=[x for rs in runners for x in rs.values()])
    sv = pool.open_stream()
    sv.decode(streams[0])  # 37 tokens: steps of 4, 16, 16, 1
    assert pool.history == ["npu0", "npu1", "npu2", "npu0"]
    pool.history.clear()
    got = pool.decode_many(streams * 2, piece=4, workers=6)
    assert peak[0] <= 3 and sum(s.steps for s in slots) == len(pool.history) + 4
    assert {s.name for s in slots} == set(pool.history)
    for g, s in zip(got, separate * 2):
        np.testing.assert_array_equal(g, s)
    pool.close()


def test_pool_errors(setup):
    _, plan, _, _ = setup
    with pytest.raises(RkspeechError, match="at least one slot"):
        EnginePool([], plan.contracts)
    with pytest.raises(RkspeechError, match="no runner for"):
        EnginePool([Slot("x", {"main": object()})], plan.contracts)
    with pytest.raises(RkspeechError, match="unknown backend"):
        open_pool(plan, "cuda")


def test_lease_checks_the_feed_before_leasing(setup):
    """A stream's engine is a Runner with the role's specs: a bad feed is one line, and no slot
    is taken for it."""
    _, plan, _, _ = setup
    with open_pool(plan, "ort", size=2, threads=1) as pool:
        lease = pool.open_stream().main.runner
        assert lease.input_specs() == pool.slots[0].runners["main"].input_specs()
        good = {n: np.zeros(shape, dtype) for n, (shape, dtype) in lease.input_specs().items()}
        assert set(lease.infer(good)) == {"audio_values", "cache_out"}
        pool.history.clear()
        cases = [({**good, "cache_in": good["cache_in"][:-1]}, "input cache_in has shape"),
                 ({n: a for n, a in good.items() if n != "freqs_in"}, r"missing \['freqs_in'\]"),
                 ({**good, "extra": np.zeros(1)}, r"unknown \['extra'\]"),
                 ({**good, "audio_codes": good["audio_codes"] + 0.5}, "non-integral")]
        for feed, msg in cases:
            with pytest.raises(RkspeechError, match=msg) as err:
                lease.infer(feed)
            assert str(err.value).startswith("pool:main: ") and "\n" not in str(err.value)
        assert pool.history == []


def test_slots_of_one_role_run_one_graph(setup):
    paths, plan, _, _ = setup
    contracts = {"main": plan.contracts["main"]}
    with OnnxRuntimeRunner(paths["main"], threads=1) as main, OnnxRuntimeRunner(paths["first"], threads=1) as first:
        with pytest.raises(RkspeechError, match="slot b runs a different main graph than slot a"):
            EnginePool([Slot("a", {"main": main}), Slot("b", {"main": first})], contracts)
    with pytest.raises(TypeError, match="not a Runner"):
        EnginePool([Slot("a", {"main": object()})], contracts)


@pytest.mark.parametrize("target,masks", [("rk3588", ["0", "1", "2"]), ("rk3576", ["0", "1"]),
                                          ("rk3566", ["auto"])])
def test_rknnlite_pool_one_context_per_core(setup, monkeypatch, tmp_path, target, masks):
    """The board path without a board: one RknnLite context per NPU core and role, leased round
    robin, all closed with the pool."""
    import dataclasses

    from rkspeech.runtime.runners import rknnlite

    _, plan, streams, separate = setup
    made = []

    class FakeLite(OnnxRuntimeRunner):  # runs the ONNX graph, records the core mask it was pinned to
        def __init__(self, rknn_path, core_mask="auto", **options):  # pass_through, reuse_outputs
            super().__init__(rknn_path, threads=1)
            self.core_mask, self.closed, self.options = core_mask, False, options
            made.append(self)

        def close(self):
            self.closed = True

    monkeypatch.setattr(rknnlite, "RknnLiteRunner", FakeLite)
    artifacts = {}
    for role, p in plan.onnx.items():  # the rknnlite backend opens .rknn files only
        artifacts[role] = tmp_path / f"{role}.rknn"
        artifacts[role].symlink_to(p)
    board_plan = dataclasses.replace(plan, target=target, rknn=artifacts)
    pool = open_pool(board_plan, "rknnlite")
    assert sorted(r.core_mask for r in made) == sorted(masks * 2)  # main + first per core
    assert [s.name for s in pool.slots] == [f"npu{m}" if m != "auto" else "npu-auto0" for m in masks]
    np.testing.assert_array_equal(pool.open_stream().decode(streams[0]), separate[0])
    assert pool.history == [pool.slots[i % len(masks)].name for i in range(4)]
    pool.close()
    assert all(r.closed for r in made)
