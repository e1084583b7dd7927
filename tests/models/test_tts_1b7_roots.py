"""The 1.7B checkpoints' synthetic roots (issue 54): every variant loads through qwen-tts' public
``Qwen3TTSModel.from_pretrained`` as it is, every tensor from the files, with the 1.7B's structure
(talker as wide as the text embedding, a real ``small_to_mtp_projection``, an x-vector as wide as
the talker in Base, the two speakers only the 1.7B CustomVoice has, size ``1b7``).  Greedy codes
against the official API on these roots: tests/models/test_tts_generate.py (``reduced-1.7b``)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_synthetic_official_load import SCRIPT as LOAD_SCRIPT

VARIANTS = ("custom-voice", "voice-design", "base")

#: the official load of each root in one child interpreter (``import qwen_tts`` needs its own
#: package files: see test_synthetic_official_load), weights compared as there
SCRIPT = LOAD_SCRIPT.split("root, out, max_new_tokens")[0] + r'''
report = {}
for root in map(Path, sys.argv[1:]):
    tts = Qwen3TTSModel.from_pretrained(str(root))
    file, state = load_file(str(root / "model.safetensors")), tts.model.state_dict()
    report[root.name] = {
        "size": tts.model.tts_model_size, "type": tts.model.tts_model_type,
        "not_in_file": sorted(k for k in state if k not in file), "unused": sorted(k for k in file if k not in state),
        "different": sorted(k for k in state if k in file and not torch.equal(state[k].float(), file[k].float())),
        "projection": list(getattr(tts.model.talker.code_predictor.small_to_mtp_projection, "weight",
                                   torch.zeros(0)).shape),
        "speakers": sorted(tts.model.config.talker_config.spk_id),
    }
print(json.dumps(report))
'''


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    base = tmp_path_factory.mktemp("tts_1b7")
    return {v: write_tts_checkpoint(base / v, "reduced-1.7b", v, seed=1) for v in VARIANTS}


def test_every_variant_loads_in_the_official_package(roots):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, *map(str, roots.values())], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    for variant in VARIANTS:
        r = report[variant]
        assert (r["not_in_file"], r["unused"], r["different"]) == ([], [], []), (variant, r)
        assert r["size"] == "1b7" and r["type"] == variant.replace("-", "_")
        assert r["projection"] == [48, 64]  # code predictor 48 wide behind the 64-wide talker
    assert {"ono_anna", "sohee", "vivian"} <= set(report["custom-voice"]["speakers"])
    assert report["base"]["speakers"] == report["voice-design"]["speakers"] == []


def test_the_1b7_structure_is_in_the_config(roots):
    """What tells a 1.7B root from a 0.6B one, as our reader sees it."""
    from rkspeech.models.qwen3_tts.tts_config import TTSConfig

    cfg = TTSConfig.from_dict(json.loads((roots["base"] / "config.json").read_text()))
    assert cfg.talker.hidden_size == cfg.talker.text_hidden_size == 64
    assert cfg.speaker_encoder.enc_dim == cfg.talker.hidden_size
    assert cfg.tts_model_size == "1b7"
