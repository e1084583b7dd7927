"""``rkspeech voices --model-dir DIR`` (issue 41, item 2): a model's variant, speakers and
languages from its config.json -- the lists the loaded model gives ``speak`` and ``serve`` --
without torch; one-line errors for a missing or bad folder.  The session's synthetic reduced
custom-voice checkpoint (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys


from rkspeech.cli import main


def _voices(capsys, *argv) -> tuple[int, str, str]:
    code = main(["voices", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _copy_with_config(src, dst, **changes):
    """``src`` as links, but its config.json with ``changes`` (top level or talker_config)."""
    dst.mkdir()
    for name in os.listdir(src):
        if name != "config.json":
            os.symlink(src / name, dst / name)
    raw = json.loads((src / "config.json").read_text())
    for key, value in changes.items():
        (raw["talker_config"] if key in raw["talker_config"] else raw)[key] = value
    (dst / "config.json").write_text(json.dumps(raw))
    return dst


def test_lists_what_the_loaded_model_offers(tts, tts_custom_ckpt, capsys):
    code, out, _ = _voices(capsys, "--model-dir", str(tts_custom_ckpt), "--json")
    report = json.loads(out)
    assert code == 0 and report["variant"] == tts.variant == "custom-voice"
    assert [s["name"] for s in report["speakers"]] == tts.speakers and len(tts.speakers) > 1
    assert report["languages"] == tts.languages
    dialects = {s["name"]: s["dialect"] for s in report["speakers"] if s["dialect"]}
    assert dialects == {k: v for k, v in tts.cfg.talker.spk_is_dialect.items() if v}
    code, out, _ = _voices(capsys, "--model-dir", str(tts_custom_ckpt))
    lines = out.splitlines()
    assert lines[0] == f"{tts_custom_ckpt}: Qwen3-TTS custom-voice (reduced)"
    assert lines[1].startswith(f"speakers ({len(tts.speakers)}): ") and lines[2].endswith(", ".join(tts.languages))


def test_needs_no_torch(tts_custom_ckpt):
    """torch made unimportable: the command still answers (a board has no torch)."""
    code = ("import sys; sys.modules['torch'] = None; from rkspeech.cli import main; "
            f"sys.exit(main(['voices', '--model-dir', {str(tts_custom_ckpt)!r}]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    assert "Qwen3-TTS custom-voice" in done.stdout


def test_a_model_without_speakers_says_how_it_gets_a_voice(tts_custom_ckpt, tmp_path, capsys):
    design = _copy_with_config(tts_custom_ckpt, tmp_path / "design", tts_model_type="voice_design", spk_id={},
                               spk_is_dialect={})
    code, out, _ = _voices(capsys, "--model-dir", str(design))
    assert code == 0
    assert out.splitlines()[1] == "speakers (0): none: a voice-design model speaks the voice a text describes " \
                                  "(speak --instruct)"


def test_missing_and_bad_folders_are_one_line_errors(tts_custom_ckpt, tmp_path, capsys):
    code, _, err = _voices(capsys, "--model-dir", str(tmp_path / "none"))
    assert code == 2 and err.strip() == f"rkspeech voices: error: model folder {tmp_path / 'none'} does not exist"
    broken = _copy_with_config(tts_custom_ckpt, tmp_path / "broken", tts_model_type="talking_clock")
    code, _, err = _voices(capsys, "--model-dir", str(broken))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.strip().endswith("tts_model_type is 'talking_clock'; expected one of base, custom_voice, voice_design")
    (broken / "config.json").write_text("{")
    code, _, err = _voices(capsys, "--model-dir", str(broken))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "cannot read JSON" in err
    code, _, err = _voices(capsys, "--model-dir", str(tts_custom_ckpt / "speech_tokenizer" / "config.json"))
    assert code == 2 and "is a file; --model-dir wants the model folder" in err
