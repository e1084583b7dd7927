"""Whisper encoder cut into consecutive graphs at block boundaries (``parts > 1`` builds, the way
large-v1/v2/v3 are converted here): the cut, the > 2 GB external-data path, the chained output.

No toolkit needed: the pieces run on onnxruntime.  A two-block tiny-width encoder with synthetic
weights (whose equal zero biases / unit LayerNorm scales torch's export de-duplicates into
Identity nodes: the case that once made every bias cross the cut); a few seconds.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from rkspeech.core.errors import RkspeechError  # noqa: E402


@pytest.fixture(scope="module")
def encoder_onnx(tmp_path_factory):
    """A 2-block tiny-geometry encoder exported, then re-saved the way torch writes a > 2 GB graph
    (one external data file per initializer beside ``encoder.onnx``)."""
    from rkspeech.export.whisper_onnx import export_encoder
    from rkspeech.models.whisper.sizes import size_dims, write_synthetic_openai
    from rkspeech.models.whisper.weights import load_whisper_encoder

    tmp = tmp_path_factory.mktemp("split")
    dims = dataclasses.replace(size_dims("tiny"), n_audio_layer=2)
    loaded = load_whisper_encoder(write_synthetic_openai(tmp / "synthetic.pt", dims, seed=3))
    inline = tmp / "inline" / "encoder.onnx"
    inline.parent.mkdir()
    export_encoder(loaded.model, inline)
    ext = tmp / "external" / "encoder.onnx"
    ext.parent.mkdir()
    proto = onnx.load(str(inline))
    onnx.save(proto, str(ext), save_as_external_data=True, all_tensors_to_one_file=False, size_threshold=0)
    assert len(list(ext.parent.iterdir())) > 10  # weights really live outside the graph file
    mel = np.random.default_rng(0).standard_normal((1, dims.n_mels, 3000)).astype(np.float32)
    whole = ort.InferenceSession(str(inline)).run(None, {"mel": mel})[0]
    return {"inline": inline, "external": ext, "mel": mel, "whole": whole, "d": dims.n_audio_state}


def _chain(paths, mel):
    env = {"mel": mel}
    for p in paths:
        sess = ort.InferenceSession(str(p))
        outs = sess.run(None, {i.name: env[i.name] for i in sess.get_inputs()})
        env.update(zip((o.name for o in sess.get_outputs()), outs))
    return env["encoder_output"]


@pytest.mark.parametrize("inline_limit", [None, 1], ids=["pieces-inline", "pieces-external"])
def test_block_cut_of_external_data_graph_chains_to_the_whole(encoder_onnx, tmp_path, monkeypatch, inline_limit):
    from rkspeech.export import split
    from rkspeech.pipelines.whisper_npu import block_cuts

    if inline_limit is not None:
        monkeypatch.setattr(split, "INLINE_LIMIT", inline_limit)
    src = encoder_onnx["external"]
    cuts = block_cuts(src, 2)
    work = split.work_nodes(onnx.load(str(src), load_external_data=False).graph)
    assert work[cuts[0]].name.startswith("/blocks.1/") and not work[cuts[0] - 1].name.startswith("/blocks.1/")
    paths = split.split_onnx(src, 2, tmp_path / "pieces", cuts=cuts)
    first, second = (onnx.load(str(p), load_external_data=False).graph for p in paths)
    # only the residual stream crosses: no bias or LayerNorm scale handed over
    assert [i.name for i in first.input] == ["mel"]
    assert [(o.name, o.type.tensor_type.shape.dim[0].dim_value) for o in first.output] == \
        [("/blocks.0/Add_1_output_0__flat", 1500 * encoder_onnx["d"])]
    assert [i.name for i in second.input] == [o.name for o in first.output]
    data_files = sorted(p.name for p in (tmp_path / "pieces").glob("*.data"))
    assert data_files == ([] if inline_limit is None else ["part0.onnx.data", "part1.onnx.data"])
    out = _chain(paths, encoder_onnx["mel"])
    np.testing.assert_allclose(out, encoder_onnx["whole"], rtol=0, atol=1e-4)


def test_block_cuts_refuses_more_pieces_than_blocks(encoder_onnx):
    from rkspeech.pipelines.whisper_npu import block_cuts

    with pytest.raises(RkspeechError, match="2 blocks into 3 pieces"):
        block_cuts(encoder_onnx["inline"], 3)
