"""Every output a command is given is checked before the command runs, and a write that fails at
the end is one line (issue 37, item 6: ``transcribe --out-dir`` at a file transcribed everything,
then ended in a traceback)."""

from __future__ import annotations

import argparse
import re

import pytest

from rkspeech.core.errors import RkspeechError

#: option strings that name something a command writes
OUTPUT_LIKE = re.compile(r"^(-o|--output|--out|--out-dir|--output-dir|--codes-out|--margins-out|--[a-z-]*(report|plot|log))$")


def _parsers(parser: argparse.ArgumentParser, name: str = "rkspeech"):
    yield name, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub_name, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {sub_name}")


def test_every_output_flag_says_what_it_writes():
    from rkspeech.cli import build_parser

    seen = 0
    for name, parser in _parsers(build_parser()):
        for action in parser._actions:
            if any(OUTPUT_LIKE.match(o) for o in action.option_strings) and action.nargs != 0:
                assert getattr(action, "writes", None) in ("file", "folder"), (name, action.option_strings)
                seen += 1
    assert seen >= 20  # every command's -o/--output, --out-dir, --report, --plot, --codes-out, ...


@pytest.mark.parametrize("argv, flag", [
    (["transcribe", "missing.wav", "--model-dir", "no-such-model", "--out-dir", "{file}"], "--out-dir"),
    (["transcribe", "missing.wav", "--model-dir", "no-such-model", "--out-dir", "/proc/1/out"], "--out-dir"),
    (["speak", "Hi.", "--model-dir", "no-such-model", "--plan", "no-plan.json", "-o", "out.wav",
      "--report", "{file}/r.json"], "--report"),
    (["decode", "no-codes.npy", "--plan", "no-plan.json", "-o", "{file}/out.wav"], "--output"),
    (["speech-check", "qwen3-tts", "--model-dir", "no-such-model", "--plan", "no-plan.json", "-o", "{file}/r.json"],
     "--output"),
    (["build", "qwen3-tts-vocoder", "--model-dir", "no-such-model", "--out-dir", "{file}"], "--out-dir"),
    (["synth-checkpoint", "qwen3-tts", "--out-dir", "{file}/x"], "--out-dir"),
    (["verify", "--onnx", "no.onnx", "--plot", "/proc/1/p.png"], "--plot"),
])
def test_an_unwritable_output_is_refused_before_the_command_runs(argv, flag, tmp_path, capsys, monkeypatch):
    """The inputs do not exist either: the one line is about the output, so the check ran first."""
    from rkspeech.cli import main

    monkeypatch.chdir(tmp_path)
    f = tmp_path / "a-file"
    f.write_text("x")
    rc = main([a.replace("{file}", str(f)) for a in argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert flag in err[0] and re.search("is a file|not writable|is not a folder", err[0]), err[0]
    assert f.read_text() == "x"


def test_margins_need_greedy_decisions(tmp_path, capsys, monkeypatch):
    """A sampled decision has no margin: refused in one line before the model loads."""
    from rkspeech.cli import main

    monkeypatch.chdir(tmp_path)
    rc = main(["speak", "Hi.", "--model-dir", "no-such-model", "--plan", "no-plan.json", "-o", "out.wav",
               "--margins-out", "m.npy"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "add --greedy" in err[0], err
    rc = main(["speak", "Hi.", "--model-dir", "no-such-model", "--plan", "no-plan.json", "-o", "out.wav",
               "--greedy", "--margins-out", "m.txt"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "must end in .npy" in err[0], err


def test_a_write_that_fails_at_the_end_is_one_line(tmp_path):
    from rkspeech.core.atomic import atomic_path, write_text

    f = tmp_path / "a-file"
    f.write_text("x")
    with pytest.raises(RkspeechError, match=r"cannot write .*a-file/out\.txt") as e:
        write_text(f / "out.txt", "hello")  # its folder is a file (made so after the start check)
    assert "\n" not in str(e.value)
    with pytest.raises(RkspeechError, match=r"cannot write /proc/1/out\.txt"):
        write_text("/proc/1/out.txt", "hello")  # refused even to root
    with pytest.raises(RkspeechError, match="No space left on device"):
        with atomic_path(tmp_path / "full.bin") as tmp:
            raise OSError(28, "No space left on device", str(tmp))
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # no temporary file left
