"""One contract reader for every kind of graph, from an .onnx (metadata checked against the
graph's I/O) or an .rknn (custom string), with one-line refusals."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from rkspeech.contracts.base import CONTRACT_KEY
from rkspeech.contracts.code_predictor import CodePredictorContract
from rkspeech.contracts.read import KINDS, parse_contract, read_contract
from rkspeech.contracts.rknn_file import parse_bytes
from rkspeech.contracts.talker import TalkerContract
from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.synthetic_vocoder import CONFIGS
from rkspeech.stepgraph.step import step_contract

CONTRACTS = {
    "vocoder": step_contract(CONFIGS["reduced"], 4),
    "talker": TalkerContract(hidden=64, layers=2, heads=4, kv_heads=2, head_dim=16, capacity=8, B=2,
                             rope_theta=1e6, rms_norm_eps=1e-6, kv_layout="grouped", fingerprint="ab"),
    "code_predictor": CodePredictorContract(talker_hidden=64, hidden=48, vocab_size=32, num_code_groups=4,
                                            layers=1, embed="onehot"),
}


def identity_onnx(path, contract, *, break_output: bool = False):
    """A graph with exactly the contract's I/O (each output a constant of its shape) and the
    contract in its metadata; ``break_output`` gives the first output one row too many."""
    ins = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in contract.input_shapes().items()]
    outs, nodes = [], []
    for i, (n, s) in enumerate(contract.output_shapes().items()):
        s = [s[0] + 1, *s[1:]] if break_output and i == 0 else s
        outs.append(helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s))
        nodes.append(helper.make_node("ConstantOfShape", [f"{n}_shape"], [n]))
        nodes.append(helper.make_node("Constant", [], [f"{n}_shape"],
                                      value=helper.make_tensor(f"{n}_s", onnx.TensorProto.INT64, [len(s)], s)))
    model = helper.make_model(helper.make_graph(nodes, "g", ins, outs))
    model.metadata_props.add(key=CONTRACT_KEY, value=contract.to_json())
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_every_kind_reads_back_from_onnx_and_from_text(name, tmp_path):
    c = CONTRACTS[name]
    assert type(c) in KINDS.values() and c.version == 1
    assert parse_contract(c.to_json()) == c
    assert read_contract(identity_onnx(tmp_path / "g.onnx", c)) == c
    assert read_contract(tmp_path / "g.onnx", type(c)) == c
    assert c.input_names == tuple(c.input_shapes()) and c.output_names == tuple(c.output_shapes())


def test_state_sizes():
    assert CONTRACTS["vocoder"].state_numel == CONTRACTS["vocoder"].cache_numel > 0
    assert CONTRACTS["talker"].state_numel == 2 * 2 * 2 * 8 * 16  # [2L, Hc, cap, hd], grouped: Hc = kv_heads
    assert CONTRACTS["code_predictor"].state_numel == 0


def test_refusals_are_one_line(tmp_path):
    talker = identity_onnx(tmp_path / "t.onnx", CONTRACTS["talker"])
    cases = [
        (lambda: read_contract(talker, CodePredictorContract), "not an rkspeech code-predictor contract"),
        (lambda: read_contract(identity_onnx(tmp_path / "b.onnx", CONTRACTS["talker"], break_output=True)),
         "its contract says hidden is"),
        (lambda: parse_contract('{"format": "rkspeech-whisper/9"}'), "not an rkspeech contract"),
        (lambda: parse_contract("[" * 100_000), "not valid JSON"),
        (lambda: read_contract(tmp_path / "missing.onnx"), "does not exist"),
        (lambda: read_contract(tmp_path), "is a directory"),
    ]
    for call, message in cases:
        with pytest.raises(RkspeechError, match=message) as exc:
            call()
        assert "\n" not in str(exc.value)
    bare = onnx.load(str(talker))
    del bare.metadata_props[:]
    onnx.save(bare, str(tmp_path / "bare.onnx"))
    with pytest.raises(RkspeechError, match="no rkspeech.contract metadata"):
        read_contract(tmp_path / "bare.onnx")


@pytest.mark.rknn
def test_rknn_custom_string_of_any_kind(tmp_path_factory, tmp_path, monkeypatch):
    """An .rknn's contract (any kind) comes from its custom string; none is one line."""
    from rkfixtures import session_rknn

    from rkspeech.contracts import read as read_module
    from rkspeech.contracts import rknn_file

    c = parse_bytes(session_rknn(tmp_path_factory).read_bytes())
    assert c.contract is None  # the fixture's custom string is a foreign format
    path = tmp_path / "g.rknn"
    path.write_bytes(b"")
    for contract in CONTRACTS.values():
        assert len(contract.to_json().encode()) <= 1024  # fits the build's custom string
        c.custom_string = contract.to_json()
        rknn_file._read_custom(c)
        assert c.contract == contract
        monkeypatch.setattr(read_module, "read_container", lambda p, expect_target=None, c=c: c)
        assert read_contract(path) == contract
    c.custom_string = None
    with pytest.raises(RkspeechError, match="no custom string, so no rkspeech contract"):
        read_contract(path)
