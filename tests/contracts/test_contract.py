"""The one contract object: layout, serialization, and its checks."""

from __future__ import annotations

import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.synthetic_vocoder import CONFIGS
from rkspeech.contracts.vocoder import VocoderContract
from rkspeech.stepgraph.step import stateful_modules, step_contract


def test_published_layout_and_size():
    c = step_contract(CONFIGS["published"], 64)
    assert c.segment("kv").numel == 8 * 2 * 16 * 71 * 64 == 1_163_264
    assert c.cache_numel == 1_298_496
    assert c.samples_per_token == 1920 and c.sample_rate == 24000
    assert c.input_shapes()["freqs_in"] == [64, 32]
    assert len(c.to_json().encode()) <= 1024  # fits an rknn custom string
    assert VocoderContract.from_json(c.to_json()) == c
    assert c.with_codes_length(16).compatible_cache(c)
    assert not step_contract(CONFIGS["reduced"], 64).compatible_cache(c)


#: The reduced config's cache layout as plans and .rknn files record it: names, shapes, order.
REDUCED_LAYOUT = [
    ("pre_conv", (128, 2)), ("kv", (2, 2, 2, 71, 64)), ("up0_dw", (256, 6)), ("up1_dw", (256, 6)),
    ("dec0", (256, 6)),
    ("b0_convT", (384, 1)), ("b0_r1", (192, 6)), ("b0_r3", (192, 18)), ("b0_r9", (192, 54)),
    ("b1_convT", (192, 1)), ("b1_r1", (96, 6)), ("b1_r3", (96, 18)), ("b1_r9", (96, 54)),
    ("b2_convT", (96, 1)), ("b2_r1", (48, 6)), ("b2_r3", (48, 18)), ("b2_r9", (48, 54)),
    ("b3_convT", (48, 1)), ("b3_r1", (24, 6)), ("b3_r3", (24, 18)), ("b3_r9", (24, 54)),
    ("final", (24, 6)),
]


def test_layout_from_the_modules(reduced_model):
    """The segments come from the modules' own state: the recorded layout, from a config or a
    model, and every module that carries state has a segment."""
    from rkspeech.models.qwen3_tts.vocoder_transformer import Attention

    for source in (CONFIGS["reduced"], reduced_model):
        assert [(s.name, s.shape) for s in step_contract(source, 16).segments] == REDUCED_LAYOUT
    walked = {id(m) for _, m in stateful_modules(reduced_model)}
    stateful = [name for name, m in reduced_model.named_modules()
                if getattr(m, "state_shape", None) and 0 not in m.state_shape
                and not isinstance(m, Attention)]  # the attention's state is the pre-transformer's
    assert stateful and all(id(reduced_model.get_submodule(n)) in walked for n in stateful)
    assert len(stateful) == len(REDUCED_LAYOUT)


def test_segments_are_contiguous():
    c = step_contract(CONFIGS["reduced"], 8)
    end = 0
    for s in c.segments:
        assert s.offset == end and s.numel > 0
        end = s.end
    assert end == c.cache_numel


@pytest.mark.parametrize("text", ["not json", '{"format": "other"}', '{"format": "rkspeech-step/1", "B": 4}'])
def test_malformed_contract_is_a_clear_error(text):
    with pytest.raises(RkspeechError):
        VocoderContract.from_json(text)


def test_inconsistent_cache_size_rejected():
    d = step_contract(CONFIGS["reduced"], 8).to_dict()
    d["N"] += 1
    with pytest.raises(RkspeechError, match="inconsistent"):
        VocoderContract.from_dict(d)
