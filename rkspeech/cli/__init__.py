"""The ``rkspeech`` command.

Each sub-command lives in ``rkspeech/cli/<name>.py`` with ``register(subparsers)``; those
modules import only argparse at load time so ``rkspeech --help`` stays fast and works on a
runtime-only install.  ``RkspeechError`` is printed on one line and exits 2; anything else is
a bug and keeps its traceback.  Every output flag's location is checked before the command runs
(``cli.outputs``).  SIGINT, SIGTERM and SIGHUP all end in one path: the running
stage's ``finally`` blocks stop its children and remove its temp files, then
``core.child.cleanup_owned`` sweeps whatever is still recorded, and the command prints one line
("interrupted" / "terminated by SIGTERM") and exits 128 + the signal number.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rkspeech.core.errors import RkspeechError

#: Sub-command modules under rkspeech.cli, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "demo",
    "synth_checkpoint",
    "export",
    "lint",
    "convert",
    "inspect",
    "estimate",
    "verify",
    "accuracy",
    "build",
    "decode",
    "speak",
    "speech_check",
    "voices",
    "transcribe",
    "serve",
    "healthcheck",
    "check_board",
    "doctor",
)


class OneLineParser(argparse.ArgumentParser):
    """argparse's parser with its usage mistakes on one line (``PROG: error: ...``, exit 2), as
    every other user mistake is: argparse prints its usage block first,
    11 lines for ``build qwen3-tts-vocoder`` before the line that says what was wrong.  Sub-
    commands' parsers are made of this class too (``add_subparsers`` takes the parent's)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="rkspeech",
        description="Speech models onto the Rockchip NPU: export, check, convert, run.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"rkspeech.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage mistake (one line, OneLineParser) or --help: its exit code
        return exc.code if isinstance(exc.code, int) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    from rkspeech.core import child

    from rkspeech.cli.environment import ENVIRONMENT, explain

    previous = child.install_signal_handlers()
    try:
        environment = getattr(args, ENVIRONMENT, None)
        if environment is not None:  # RKSPEECH_* for the flags not on the command line
            environment.apply(args)
        from rkspeech.cli.outputs import check_outputs

        check_outputs(args)  # every output location, before the command's work (cli.outputs)
        return int(args.func(args) or 0)
    except RkspeechError as exc:
        print(f"rkspeech {args.command}: error: {explain(str(exc), args)}", file=sys.stderr)
        return 2
    except child.Terminated as exc:
        child.cleanup_owned()
        print(f"rkspeech {args.command}: terminated by {exc}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        child.cleanup_owned()
        print(f"rkspeech {args.command}: interrupted", file=sys.stderr)
        return 130
    finally:
        child.restore_signal_handlers(previous)


if __name__ == "__main__":
    sys.exit(main())
