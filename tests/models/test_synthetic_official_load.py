"""A synthetic model root loads through qwen-tts' public API as it is, with no stand-in for any of
its parts: ``from qwen_tts import Qwen3TTSModel; Qwen3TTSModel.from_pretrained(root)``.

That loads the talker and the text processor, and ``speech_tokenizer/`` whole through
``Qwen3TTSTokenizer.from_pretrained``: its ``preprocessor_config.json`` (``AutoFeatureExtractor``)
and ``Qwen3TTSTokenizerV2Model`` with the Mimi encoder built from ``encoder_config``.  What must
hold: every tensor of both models comes from the root's files (none missing, none left over,
none different), the speech tokenizer encodes audio and decodes codes as our vocoder does, and
the wrapper's ``generate_custom_voice`` gives the audio of our greedy codes; with
``max_new_tokens`` N that is N - 1 frames (the N-th sampled token gets no codes).

The official side runs in a child interpreter: ``import qwen_tts`` must run the package's own
``__init__`` files, which ``official_reference`` (imported by other test modules of the session)
deliberately replaces with bare packages and a stand-in speech tokenizer.  One thing the child
does provide: ``qwen_tts/__init__`` imports the 25 Hz tokenizer, whose ``speech_vq`` module
imports ``sox`` and ``torchaudio.compliance.kaldi`` at its top.  The 12 Hz model never calls them;
``sox`` (the PyPI wrapper) is not installed, and torchaudio has no release for our torch 2.13 (the
newest, 2.11.1, fails to load its compiled extension into torch 2.13).  So, only when the real
import fails, empty modules stand under those two names (with a ``__spec__``, so transformers'
availability probe sees no installed distribution and treats them as absent).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

MAX_NEW_TOKENS = 6
TEXT = "The quick brown fox."

SCRIPT = r'''
import importlib, importlib.machinery, json, sys, types
for name in ("sox", "torchaudio", "torchaudio.compliance", "torchaudio.compliance.kaldi"):
    try:
        importlib.import_module(name)
    except Exception:  # not installed (sox), or no build for this torch (torchaudio)
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        sys.modules[name] = module
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

torch.set_num_threads(2)
from qwen_tts import Qwen3TTSModel

root, out, max_new_tokens = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
tts = Qwen3TTSModel.from_pretrained(str(root))
st = tts.model.speech_tokenizer


def compare(module, path):
    file, state = load_file(str(path)), module.state_dict()
    return {"tensors": len(state), "not_in_file": sorted(k for k in state if k not in file),
            "different": sorted(k for k in state if k in file and not torch.equal(state[k].float(), file[k].float())),
            "unused": sorted(k for k in file if k not in state)}


report = {"model": type(tts.model).__name__, "speech_tokenizer": type(st).__name__,
          "speech_tokenizer_model": type(st.model).__name__, "feature_extractor": type(st.feature_extractor).__name__,
          "feature_rate": st.feature_extractor.sampling_rate,
          "tts_weights": compare(tts.model, root / "model.safetensors"),
          "speech_tokenizer_weights": compare(st.model, root / "speech_tokenizer" / "model.safetensors")}
wavs, report["generate_rate"] = tts.generate_custom_voice(
    text=sys.argv[4], speaker="vivian", language="english", do_sample=False, subtalker_dosample=False,
    max_new_tokens=max_new_tokens)
np.save(out / "generated.npy", wavs[0])
t = np.arange(24000) / 24000.0
sine = (0.3 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32)
codes = st.encode(sine, sr=24000).audio_codes[0]
report["encode_repeats"] = bool(torch.equal(codes, st.encode(sine, sr=24000).audio_codes[0]))
np.save(out / "codes.npy", codes.numpy())
decoded, report["decode_rate"] = st.decode([{"audio_codes": codes}])
np.save(out / "decoded.npy", decoded[0])
(out / "report.json").write_text(json.dumps(report))
'''


@pytest.fixture(scope="module")
def official(tts_custom_ckpt, tmp_path_factory):
    """Run ``SCRIPT`` on the session's reduced custom-voice root: (folder, report)."""
    out = tmp_path_factory.mktemp("official_load")
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tts_custom_ckpt), str(out), str(MAX_NEW_TOKENS), TEXT],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "report.json").read_text())


@pytest.fixture(scope="module")
def decode(tts_custom_ckpt):
    """Our vocoder on the root's speech tokenizer: codes ``[T, 16]`` -> float32 samples."""
    import torch

    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder

    model, _, _ = load_vocoder(tts_custom_ckpt)

    def run(codes):
        with torch.no_grad():
            return model(torch.from_numpy(np.ascontiguousarray(codes.T[None]))).reshape(-1).numpy()
    return run


def test_every_weight_comes_from_the_files(official):
    _, r = official
    assert r["model"] == "Qwen3TTSForConditionalGeneration"
    assert (r["speech_tokenizer"], r["speech_tokenizer_model"]) == ("Qwen3TTSTokenizer", "Qwen3TTSTokenizerV2Model")
    assert (r["feature_extractor"], r["feature_rate"]) == ("EncodecFeatureExtractor", 24000)
    for part in ("tts_weights", "speech_tokenizer_weights"):
        w = r[part]
        assert w["tensors"] > 0 and w["not_in_file"] == [] and w["different"] == [] and w["unused"] == [], (part, w)


def test_encoder_codes_decode_as_our_vocoder_does(official, decode):
    from rkspeech.core.compare import snr_db

    out, r = official
    codes = np.load(out / "codes.npy")
    assert codes.shape == (math.ceil(24000 / 1920), 16) and r["encode_repeats"]
    assert codes.min() >= 0 and codes.max() < 2048 and len(np.unique(codes)) > 16
    official_wav = np.load(out / "decoded.npy")
    ours = decode(codes)
    assert r["decode_rate"] == 24000 and official_wav.shape == ours.shape == (codes.shape[0] * 1920,)
    assert snr_db(official_wav, ours) >= 100.0


def test_generate_is_our_greedy_codes_decoded(official, tts, decode):
    """``max_new_tokens`` N: N - 1 frames of audio (this root's talker does not stop sooner)."""
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.core.compare import snr_db

    out, r = official
    codes = tts.generate_codes(TEXT, speaker="vivian", language="english",
                               options=GenerationOptions.greedy(max_new_tokens=MAX_NEW_TOKENS))
    assert codes.shape == (MAX_NEW_TOKENS - 1, 16)
    official_wav = np.load(out / "generated.npy")
    assert r["generate_rate"] == 24000 and official_wav.shape == (codes.shape[0] * 1920,)
    assert snr_db(official_wav, decode(codes)) >= 100.0
