"""The talker as fixed-shape step graphs (``stepgraph.talker_step``, ``runtime.tts.talker_backend``).

Acceptance (issue #13 part 2): ``TTSModel`` with ``GraphTalker`` over onnxruntime (prefill B=16 in
chunks, the last padded; decode B=1; small capacity) gives greedy codes identical to the torch
talker on the reduced synthetic custom-voice root.  No conversion here.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxruntime")

FRAMES = 24
CAPACITY = 96
PREFILL_B = 16
TEXT = "Hello there, this is a test of the talker step graph."


@pytest.fixture(scope="module")
def graphs(tts, tmp_path_factory):
    from rkspeech.export.talker_onnx import export_talker_pair

    return export_talker_pair(tts.net.talker.model, tmp_path_factory.mktemp("talker"), capacity=CAPACITY,
                              prefill_B=PREFILL_B)


def _kw(tts):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions

    return dict(speaker=tts.speakers[0], language="english", options=GenerationOptions.greedy(max_new_tokens=FRAMES + 1))


def _codes(tts, talker=None):
    from rkspeech.models.qwen3_tts.backends import TorchTalker

    tts.use_backends(talker=talker or TorchTalker(tts.net.talker))
    try:
        return tts.generate_codes(TEXT, **_kw(tts))
    finally:
        tts.use_backends(talker=TorchTalker(tts.net.talker))


def test_graph_talker_codes_identical_to_torch(tts, graphs):
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    ref = _codes(tts)
    assert ref.shape == (FRAMES, tts.num_code_groups)
    talker = open_graph_talker(graphs["decode"], graphs["prefill"], backend="ort", model=tts.net.talker.model,
                               threads=1)
    got = _codes(tts, talker)
    np.testing.assert_array_equal(got, ref)
    prompt = tts.build_prompt(TEXT, speaker=tts.speakers[0], language="english")[0].shape[1]
    # the prompt went through the prefill graph in chunks, the last one padded
    assert prompt % PREFILL_B and talker.calls["prefill"] == -(-prompt // PREFILL_B)
    assert talker.calls["decode"] == FRAMES
    talker.close()


def test_last_hidden_matches_torch_and_cache_is_written(tts, graphs):
    """Prefill then decode steps: the graph's hidden state tracks TorchTalker's (fp32, ~1e-6)."""
    from rkspeech.models.qwen3_tts.backends import TorchTalker
    from rkspeech.runtime.tts.talker_backend import open_graph_talker

    gen = np.random.default_rng(0)
    ht = tts.cfg.talker.hidden_size
    x = gen.standard_normal((PREFILL_B + 5, ht)).astype(np.float32)
    ref, g = TorchTalker(tts.net.talker), open_graph_talker(graphs["decode"], graphs["prefill"], threads=1)
    ref.start(CAPACITY)
    g.start(CAPACITY)
    np.testing.assert_allclose(g.forward(x), ref.forward(x), atol=1e-4)
    for _ in range(3):
        y = gen.standard_normal((1, ht)).astype(np.float32)
        np.testing.assert_allclose(g.forward(y), ref.forward(y), atol=1e-4)
    assert g.length == PREFILL_B + 8
    assert g.cache[:, :, :g.length].any(axis=(0, 1, 3)).all()  # every used slot was written
    assert not g.cache[:, :, g.length:].any()  # padding rows were not written
    g.close()


def test_refusals(tts, graphs, tmp_path):
    from rkspeech.core.errors import RkspeechError
    from rkspeech.contracts.read import read_contract
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.models.qwen3_tts.tts_checkpoint import load_tts_net, read_tts_config, resolve_model_root
    from rkspeech.runtime.tts.talker_backend import open_graph_talker
    from rkspeech.contracts.talker import TalkerContract

    # capacity: the utterance is refused with a one-line message once it would overflow
    g = open_graph_talker(graphs["decode"], graphs["prefill"], threads=1)
    g.start(10_000)
    g.forward(np.zeros((CAPACITY - 1, tts.cfg.talker.hidden_size), np.float32))
    g.forward(np.zeros((1, tts.cfg.talker.hidden_size), np.float32))
    with pytest.raises(RkspeechError, match="capacity of 96 positions") as exc:
        g.forward(np.zeros((1, tts.cfg.talker.hidden_size), np.float32))
    assert "\n" not in str(exc.value)
    g.close()
    # another checkpoint of the same shape (seed 1): refused by the weights fingerprint
    files = resolve_model_root(write_tts_checkpoint(tmp_path / "other", "reduced", "custom-voice", 1))
    other = load_tts_net(files, read_tts_config(files))
    with pytest.raises(RkspeechError, match="does not match this model: its contract has fingerprint"):
        open_graph_talker(graphs["decode"], graphs["prefill"], model=other.talker.model, threads=1)
    # prefill and decode from different exports (capacity) do not pair
    from rkspeech.export.talker_onnx import export_talker_pair

    small = export_talker_pair(tts.net.talker.model, tmp_path / "small", capacity=CAPACITY // 2, prefill_B=PREFILL_B)
    with pytest.raises(RkspeechError, match="do not belong together"):
        open_graph_talker(graphs["decode"], small["prefill"], threads=1)
    # contract round trip and a foreign format
    c = read_contract(graphs["prefill"], TalkerContract)
    assert (c.B, c.capacity, c.layers) == (PREFILL_B, CAPACITY, tts.cfg.talker.num_hidden_layers)
    assert TalkerContract.from_json(c.to_json()) == c
    with pytest.raises(RkspeechError, match="not an rkspeech talker contract"):
        TalkerContract.from_json('{"format":"rkspeech-code-predictor/1"}')
