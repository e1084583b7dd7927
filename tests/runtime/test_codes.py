"""normalize_codes / load_codes_file: layouts, dtypes, ranges, end padding, file formats."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.tts.codes import load_codes_file, normalize_codes

Q, K = 16, 2048


def codes(T=10, seed=0):
    return np.random.default_rng(seed).integers(0, K, size=(T, Q), dtype=np.int64)


def test_layouts_tq_qt_and_batch():
    c = codes()
    np.testing.assert_array_equal(normalize_codes(c, Q, K), c)
    np.testing.assert_array_equal(normalize_codes(c.T, Q, K), c)  # [Q, T]
    np.testing.assert_array_equal(normalize_codes(c.T[None], Q, K), c)  # official [1, Q, T]
    np.testing.assert_array_equal(normalize_codes(c[None], Q, K), c)  # [1, T, Q]
    sq = codes(Q)  # square: read as [T, Q]
    np.testing.assert_array_equal(normalize_codes(sq, Q, K), sq)
    out = normalize_codes(c.astype(np.int32), Q, K)
    assert out.dtype == np.int64 and out.flags.c_contiguous
    assert normalize_codes(c.astype(np.uint16), Q, K).dtype == np.int64


@pytest.mark.parametrize("shape", [(10, 15), (8,), (2, 10, 16), (15, 17)])
def test_wrong_shape(shape):
    with pytest.raises(RkspeechError, match="codebooks|shape"):
        normalize_codes(np.zeros(shape, np.int64), Q, K)


def test_wrong_dtype():
    with pytest.raises(RkspeechError, match="must be integers, got dtype float32.*astype"):
        normalize_codes(codes().astype(np.float32), Q, K)
    with pytest.raises(RkspeechError, match="integer array, got dtype float64"):
        normalize_codes(codes() + 0.5, Q, K)
    with pytest.raises(RkspeechError, match="integer array, got dtype <U"):
        normalize_codes(np.full((4, Q), "1"), Q, K)
    with pytest.raises(RkspeechError, match="integer array, got dtype bool"):
        normalize_codes(np.ones((4, Q), bool), Q, K)


def test_out_of_range_names_position_and_value():
    c = codes()
    c[7, 5] = K
    with pytest.raises(RkspeechError, match=r"code 2048 at token 7, codebook 5 is outside \[0, 2048\)"):
        normalize_codes(c, Q, K)
    c = codes()
    c[2, 0] = -3
    with pytest.raises(RkspeechError, match="code -3 at token 2, codebook 0"):
        normalize_codes(c, Q, K)
    # position is reported in [T, Q] terms when [Q, T] was given
    c = codes()
    c[4, 9] = 5000
    with pytest.raises(RkspeechError, match="token 4, codebook 9"):
        normalize_codes(c.T, Q, K)


def test_end_padding_trimmed():
    c = codes()
    padded = np.concatenate([c, -np.ones((5, Q), np.int64)])
    np.testing.assert_array_equal(normalize_codes(padded, Q, K), c)
    np.testing.assert_array_equal(normalize_codes(padded.T[None], Q, K), c)
    assert normalize_codes(-np.ones((3, Q), np.int64), Q, K).shape == (0, Q)
    with pytest.raises(RkspeechError, match="no codes"):
        normalize_codes(-np.ones((3, Q), np.int64), Q, K, allow_empty=False)


def test_minus_one_in_the_middle_is_an_error():
    c = codes()
    c[3, 0] = -1  # a padding-looking row followed by real tokens
    with pytest.raises(RkspeechError, match="code -1 at token 3, codebook 0: -1 is only valid as end padding"):
        normalize_codes(c, Q, K)
    c = codes()
    c[6, 11] = -1  # -1 in a later codebook of a real token
    with pytest.raises(RkspeechError, match="token 6, codebook 11"):
        normalize_codes(c, Q, K)


def test_load_codes_files(tmp_path):
    c = codes()
    np.save(tmp_path / "c.npy", c)
    (tmp_path / "c.json").write_text(json.dumps(c.tolist()))
    (tmp_path / "d.json").write_text(json.dumps({"codes": c.T.tolist()}))
    for name in ("c.npy", "c.json", "d.json"):
        np.testing.assert_array_equal(normalize_codes(load_codes_file(tmp_path / name), Q, K), c)
    torch = pytest.importorskip("torch")
    torch.save(torch.from_numpy(c), tmp_path / "c.pt")
    np.testing.assert_array_equal(normalize_codes(load_codes_file(tmp_path / "c.pt"), Q, K), c)


def test_load_codes_file_errors(tmp_path):
    with pytest.raises(RkspeechError, match="does not exist"):
        load_codes_file(tmp_path / "nope.npy")
    (tmp_path / "r.json").write_text("[[1, 2], [3]]")
    with pytest.raises(RkspeechError, match="ragged|cannot read"):
        load_codes_file(tmp_path / "r.json")
    (tmp_path / "x.npy").write_bytes(b"not numpy")
    with pytest.raises(RkspeechError, match="cannot read codes"):
        load_codes_file(tmp_path / "x.npy")
    (tmp_path / "x.txt").write_text("1 2 3")
    with pytest.raises(RkspeechError, match="unsupported codes file type"):
        load_codes_file(tmp_path / "x.txt")


@pytest.mark.parametrize("suffix", [".npy", ".json"])
def test_uint64_max_is_refused_not_dropped_as_padding(tmp_path, suffix):
    """2**64-1 cast to int64 is -1: in the last token it read as end padding and vanished."""
    c = codes().astype(np.uint64)
    c[-1, 0] = np.iinfo(np.uint64).max
    p = tmp_path / f"codes{suffix}"
    if suffix == ".npy":
        np.save(p, c)
    else:
        p.write_text(json.dumps(c.tolist()))
    with pytest.raises(RkspeechError, match=rf"code {2**64 - 1} (at token {len(c) - 1}, codebook 0 )?is outside"):
        normalize_codes(load_codes_file(p), Q, K)


def test_utterances_round_trip_and_refusals():
    from rkspeech.runtime.tts.codes import utterance_array, utterances

    a, b = codes()[:7], codes()[3:5]
    arr = utterance_array([a, b])
    assert arr.shape == (2, 7, Q) and (arr[1, 2:] == -1).all()
    for given in (arr, arr.transpose(0, 2, 1)):  # [N, T, Q] and the official [N, Q, T]
        got = utterances(given, Q, K)
        assert len(got) == 2 and np.array_equal(got[0], a) and np.array_equal(got[1], b)
    assert [u.shape for u in utterances(a, Q, K)] == [a.shape]  # [T, Q]: one utterance
    assert utterance_array([a]).shape == a.shape  # one sentence: the [T, 16] layout as before
    arr[1, 0, 0] = K
    with pytest.raises(RkspeechError, match=r"utterance 1 of 2: code 2048 at token 0, codebook 0"):
        utterances(arr, Q, K)
