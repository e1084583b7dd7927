"""The flag vocabulary carried into the library (issue 38, deliverable 4): a flag stores under its
own spelling, and no options class keeps a retired one.  The retired names come from
``vocabulary.ALIASES`` (each old spelling as an identifier: ``--sim-pieces`` -> ``sim_pieces``),
not from a list written here."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

import pytest
from rkfixtures import cli_commands

from rkspeech.cli.vocabulary import ALIASES

PACKAGE = Path(__file__).resolve().parents[2] / "rkspeech"

#: options class -> the command that builds it from its flags (a class not listed is checked
#: against the names no command uses any more)
OPTIONS_COMMANDS = {
    "AccuracyOptions": "accuracy",
    "CheckBoardOptions": "check-board",
    "ExportOptions": "export qwen3-tts-vocoder",
    "GenerationOptions": "speak",
    "ServeOptions": "serve",
    "TTSBuildOptions": "build qwen3-tts",
    "VocoderBuildOptions": "build qwen3-tts-vocoder",
    "WhisperEncoderBuildOptions": "build whisper-encoder",
}


def _ident(spelling: str) -> str:
    return spelling.lstrip("-").replace("-", "_")


COMMANDS = cli_commands()


def _flags(parser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _current(command: str) -> set[str]:
    """The names ``command`` shows: its flags' spellings as identifiers, and its positionals'
    names (accuracy's ``model``).  Not the dests: those are what is checked."""
    return ({_ident(s) for a in _flags(COMMANDS[command]) for s in a.option_strings}
            | {a.dest for a in COMMANDS[command]._actions if not a.option_strings})


def _retired(command: str | None) -> set[str]:
    """Old spellings as identifiers: ``command``'s own, and those no command shows any more,
    less what ``command`` stores under that name today."""
    shown = {_ident(s) for p in COMMANDS.values() for a in _flags(p) for s in a.option_strings}
    gone = {_ident(old) for table in ALIASES.values() for old in table} - shown
    own = {_ident(old) for old in ALIASES.get(command, {})} if command else set()
    return (own | gone) - (_current(command) if command else set())


def _options_classes() -> dict[str, tuple[str, list[str]]]:
    """Every ``@dataclass class *Options`` in rkspeech/: name -> (module, field names)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name.endswith("Options") and any(
                    "dataclass" in ast.unparse(d) for d in node.decorator_list):
                fields = [s.target.id for s in node.body if isinstance(s, ast.AnnAssign)
                          and isinstance(s.target, ast.Name)]
                found[node.name] = (str(path.relative_to(PACKAGE.parent)), fields)
    return found


def test_the_retired_names_are_derived():
    retired = _retired(None)
    # the rows of CONVENTIONS.md's table that no command shows any more are all there
    assert {"out", "output_dir", "sim_pieces", "parts", "skip_verify", "no_sim", "no_whole", "core_masks",
            "whisper_model", "accuracy_no_sim"} <= retired
    assert "timeout" not in retired and "backend" not in retired  # still the builds' and speak's own
    assert {"beam_size", "language", "vad", "threads"} <= _retired("serve")  # --asr-* there


def test_every_flag_stores_under_its_own_spelling():
    """A flag's ``dest`` is its (longest) spelling, so the library receives the current name
    (``--out-dir`` stored ``out``, ``--pieces`` ``sim_pieces`` / ``parts``, ``--skip-sim``
    ``skip_verify`` / ``no_sim`` before)."""
    wrong = [(cmd, max(a.option_strings, key=len), a.dest) for cmd, p in COMMANDS.items() for a in _flags(p)
             if a.dest != _ident(max(a.option_strings, key=len))]
    assert not wrong, wrong


def test_options_classes_use_no_retired_name():
    classes = _options_classes()
    assert set(OPTIONS_COMMANDS) <= set(classes), set(OPTIONS_COMMANDS) - set(classes)
    assert len(classes) >= 11  # 11 when written: the 8 above, CpuQuant, HybridInt16, Train
    bad = {name: sorted(set(fields) & _retired(OPTIONS_COMMANDS.get(name)))
           for name, (_, fields) in classes.items()}
    assert not {k: v for k, v in bad.items() if v}, bad


@pytest.mark.parametrize("name", sorted(OPTIONS_COMMANDS))
def test_the_commands_build_their_options_from_current_names(name):
    """Each listed class's command exists and shows flags named as some of the class's fields
    (the class belongs to it)."""
    command = OPTIONS_COMMANDS[name]
    assert command in COMMANDS
    _, fields = _options_classes()[name]
    assert set(fields) & _current(command), (name, command)
