"""Lanes whose rows do not see each other (``runtime.tts.lanes`` with a one-sequence graph for
prompts, ``convert.int8_rows``; issue 55).

The reduced talker's step for 3 lanes, a prompt of 3 rows through its one-sequence prefill graph,
then one row a call at the lane's own index: a sequence's hidden states are the same bit for bit
whatever the other lanes hold (and whichever lane it gets) in int4 and in int8 once
``rows_apart`` quantized each row apart.  int8 as ``quantize_dynamic`` writes it (one activation
scale over the call) is not; fp32 is, up to the rounding of a row's products at another index of
the call (the lane a sequence gets depends on its companions).  The rows-apart lane is the
one-row int8 graph's up to float rounding.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("torch")


@pytest.fixture(scope="module")
def int8_graphs(tts, tmp_path_factory):
    import onnx

    from rkspeech.convert.cpu_quant import CpuQuantOptions, quantize_step_graph
    from rkspeech.convert.int8_rows import rows_apart
    from rkspeech.export.talker_onnx import export_talker_onnx
    from rkspeech.pipelines.cpu_stages import CPU_EXPORT
    from rkspeech.stepgraph.talker_step import TalkerStep

    out = tmp_path_factory.mktemp("int8_rows")
    stack = tts.net.talker.model
    paths = {}
    for name, B, cap in (("one", 1, 16), ("prefill", 2, 16), ("lanes", 3, 48)):
        fp32 = export_talker_onnx(TalkerStep(stack, capacity=cap, B=B, **CPU_EXPORT), out / f"{name}.onnx")
        paths[f"{name}_fp32"] = fp32
        paths[name] = quantize_step_graph(fp32, out / f"{name}.int8.onnx", CpuQuantOptions(variant="int8")) and \
            out / f"{name}.int8.onnx"
    quantize_step_graph(paths["lanes_fp32"], out / "lanes.int4.onnx", CpuQuantOptions(variant="int4"))
    quantize_step_graph(paths["prefill_fp32"], out / "prefill.int4.onnx", CpuQuantOptions(variant="int4"))
    paths["lanes_int4"], paths["prefill_int4"] = out / "lanes.int4.onnx", out / "prefill.int4.onnx"
    m = onnx.load(str(paths["lanes"]))
    assert rows_apart(m) > 0
    onnx.save(m, str(out / "rows.int8.onnx"))
    paths["rows"] = out / "rows.int8.onnx"
    return paths


def _lane0(path, prefill, companions, seq):
    """Lane 0's hidden states for ``seq`` (its first 3 rows a prompt through ``prefill``, then one
    row a call) while lanes 1 and 2 take ``companions``."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.tts.lanes import LaneGroup, Rounds

    rounds = Rounds()
    group = LaneGroup(open_runner("ort", path, threads=1), read_contract(path), lanes=3, lane_capacity=16,
                      rounds=rounds, rope="numpy",
                      prefill=(open_runner("ort", prefill, threads=1), read_contract(prefill)))

    def run(rows):
        lane = group.lane()
        try:
            lane.start(16)
            return [lane.forward(rows[:3])] + [lane.forward(r[None]) for r in rows[3:]]
        finally:
            lane.close()

    try:
        return rounds.map(run, [seq, *companions])[0]
    finally:
        group.close()


def _row0(path, x, scale):
    """Row 0's hidden state of one call of the lanes graph at ``path``: ``x`` at position 0 of
    lane 0, rows 1 and 2 random x ``scale`` in their lanes."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.tts.lanes import LaneGroup, Rounds

    c = read_contract(path)
    group = LaneGroup(open_runner("ort", path, threads=1), c, lanes=3, lane_capacity=16, rounds=Rounds(), rope="numpy")
    rng = np.random.default_rng(1)
    try:
        lanes = [group.lane() for _ in range(3)]
        reqs = [_req(lanes[0], x[None])] + [_req(lane, scale * rng.standard_normal((1, c.hidden), dtype=np.float32))
                                           for lane in lanes[1:]]
        group.execute(reqs)
        return reqs[0].result()
    finally:
        group.close()


def _req(lane, rows):
    from rkspeech.runtime.tts.rounds import _Request

    return _Request(lane.group, lane.index, rows)


def test_a_lane_does_not_depend_on_its_companions_once_rows_are_apart(int8_graphs):
    from rkspeech.contracts.read import read_contract
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    hidden = read_contract(int8_graphs["one"]).hidden
    rng = np.random.default_rng(0)
    seq = rng.standard_normal((6, hidden), dtype=np.float32)
    quiet = [0.01 * rng.standard_normal((6, hidden), dtype=np.float32) for _ in range(2)]
    loud = [20.0 * rng.standard_normal((6, hidden), dtype=np.float32) for _ in range(2)]
    g = int8_graphs
    for lanes, prefill in ((g["lanes_int4"], g["prefill_int4"]), (g["rows"], g["prefill"])):
        for a, b in zip(_lane0(lanes, prefill, quiet, seq), _lane0(lanes, prefill, loud, seq)):
            np.testing.assert_array_equal(a, b)
    for a, b in zip(_lane0(g["lanes_fp32"], g["prefill_fp32"], quiet, seq),
                    _lane0(g["lanes_fp32"], g["prefill_fp32"], loud, seq)):
        np.testing.assert_allclose(a, b, rtol=0, atol=4e-6 * float(np.abs(a).max()))
    rows_q = _lane0(g["rows"], g["prefill"], quiet, seq)
    # as quantize_dynamic wrote it, loud companions in the same call take over the shared activation scale
    assert float(np.abs(_row0(g["lanes"], seq[0], 0.01) - _row0(g["lanes"], seq[0], 20.0)).max()) > 1e-3
    np.testing.assert_array_equal(_row0(g["rows"], seq[0], 0.01), _row0(g["rows"], seq[0], 20.0))
    # and the rows-apart lane is the one-row graph's, up to float rounding
    one = open_graph_talker(g["one"], g["prefill"], rope="numpy", threads=1)
    one.start(16)
    want = [one.forward(seq[:3])] + [one.forward(r[None]) for r in seq[3:]]
    one.close()
    err = max(float(np.abs(a - b).max() / np.abs(a).max()) for a, b in zip(want, rows_q))
    assert err < 1e-4, err


def test_a_full_lane_fails_alone(int8_graphs):
    """A request its lane has no room for fails with one line; the round's other requests run."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.core.errors import RkspeechError
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.tts.lanes import LaneGroup, Rounds

    c = read_contract(int8_graphs["rows"])
    group = LaneGroup(open_runner("ort", int8_graphs["rows"], threads=1), c, lanes=3, lane_capacity=16,
                      rounds=Rounds(), rope="numpy",
                      prefill=(open_runner("ort", int8_graphs["prefill"], threads=1), read_contract(int8_graphs["prefill"])))
    try:
        full, other = group.lane(), group.lane()
        group.length[full.index] = 16  # as a stream that used every position
        x = np.ones((1, c.hidden), np.float32)
        reqs = [_req(full, x), _req(other, x)]
        assert group.execute(reqs) == 1
        with pytest.raises(RkspeechError, match="more than the 16 positions of a lane"):
            reqs[0].result()
        assert reqs[1].result().shape == (c.hidden,) and group.length[other.index] == 1
    finally:
        group.close()
