"""One CLI vocabulary (issue 25, item 5): every old spelling still parses, to the same namespace as
its new one, and prints one deprecation line naming the new one; no command shows a retired
spelling; ``--help`` of the big commands is grouped.  Parse only: nothing here runs a command."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest
from rkfixtures import cli_commands

from rkspeech.cli import build_parser, vocabulary
from rkspeech.cli.vocabulary import (
    ALIASES,
    PREFIXES,
    SERVE_SHARED,
    VOCABULARY,
    deprecation,
    threads_default,
)

#: each command's required arguments (new spellings): positionals, then flag -> value
REQUIRED = {
    "accuracy": (["m.onnx"], {}),
    "build qwen3-asr": ([], {"--model-dir": "m", "--out-dir": "o"}),
    "build qwen3-tts": ([], {"--out-dir": "o"}),
    "build qwen3-tts-vocoder": ([], {"--out-dir": "o"}),
    "build whisper-encoder": ([], {"--model-dir": "m", "--out-dir": "o"}),
    "check-board": ([], {"--plan": "plan.json"}),
    "convert": (["m.onnx"], {"--target": "rk3588"}),
    "decode": (["c.npy"], {"--plan": "plan.json", "-o": "x.wav"}),
    "demo": ([], {}),
    "export qwen3-tts-vocoder": ([], {"-B": "4"}),
    "healthcheck": ([], {}),
    "serve": ([], {}),
    "speak": (["hello"], {"--plan": "plan.json", "-o": "x.wav"}),
    "speech-check qwen3-tts": ([], {"--plan": "plan.json"}),
    "synth-checkpoint qwen3-asr": ([], {"--out-dir": "o"}),
    "synth-checkpoint qwen3-tts": ([], {"--out-dir": "o"}),
    "synth-checkpoint qwen3-tts-vocoder": ([], {"--out-dir": "o"}),
    "transcribe": (["a.wav"], {"--model-dir": "m"}),
    "verify": ([], {"--onnx": "s.onnx"}),
    "voices": ([], {}),
    "voices save": (["name"], {"--plan": "plan.json", "--ref-audio": "a.wav"}),
}


COMMANDS = cli_commands()


def _action(command: str, spelling: str) -> argparse.Action:
    for action in COMMANDS[command]._actions:
        if spelling in action.option_strings:
            return action
    raise AssertionError(f"{command}: no {spelling}")


def _visible(command: str) -> list[str]:
    return [s for a in COMMANDS[command]._actions if a.help is not argparse.SUPPRESS
            and not isinstance(a, argparse._HelpAction) for s in a.option_strings]


def _value(action: argparse.Action) -> list[str]:
    if action.nargs == 0:
        return []
    if action.choices:
        return [list(action.choices)[0]]
    return ["3"] if action.type in (int, float) or isinstance(action.type, vocabulary.Number) else ["v"]


def _argv(command: str, spelling: str, action: argparse.Action) -> list[str]:
    positionals, required = REQUIRED[command]
    argv = command.split() + positionals
    for flag, value in required.items():
        if flag not in action.option_strings:
            argv += [flag, value]
    return argv + [spelling, *_value(action)]


CASES = [(cmd, old, new) for cmd, table in ALIASES.items() for old, new in table.items()]


@pytest.mark.parametrize("command,old,new", CASES, ids=[f"{c}:{o}" for c, o, _ in CASES])
def test_old_spelling_parses_as_new_and_says_so(command, old, new, capsys):
    parser = build_parser()
    action = _action(command, new)
    new_ns = parser.parse_args(_argv(command, new, action))
    assert capsys.readouterr().err == ""
    old_ns = parser.parse_args(_argv(command, old, action))
    assert capsys.readouterr().err == deprecation(old, new) + "\n" == f"rkspeech: {old} is deprecated; use {new}\n"
    assert vars(old_ns) == vars(new_ns)
    assert getattr(new_ns, action.dest) != action.default  # the flag did set something
    assert old not in _visible(command) and new in _visible(command)
    assert not re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", COMMANDS[command].format_help())


def test_every_alias_names_a_command_and_no_command_is_missed():
    assert set(ALIASES) <= set(COMMANDS)
    assert set(REQUIRED) | {"doctor", "estimate", "inspect", "lint"} == set(COMMANDS)


def _stripped(flag: str) -> str:
    for prefix in PREFIXES:
        if flag.startswith(prefix):
            return "--" + flag[len(prefix):]
    return flag


def test_no_command_shows_a_retired_spelling():
    retired = {s for word in VOCABULARY for s in word.retired}
    shown = {(cmd, flag) for cmd in COMMANDS for flag in _visible(cmd)}
    bad = sorted((cmd, flag) for cmd, flag in shown if flag in retired or _stripped(flag) in retired)
    assert not bad, f"retired spellings still shown: {bad}"
    # each one spelling is used (a vocabulary row nobody follows is a typo)
    for word in VOCABULARY:
        for spelling in word.spelling.split("/"):
            if "*" not in spelling:
                assert any(f == spelling or _stripped(f) == spelling for _, f in shown), spelling


def test_serve_prefixes_what_is_per_engine():
    """serve runs both engines: a flag transcribe or speak has is --asr-/--tts- prefixed there,
    unless it applies to both (SERVE_SHARED)."""
    engine_flags = set(_visible("transcribe")) | set(_visible("speak"))
    unprefixed = [f for f in _visible("serve") if not f.startswith(("--asr-", "--tts-"))]
    assert [f for f in unprefixed if f in engine_flags] == list(SERVE_SHARED)
    for f in _visible("serve"):  # a prefixed flag takes what its unprefixed namesake takes
        for other in ("transcribe", "speak"):
            if _stripped(f) in _visible(other):
                a, b = _action("serve", f), _action(other, _stripped(f))
                assert (a.type, a.choices, a.nargs == 0) == (b.type, b.choices, b.nargs == 0), f


def test_one_threads_flag_one_default():
    seen = {}
    for cmd, parser in COMMANDS.items():
        for action in parser._actions:
            if action.dest in ("threads", "asr_threads") and action.help is not argparse.SUPPRESS:
                assert action.option_strings == ["--asr-threads" if cmd == "serve" else "--threads"], cmd
                assert action.default == threads_default(cmd), cmd
                assert action.type is vocabulary.number(int, None) and action.metavar == "N", cmd
                seen[cmd] = action.default
    assert seen == {"accuracy": None, "build whisper-encoder": None, "check-board": None, "decode": None, "speak": None,
                    "estimate": None,
                    "speech-check qwen3-tts": None,
                    "transcribe": 1, "serve": 1, "voices save": None}


@pytest.mark.parametrize("command", ["build qwen3-tts", "build qwen3-tts-vocoder", "build whisper-encoder", "check-board",
                                     "convert", "decode", "demo", "speak", "speech-check qwen3-tts", "transcribe",
                                     "verify", "accuracy"])
def test_help_is_grouped(command):
    text = COMMANDS[command].format_help()
    titles = re.findall(r"^(\S[^:\n]*):$", text, flags=re.M)
    assert {"input", "output", "NPU"} <= set(titles), titles
    assert titles.index("input") < titles.index("output") < titles.index("NPU")
    if "advanced" in titles:
        assert titles[-1] == "advanced"


def test_serve_help_groups_by_engine():
    text = COMMANDS["serve"].format_help()
    for title in ("transcription (ASR, --asr-*):", "speech (TTS, --tts-*):", "NPU:", "network:", "limits:"):
        assert f"\n{title}\n" in text
    assert "--whisper-model" not in text and "--core-masks" not in text


def test_conventions_lists_the_vocabulary():
    text = (Path(__file__).resolve().parents[2] / "CONVENTIONS.md").read_text()
    section = text.split("## CLI vocabulary", 1)[1].split("\n## ", 1)[0]
    for word in VOCABULARY:
        assert f"`{word.spelling}`" in section, word.spelling
        for old in word.retired:
            assert f"`{old}`" in section, old


def _one_value_flags():
    """(command, spelling, action) of every flag of every command that takes one value."""
    for cmd, parser in COMMANDS.items():
        for action in parser._actions:
            if action.option_strings and action.nargs is None and not action.choices and action.help is not argparse.SUPPRESS:
                yield cmd, max(action.option_strings, key=len), action


def test_no_flag_of_any_command_takes_nan_inf_or_a_meaningless_negative(capsys):
    """Issue 37 item 11: ``float("nan")`` passes every later check (``--request-timeout nan``
    made every request a 504; ``--memory-budget-mb nan``, ``--max-upload-mb inf``: tracebacks).
    Every flag of every command is fed nan / inf / -inf: a number flag refuses each with
    argparse's error line; any other flag keeps it as text.  A number flag refuses -1 too,
    unless its type says negative values mean something (``low=None``: an SNR in dB)."""
    parser = build_parser()
    numbers = 0
    for cmd, spelling, action in _one_value_flags():
        positionals, required = {**REQUIRED, "inspect": (["m.rknn"], {}), "lint": (["m.onnx"], {})}.get(cmd, ([], {}))
        base = cmd.split() + positionals + [x for f, v in required.items() if f != spelling for x in (f, v)]
        for bad in ("nan", "inf", "-inf", "1e999"):
            try:
                ns = parser.parse_args(base + [f"{spelling}={bad}"])
            except SystemExit as exc:
                err = capsys.readouterr().err.strip().splitlines()[-1]
                assert exc.code == 2 and re.search(rf"error: argument {spelling}\S*: '{bad}' is not (a finite number|an integer)",
                                                   err), (cmd, spelling, err)
                continue
            value = getattr(ns, action.dest)
            assert isinstance(value, str), f"{cmd} {spelling}={bad} parsed to {value!r}"
        if isinstance(action.type, vocabulary.Number) or action.type in (int, float):
            numbers += 1
            if getattr(action.type, "low", 0) is not None:
                with pytest.raises(SystemExit):
                    parser.parse_args(base + [f"{spelling}=-1"])
                assert re.search(rf"argument {spelling}\S*: must be >= 0, got -1", capsys.readouterr().err), (cmd, spelling)
    assert numbers >= 80  # every command's number flags were walked (83 when written)


def test_serve_options_refuse_non_finite_numbers():
    """The library's own check (``ServeOptions``) refuses nan and inf too: a caller that builds
    options without the CLI gets one line, not a 504 on every request."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.serve.options import ServeOptions

    for field in ("request_timeout_s", "max_audio_s", "idle_timeout_s", "body_timeout_s"):
        for bad in (float("nan"), float("inf")):
            with pytest.raises(RkspeechError, match=rf"{field} must be a finite number"):
                ServeOptions(**{field: bad})


def test_usage_mistakes_are_one_line(capsys):
    """A flag argparse refuses (a bad choice, a number flag given nan, a missing argument) is one
    line and exit 2 from ``main``, as every other user mistake is (argparse printed its usage
    block first: 11 lines for ``build qwen3-tts-vocoder``)."""
    from rkspeech.cli import main

    for argv in (["build", "qwen3-tts-vocoder", "--out-dir", "o", "--target", "foo"],
                 ["serve", "--request-timeout", "nan"], ["decode"]):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and ": error: " in err[0], (argv, err)
