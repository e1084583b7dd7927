"""Text to speech without torch (``runtime.tts.numpy_loop``): the host's part of generation in numpy
over a plan whose talker and code predictor are graphs.

The reduced custom-voice model; its talker pair (prefill B=16 + decode, capacity 96) and its code
predictor in both forms (``step``: the stack one position a call, numpy heads; ``frame``: the
15 codebooks unrolled, greedy) exported to ONNX and written into two plans beside the session's
reduced vocoder steps.  What must hold:

* greedy codes of the numpy host loop equal the torch host loop's over the same graphs, for
  several texts, speakers, languages and both prompt modes, with both code-predictor forms;
* ``python -m rkspeech speak`` with torch made unimportable writes the same wav, sample for
  sample, as the torch host loop;
* the numpy sampler draws from the distribution the torch sampler draws from (the random streams
  differ: numpy's PCG64 vs torch.multinomial), checked over many draws from fixed logits;
* voice cloning without torch is refused in one line that says why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from streaming_fixtures import step_graphs, write_ort_plan

FRAMES = 12
#: (text, speaker, language, text_in_prompt): mixed speakers, languages and both prompt modes
CASES = [
    ("Stages on graphs, without torch.", "vivian", "english", None),
    ("A second sentence, somewhat longer than the first one was.", "ryan", "auto", None),
    ("Guten Tag, wie geht es?", "vivian", "german", False),
    ("Numbers: 1, 22, 333.", "ryan", "chinese", False),
]

BLOCKER = textwrap.dedent("""
    import sys, importlib.abc
    attempts = []
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] == "torch":
                attempts.append(name)
                raise ImportError(f"torch is blocked in this test: {name}")
            return None
    sys.meta_path.insert(0, Block())
""")


def _contract(path):
    from rkspeech.contracts.read import read_onnx_metadata

    return json.loads(read_onnx_metadata(path)["rkspeech.contract"])


@pytest.fixture(scope="module")
def plans(tmp_path_factory, reduced_model, tts):
    """``{"frame": plan.json, "step": plan.json}``: the same talker pair, each code-predictor form."""
    from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
    from rkspeech.export.talker_onnx import export_talker_onnx, export_talker_pair
    from rkspeech.plan.sections import stage_section
    from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
    from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

    d = tmp_path_factory.mktemp("numpy_plans")
    graphs = step_graphs(tmp_path_factory, reduced_model)
    talker = export_talker_pair(tts.net.talker.model, d / "talker", capacity=96, prefill_B=16)
    cps = {"frame": export_code_predictor_onnx(CodePredictorFrame(tts.net.talker.code_predictor, embed="onehot").eval(),
                                               d / "cp" / "frame.onnx"),
           "step": export_talker_onnx(code_predictor_step(tts.net.talker.code_predictor), d / "cp" / "step.onnx")}
    out = {}
    for form, cp in cps.items():
        sub = d / form
        sub.mkdir()
        for p in graphs.values():
            shutil.copy(p, sub / p.name)
        plan = write_ort_plan(sub, {r: sub / p.name for r, p in graphs.items()})
        raw = json.loads(plan.read_text())
        raw["code_predictor"] = stage_section(impl="onnx", target=None, artifacts={form: {"onnx": cp}},
                                              contract=_contract(cp), base=sub)
        raw["talker"] = stage_section(impl="onnx", target=None,
                                      artifacts={r: {"onnx": p} for r, p in talker.items()},
                                      contract=_contract(talker["decode"]), base=sub)
        plan.write_text(json.dumps(raw))
        out[form] = plan
    return out


def _codes(root, plan, host, cases=CASES, options=None, **kw):
    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker

    out = []
    with Speaker(root, plan, threads=1, host=host, **kw) as sp:
        assert sp.host == host and sp.model.talker_backend.name != "torch"
        for text, speaker, language, tip in cases:
            opts = options or GenerationOptions.greedy(max_new_tokens=FRAMES + 1, text_in_prompt=tip)
            out.append(sp.model.generate_codes(text, speaker=speaker, language=language, options=opts))
    return out


@pytest.mark.parametrize("form", ["frame", "step"])
def test_greedy_codes_equal_the_torch_host_loop(tts_custom_ckpt, plans, form):
    got = _codes(tts_custom_ckpt, plans[form], "numpy")
    ref = _codes(tts_custom_ckpt, plans[form], "torch")
    for (text, *_), g, r in zip(CASES, got, ref):
        assert r.shape == (FRAMES, 16), text
        np.testing.assert_array_equal(g, r, err_msg=text)
