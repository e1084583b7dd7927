"""Every Whisper size's geometry (``rkspeech.models.whisper.sizes``): parameter counts, synthetic
checkpoints read by the real loader, export at 128 mel bins, and the runtime's geometry checks
(n_mels 80 vs 128, d_model) for every size, large-v3 and turbo included.

Cheap by construction: parameter counts on torch's meta device, export at tiny width only (the
real-geometry exports of small and large-v3 are measured by ``benchmarks/bench_whisper_sizes.py``
and recorded in docs/whisper-sizes.md), and CTranslate2 ``model.bin`` *indexes* written as sparse
files (the variables' data are holes), which is all :func:`model_geometry` reads.
"""

from __future__ import annotations

import struct

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.sizes import (
    SIZES,
    WhisperDims,
    encoder_parameters,
    write_synthetic_openai,
)


def test_geometry_of_every_size():
    assert SIZES["large-v3"].n_mels == SIZES["large-v3-turbo"].n_mels == SIZES["distil-large-v3"].n_mels == 128
    assert all(d.n_mels == 80 for n, d in SIZES.items() if "v3" not in n)
    assert SIZES["large-v3-turbo"].encoder == SIZES["large-v3"].encoder  # turbo cuts only the decoder
    assert SIZES["large-v3-turbo"].n_text_layer == 4 and SIZES["distil-large-v3"].n_text_layer == 2
    assert all(d.n_audio_state // d.n_audio_head == 64 for d in SIZES.values())  # every size: 64-wide heads
    assert [SIZES[n].n_vocab for n in ("tiny.en", "tiny", "large-v2", "large-v3")] == [51864, 51865, 51865, 51866]


@pytest.mark.parametrize("name", ["tiny", "base", "small", "medium", "large-v2", "large-v3"])
def test_encoder_parameter_formula_matches_the_module(name):
    import torch

    from rkspeech.models.whisper.encoder import WhisperEncoder

    dims = SIZES[name].encoder
    with torch.device("meta"):
        model = WhisperEncoder(dims)
    counted = sum(p.numel() for p in model.parameters()) + model.positional_embedding.numel()
    assert encoder_parameters(dims) == counted


def test_published_encoder_sizes():
    """Encoder parameters (with the 1500 x d positional table) against the commonly quoted sizes."""
    millions = {n: encoder_parameters(SIZES[n].encoder) / 1e6 for n in ("tiny", "base", "small", "medium", "large-v3")}
    assert millions == pytest.approx({"tiny": 8.2, "base": 20.6, "small": 88.2, "medium": 307.2,
                                      "large-v3": 637.0}, abs=0.1)


#: 128 mel bins at tiny width with one layer: large-v3's front end, cheap to export.
V3_FRONT = WhisperDims(128, 1500, 384, 6, 1, 51866, 448, 384, 6, 1)


@pytest.mark.parametrize("dims", [SIZES["tiny"], V3_FRONT], ids=["tiny", "128mel-1layer"])
def test_synthetic_checkpoint_loads_exports_and_lints(dims, tmp_path):
    from rkspeech.export.whisper_onnx import check_encoder_onnx, export_encoder
    from rkspeech.lint.checker import lint_model
    from rkspeech.models.whisper.weights import load_whisper_encoder
    from rkspeech.runtime.whisper.checks import check_encoder_geometry

    loaded = load_whisper_encoder(write_synthetic_openai(tmp_path / "synthetic.pt", dims, seed=1))
    assert loaded.source == "openai" and loaded.stored_dtype == "float16"
    assert loaded.dims == dims.encoder
    onnx_path = tmp_path / "encoder.onnx"
    export_encoder(loaded.model, onnx_path)
    check = check_encoder_onnx(onnx_path)
    assert check["layer_norms"] == 2 * dims.n_audio_layer + 1
    from rkspeech.runtime.runners.base import onnx_io_specs

    (ins,), (outs,) = [list(s.values()) for s in onnx_io_specs(onnx_path)]
    assert list(ins[0]) == [1, dims.n_mels, 3000] and list(outs[0]) == [1, 1500, dims.n_audio_state]
    check_encoder_geometry("synthetic", ins[0], outs[0], n_mels=dims.n_mels, d_model=dims.n_audio_state)
    assert not lint_model(onnx_path, "rk3588").errors


# -- the runtime's geometry checks for every size, from a CTranslate2 index ---------------------


def _string(s: str) -> bytes:
    data = s.encode() + b"\0"
    return struct.pack("<H", len(data)) + data


def write_ct2_index(folder, dims: WhisperDims) -> None:
    """A CTranslate2 ``model.bin`` whose index is that of ``dims`` (fp16 encoder conv1, decoder
    embeddings) and whose data are holes: a sparse file of the real size, a few KB on disk."""
    folder.mkdir(parents=True, exist_ok=True)
    variables = [("encoder/conv1/weight", (dims.n_audio_state, dims.n_mels, 3)),
                 ("decoder/embeddings/weight", (dims.n_vocab, dims.n_text_state))]
    with open(folder / "model.bin", "wb") as f:
        f.write(struct.pack("<I", 6) + _string("WhisperSpec") + struct.pack("<I", 3))
        f.write(struct.pack("<I", len(variables)))
        for name, shape in variables:
            nbytes = 2
            for n in shape:
                nbytes *= n
            f.write(_string(name) + struct.pack("<B", len(shape)) + struct.pack(f"<{len(shape)}I", *shape))
            f.write(struct.pack("<BI", 4, nbytes))
            f.seek(nbytes, 1)
        f.write(struct.pack("<I", 0))
    (folder / "config.json").write_text("{}")


def _fake_encoder_onnx(path, n_mels: int, d_model: int, frames: int = 3000):
    """A graph with a Whisper encoder's I/O shapes (its body is a constant)."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    out = helper.make_node("ConstantOfShape", ["shape"], ["encoder_output"],
                           value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.0]))
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], np.array([1, frames // 2, d_model]))
    graph = helper.make_graph(
        [out], "fake", [helper.make_tensor_value_info("mel", TensorProto.FLOAT, [1, n_mels, frames])],
        [helper.make_tensor_value_info("encoder_output", TensorProto.FLOAT, [1, frames // 2, d_model])],
        initializer=[shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("name", list(SIZES))
def test_model_geometry_and_encoder_checks_for_every_size(name, tmp_path):
    from rkspeech.runtime.whisper.checks import check_encoder_file, is_multilingual, model_geometry

    dims = SIZES[name]
    model = tmp_path / name
    write_ct2_index(model, dims)
    assert model_geometry(model) == {"n_mels": dims.n_mels, "d_model": dims.n_audio_state}
    assert is_multilingual(model) == (not name.endswith(".en"))
    right = _fake_encoder_onnx(tmp_path / "right.onnx", dims.n_mels, dims.n_audio_state)
    assert check_encoder_file(right, model_dir=model)[0] == "ort"
    other_mels = 80 if dims.n_mels == 128 else 128
    with pytest.raises(RkspeechError, match=f"n_mels {other_mels}, this model needs {dims.n_mels}"):
        check_encoder_file(_fake_encoder_onnx(tmp_path / "mels.onnx", other_mels, dims.n_audio_state),
                           model_dir=model)
    other_d = 384 if dims.n_audio_state != 384 else 512
    with pytest.raises(RkspeechError, match=f"d_model {other_d}, this model needs {dims.n_audio_state}"):
        check_encoder_file(_fake_encoder_onnx(tmp_path / "d.onnx", dims.n_mels, other_d), model_dir=model)
    with pytest.raises(RkspeechError, match="window"):  # the model zoo's 20 s encoder
        check_encoder_file(_fake_encoder_onnx(tmp_path / "w.onnx", dims.n_mels, dims.n_audio_state, 2000),
                           model_dir=model)
