"""The build's ``code_predictor_verify`` precondition on several synthetic roots, torch only.

``rkspeech build qwen3-tts`` (defaults) on the reduced custom-voice root of seed 5 stopped after
~19 min at ``code_predictor_verify``: "the torch frame graph's codes differ from TTSModel's
(export bug)", 12 of 750 decisions from frame 17, codebook 4 (0-based 3).  Cause: a top-two gap of
9.5e-7 at codebook 3 left a fractional one-hot (0.94 for the runner-up, code 166) whose tie-break
score beat the maximum's (code 1782), so the graph fed code 166 back in.  The check here is the
build's own (``capture_frames`` -> ``torch_frame_logits`` -> ``check_torch_frame_graph``), with no
conversion: each seed takes ~2 s.  Seeds 0-9 all pass with ``ONEHOT_STAGES = 2``; with one stage
seed 5 fails (the others had no such near-tie).
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

SEEDS = (0, 1, 5, 9)
VERIFY_FRAMES = 50  # the build's default (tts_build.BuildOptions.verify_frames)


@pytest.mark.parametrize("seed", SEEDS)
def test_torch_frame_graph_codes_equal_generate(tmp_path, seed):
    from rkspeech.models.qwen3_tts.generate import TTSModel
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint
    from rkspeech.pipelines.code_predictor_build import capture_frames, check_torch_frame_graph, torch_frame_logits

    root = write_tts_checkpoint(tmp_path / "ck", "reduced", "custom-voice", seed)
    tts = TTSModel.load(root)
    captured = capture_frames(tts, VERIFY_FRAMES)
    assert len(captured) == VERIFY_FRAMES
    ref = torch_frame_logits(tts, captured)
    check_torch_frame_graph(ref, np.stack([c[1:] for _, _, c in captured]))


@pytest.mark.parametrize("int16_ready", [False, True])
def test_onehot_pick_is_exact_on_an_fp32_near_tie(tts, int16_ready):
    """The seed-5 logits' top two (gap 9.5e-7, below 1/65504): the embedding fed back is the
    maximum's row, exactly (one stage gave code 166's row; so did the int16 graph's (1024, 64))."""
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    step = CodePredictorFrame(tts.net.talker.code_predictor, embed="onehot", int16_ready=int16_ready).eval()
    v = step.vocab
    hi, lo = v - 266, v - 1882  # the seed-5 codes 1782 (maximum) and 166 (runner-up) at V = 2048
    logits = torch.linspace(-2.0, 2.0, v).view(1, v)
    logits[0, hi], logits[0, lo] = 3.3331127, 3.3331118
    table = step.cp.model.codec_embedding[0].weight
    with torch.no_grad():
        _, emb = step._pick(logits, 1)
    torch.testing.assert_close(emb.view(-1), table[hi], rtol=0, atol=0)


def test_check_names_the_first_miss():
    from rkspeech.core.errors import RkspeechError
    from rkspeech.pipelines.code_predictor_build import check_torch_frame_graph

    ref = np.zeros((2, 3, 4), np.float32)
    ref[:, :, 0] = 1.0
    ref[1, 1, 0], ref[1, 1, 2] = 0.5, 1.0  # frame 1, codebook 2 picks code 2
    ref[1, 0, 3] = 1.0 - 1e-6  # the codebook before it: a near-tie
    codes = np.zeros((2, 3), np.int64)
    check_torch_frame_graph(ref[:1], codes[:1])
    with pytest.raises(RkspeechError, match=r"1 of 6 code decisions, first at frame 1 codebook 2 \(graph's code 2, "
                                            r"TTSModel's 0\); codebook 1's top-two logit gap 1\.0\de-06"):
        check_torch_frame_graph(ref, codes)
