"""The one contract object: layout, serialization, and its checks."""

from __future__ import annotations

import pytest

from rkspeech.errors import RkspeechError
from rkspeech.models.qwen3_synthetic import CONFIGS
from rkspeech.streaming.contract import StepContract
from rkspeech.streaming.step import step_contract


def test_published_layout_and_size():
    c = step_contract(CONFIGS["published"], 64)
    assert c.segment("kv").numel == 8 * 2 * 16 * 71 * 64 == 1_163_264
    assert c.cache_numel == 1_298_496
    assert c.samples_per_token == 1920 and c.sample_rate == 24000
    assert c.input_shapes()["freqs_in"] == [64, 32]
    assert len(c.to_json().encode()) <= 1024  # fits an rknn custom string
    assert StepContract.from_json(c.to_json()) == c
    assert c.with_codes_length(16).compatible_cache(c)
    assert not step_contract(CONFIGS["reduced"], 64).compatible_cache(c)


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
        StepContract.from_json(text)


def test_inconsistent_cache_size_rejected():
    d = step_contract(CONFIGS["reduced"], 8).to_dict()
    d["N"] += 1
    with pytest.raises(RkspeechError, match="inconsistent"):
        StepContract.from_dict(d)
