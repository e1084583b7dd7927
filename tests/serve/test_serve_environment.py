"""``RKSPEECH_*`` for every ``rkspeech serve`` flag (issue 41, item 1): each flag's variable sets
what the flag sets, ``*_FILE`` reads the value from a file, the command line wins over the
environment and the environment over the default, and a bad value gets the flag's own one-line
error naming the variable.  Parse only (no model is loaded): fast."""

from __future__ import annotations

import argparse

import pytest

from rkspeech.cli import build_parser, main
from rkspeech.cli.environment import ENVIRONMENT, variable
from rkspeech.cli.vocabulary import Number


def _serve_parser():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return parser, sub.choices["serve"]


def _flags():
    _, serve = _serve_parser()
    return [a for a in serve._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _value(action) -> str:
    """A valid value for ``action`` that is not its default."""
    if action.nargs == 0:
        return ""
    if action.choices:
        return [c for c in action.choices if c != action.default][0]
    if isinstance(action.type, Number):
        return "3"
    return "v:1" if "wyoming" not in action.dest else "tcp://127.0.0.1:1"


def _parse(argv, environ):
    parser, _ = _serve_parser()
    args = parser.parse_args(["serve", *argv])
    getattr(args, ENVIRONMENT).apply(args, environ)
    return args


@pytest.mark.parametrize("action", _flags(), ids=lambda a: max(a.option_strings, key=len))
def test_every_flag_has_a_variable_that_sets_what_the_flag_sets(action):
    flag = max(action.option_strings, key=len)
    value = _value(action)
    by_flag = _parse([flag] + ([value] if value else []), {})
    by_env = _parse([], {variable(flag): value or "yes"})
    assert getattr(by_env, action.dest) == getattr(by_flag, action.dest) != action.default, flag


def test_command_line_then_environment_then_default(tmp_path):
    secret = tmp_path / "key"
    secret.write_text("s3cret\n")  # as `echo s3cret > key` writes it
    assert _parse([], {}).max_queue == 8  # the default
    assert _parse([], {"RKSPEECH_MAX_QUEUE": "4"}).max_queue == 4
    assert _parse(["--max-queue", "8"], {"RKSPEECH_MAX_QUEUE": "4"}).max_queue == 8  # given, although the default
    assert _parse(["--max-queue", "2"], {"RKSPEECH_MAX_QUEUE": "4"}).max_queue == 2
    assert _parse(["--timeout", "9"], {"RKSPEECH_REQUEST_TIMEOUT": "4"}).request_timeout == 9  # an old spelling is given too
    assert _parse([], {"RKSPEECH_API_KEY_FILE": str(secret)}).api_key == "s3cret"
    assert _parse([], {"RKSPEECH_API_KEY": ""}).api_key is None  # empty = unset
    assert _parse([], {"RKSPEECH_ASR_CORE_MASK": "0  0_1"}).asr_core_mask == ["0", "0_1"]
    assert _parse([], {"RKSPEECH_ASR_VAD": "off"}).asr_vad is False
    assert _parse([], {"RKSPEECH_ASR_VAD": "on"}).asr_vad is True
    assert _parse([], {"RKSPEECH_ZEROCONF": "1"}).zeroconf == "rkspeech"  # as --zeroconf alone
    assert _parse([], {"RKSPEECH_ZEROCONF": "off"}).zeroconf is None
    assert _parse([], {"RKSPEECH_ZEROCONF": "kitchen"}).zeroconf == "kitchen"


def _error(argv, monkeypatch, capsys, **env) -> str:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("flag,bad", [("--max-connections", "abc"), ("--request-timeout", "nan"),
                                      ("--max-queue", "-1"), ("--asr-backend", "gpu")])
def test_a_bad_value_gets_the_flags_error_naming_the_variable(flag, bad, monkeypatch, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", flag, bad])
    words = capsys.readouterr().err.strip().splitlines()[-1].split(f"argument {flag}: ", 1)[1]
    assert _error([], monkeypatch, capsys, **{variable(flag): bad}) == \
        f"rkspeech serve: error: {variable(flag)}: {words}"


def test_files_and_checks_after_parsing_name_the_variable(tmp_path, monkeypatch, capsys):
    err = _error([], monkeypatch, capsys, RKSPEECH_API_KEY_FILE=str(tmp_path / "missing"))
    assert err.endswith(f"RKSPEECH_API_KEY_FILE={tmp_path / 'missing'}: cannot read it (No such file or directory)")
    (tmp_path / "key").write_text("k")
    err = _error([], monkeypatch, capsys, RKSPEECH_API_KEY="a", RKSPEECH_API_KEY_FILE=str(tmp_path / "key"))
    assert err.endswith("both RKSPEECH_API_KEY and RKSPEECH_API_KEY_FILE are set: keep one")
    monkeypatch.delenv("RKSPEECH_API_KEY_FILE")
    err = _error(["--tts-model-dir", "x"], monkeypatch, capsys, RKSPEECH_HTTP="localhost")
    assert err.endswith("use HOST:PORT, e.g. 127.0.0.1:8000 (--http was set by RKSPEECH_HTTP)")


def test_help_says_how():
    _, serve = _serve_parser()
    text = " ".join(serve.format_help().split())
    assert "RKSPEECH_ + the flag's name in capitals" in text and "The command line wins" in text
