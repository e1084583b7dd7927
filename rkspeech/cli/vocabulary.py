"""One CLI vocabulary for every ``rkspeech`` command, and its old spellings.

``VOCABULARY``: one row per concept -> the one spelling every command uses (CONVENTIONS.md,
"CLI vocabulary", is the same table).  ``ALIASES``: per command, each old spelling -> its new
one; the old spellings stay accepted, hidden from ``--help``, and print one line on stderr
(``rkspeech: --sim-pieces is deprecated; use --pieces``), then do exactly what the new spelling
does (same ``dest``, same type and choices).  ``Flags`` adds a command's flags into ``--help``
groups (``input``, ``output``, ``NPU``, ``advanced``) and its old spellings with them.

Standard library only: every CLI module imports it at load time.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from dataclasses import dataclass

from rkspeech.core.threads import ENV as THREADS_ENV

#: ``--help`` group titles, in the order commands add them; builds add the stages they share
#: with ``rkspeech verify`` / ``rkspeech accuracy`` as groups of their own.
INPUT, OUTPUT, NPU, ADVANCED = "input", "output", "NPU", "advanced"
SIM_CHECK, ACCURACY_MAP = "simulator check", "accuracy map"
#: what an output flag names (``Flags.add(..., writes=...)``), and the parsed-arguments field
#: that lists a command's outputs as (dest, kind, flag) for ``cli.outputs.check_outputs``
OUTPUT_KINDS = ("file", "folder")
OUTPUTS_DEST = "_rkspeech_outputs"


@dataclass(frozen=True)
class Word:
    concept: str
    spelling: str
    #: spellings of this concept no command shows any more (still accepted where they were used)
    retired: tuple[str, ...] = ()
    note: str = ""


#: Prefixes that name which part of a command a flag configures: ``--asr-*`` / ``--tts-*`` in a
#: command that runs both engines (serve); ``--accuracy-*`` / ``--verify-*`` in a build for the
#: stage that ``rkspeech accuracy`` / ``rkspeech verify`` runs alone.  A prefixed flag is the
#: vocabulary word after the prefix.
PREFIXES = ("--asr-", "--tts-", "--accuracy-", "--verify-")

VOCABULARY = (
    Word("output file", "-o/--output", (), "a file the command writes (secondary files: --report, --plot, ...)"),
    Word("output folder", "--out-dir", ("--out", "--output-dir")),
    Word("model folder", "--model-dir", ("--model", "--whisper-model", "--tts-model"),
         "build whisper-encoder also takes an openai-whisper .pt file here"),
    Word("per-engine flag where one command runs both (serve)", "--asr-* / --tts-*", (),
         "--asr-model-dir, --asr-encoder, --asr-backend, ...; --tts-model-dir, --tts-plan, --tts-backend"),
    Word("graph runtime (ort, sim, rknnlite)", "--backend", ()),
    Word("CPU threads", "--threads", (),
         f"default ${THREADS_ENV}, else min(2, CPU cores) (core.threads); transcribe and serve: 1 (measured)"),
    Word("cut a graph into N consecutive pieces", "--pieces", ("--sim-pieces", "--parts"),
         "--accuracy-pieces where the accuracy map is a side stage (build, verify --plot)"),
    Word("skip the simulator", "--skip-sim", ("--skip-verify", "--no-sim")),
    Word("skip the whole-graph simulator check", "--skip-whole", ("--no-whole",)),
    Word("NPU core mask(s)", "--core-mask", ("--core-masks",), "serve: --asr-core-mask MASK..., one per engine"),
    Word("conversion time limit", "--timeout", ()),
    Word("per-request time limit (serve)", "--request-timeout", ()),
    Word("streams generated at once over one weight read (lanes graphs)", "--streams", (),
         "build qwen3-tts: the lanes graphs' size; speak: up to N sentences ahead; serve: --tts-streams"),
    Word("CPU cores the process runs on", "--cpu-affinity", (),
         "big (default: the big cores where cores differ, core.cpus), all, or a list such as 4-7"),
)

#: command (as typed: "build qwen3-tts") -> {old spelling: new spelling}
ALIASES: dict[str, dict[str, str]] = {
    "accuracy": {"--no-sim": "--skip-sim", "--no-whole": "--skip-whole"},
    "build qwen3-tts": {"--out": "--out-dir", "--sim-pieces": "--pieces", "--skip-verify": "--skip-sim"},
    "build qwen3-tts-vocoder": {"--out": "--out-dir", "--sim-pieces": "--pieces", "--skip-verify": "--skip-sim",
                                "--accuracy-no-sim": "--accuracy-skip-sim"},
    "build whisper-encoder": {"--model": "--model-dir", "--out": "--out-dir", "--parts": "--pieces"},
    "demo": {"--out": "--out-dir", "--skip-verify": "--skip-sim"},
    "serve": {"--whisper-model": "--asr-model-dir", "--encoder": "--asr-encoder", "--backend": "--asr-backend",
              "--core-masks": "--asr-core-mask", "--engines": "--asr-engines", "--threads": "--asr-threads",
              "--compute-type": "--asr-compute-type", "--beam-size": "--asr-beam-size",
              "--language": "--asr-language", "--vad": "--asr-vad", "--tts-model": "--tts-model-dir",
              "--plan": "--tts-plan", "--timeout": "--request-timeout"},
    "synth-checkpoint qwen3-tts": {"--out": "--out-dir"},
    "synth-checkpoint qwen3-tts-vocoder": {"--out": "--out-dir"},
    "transcribe": {"--model": "--model-dir", "--output-dir": "--out-dir"},
    "verify": {"--sim-pieces": "--pieces"},
}

#: Flags serve leaves unprefixed although transcribe or speak has them: they apply to both engines.
SERVE_SHARED = ("--target", "--cpu-affinity")

#: Commands whose ``--threads`` default is not the common one (None: ``core.threads``), and why.
THREADS_DEFAULTS = {
    "transcribe": (1, "2 CTranslate2 threads made the Whisper decoder 2-10x slower on a shared 2-core host "
                      "(OpenMP spin-waits)"),
    "serve": (1, "as transcribe, per engine"),
}


def deprecation(old: str, new: str) -> str:
    """The one line an old spelling prints."""
    return f"rkspeech: {old} is deprecated; use {new}"


def _renamed(cls: type) -> type:
    """``cls`` (an argparse Action class) that prints :func:`deprecation` when it is reached
    through one of its old spellings (``action.renamed``: old -> new)."""

    class Renamed(cls):
        def __call__(self, parser, namespace, values, option_string=None):
            if option_string in self.renamed:
                print(deprecation(option_string, self.renamed[option_string]), file=sys.stderr)
            super().__call__(parser, namespace, values, option_string)

    Renamed.__name__ = f"Renamed{cls.__name__}"
    return Renamed


def threads_help(command: str, what: str) -> str:
    """``--threads`` help: the one meaning, and where the default differs, why."""
    if command in THREADS_DEFAULTS:
        n, why = THREADS_DEFAULTS[command]
        return f"CPU threads for {what} (default {n}: {why})"
    return f"CPU threads for {what} (default ${THREADS_ENV} if set, else min(2, CPU cores))"


def threads_default(command: str):
    """``--threads`` default of ``command``: None (resolve with :func:`resolve_threads`) unless listed."""
    return THREADS_DEFAULTS[command][0] if command in THREADS_DEFAULTS else None


def resolve_threads(value: int | None) -> int:
    """The thread count a parsed ``--threads`` means (None: ``core.threads.default_threads()``)."""
    if value is not None:
        return value
    from rkspeech.core.threads import default_threads

    return default_threads()


class Number:
    """An argparse ``type`` for a number flag: ``float`` or ``int``, finite, at least ``low`` (None:
    any sign).  ``float("nan")`` passes every comparison a command makes afterwards (``nan < 0``
    is False), so ``--request-timeout nan`` once made every request a 504 and ``--memory-budget-mb
    nan`` / ``--max-upload-mb inf`` ended in ``int()`` tracebacks; refused here, such a value gets
    argparse's error line (``argument --request-timeout: 'nan' is not a finite number``).
    One instance per (kind, low) (:func:`number`), so two flags of one meaning have equal types."""

    def __init__(self, kind: type, low: float | None):
        self.kind, self.low = kind, low
        self.__name__ = kind.__name__  # argparse names the type in its messages

    def __call__(self, text: str):
        try:
            value = self.kind(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if self.kind is int else 'a number'}") \
                from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if self.low is not None and value < self.low:
            raise argparse.ArgumentTypeError(f"must be >= {self.low:g}, got {text}")
        return value

    def __repr__(self) -> str:
        return f"number({self.kind.__name__}, low={self.low!r})"


@functools.lru_cache(maxsize=None)
def number(kind: type = float, low: float | None = 0) -> Number:
    """The shared type of a number flag (:class:`Number`); ``Flags.add`` gives it to every
    ``type=float`` / ``type=int`` flag, ``low=0`` unless the flag says ``low=`` (None: negative
    values mean something, e.g. an SNR in dB)."""
    return Number(kind, low)


class Flags:
    """Adds one command's flags: ``add(group, *spellings, **add_argument kwargs)``.

    ``group`` is a ``--help`` group title (INPUT, OUTPUT, NPU, ADVANCED or the command's own),
    created on first use, so groups are listed in the order the command first adds to them;
    ``None`` adds to the parser itself.  The command's old spellings of a flag (``ALIASES``) are
    registered as further option strings of the same action, kept out of ``action.option_strings``:
    so ``--help``, usage and error messages show only the new spelling, an old one sets the same
    ``dest`` with the same type and choices (and satisfies ``required``), and prints one
    deprecation line when used.  A ``type=float`` or ``type=int`` flag gets :func:`number`
    (finite; at least ``low=``, default 0), so no command takes nan, inf or a meaningless
    negative number.  ``environment=True``: every flag may also come from ``RKSPEECH_<FLAG>`` /
    ``RKSPEECH_<FLAG>_FILE`` (:mod:`rkspeech.cli.environment`; ``cli.main`` applies them, the
    command line first).
    """

    def __init__(self, parser: argparse.ArgumentParser, command: str, *, environment: bool = False):
        self.parser = parser
        self.command = command
        self.aliases = ALIASES.get(command, {})
        self._groups: dict[str, object] = {}
        self._outputs: list[tuple[str, str, str]] = []
        self.environment = None
        if environment:
            from rkspeech.cli.environment import ENVIRONMENT, Environment

            self.environment = Environment(command)
            parser.set_defaults(**{ENVIRONMENT: self.environment})

    def group(self, title: str | None):
        if title is None:
            return self.parser
        if title not in self._groups:
            self._groups[title] = self.parser.add_argument_group(title)
        return self._groups[title]

    def add(self, group: str | None, *flags: str, low: float | None = 0, writes: str | None | bool = False,
            **kwargs) -> argparse.Action:
        """``writes``: what the flag's value names when the command writes it, ``"file"`` or
        ``"folder"`` (None: it names no output); every flag of the OUTPUT group that takes a
        value must say, so no output escapes the check before the work (``cli.outputs``)."""
        if kwargs.get("type") in (float, int):
            kwargs["type"] = number(kwargs["type"], low)
        action = self.group(group).add_argument(*flags, **kwargs)
        if writes is False and group == OUTPUT and action.nargs != 0:
            raise ValueError(f"{self.command}: output flag {flags[0]} must say writes='file', 'folder' or None")
        if writes:
            if writes not in OUTPUT_KINDS:
                raise ValueError(f"{self.command}: {flags[0]}: writes={writes!r}, expected one of {OUTPUT_KINDS}")
            action.writes = writes
            self._outputs.append((action.dest, writes, max(flags, key=len)))
            self.parser.set_defaults(**{OUTPUTS_DEST: tuple(self._outputs)})
        olds = [old for old, new in self.aliases.items() if new in flags]
        if olds:
            new = max(flags, key=len)  # the long spelling names it in the deprecation line
            action.__class__ = _renamed(type(action))
            action.renamed = {old: new for old in olds}
            table = self.parser._option_string_actions  # argparse's option string -> action map
            for old in olds:
                if old in table:
                    raise ValueError(f"{self.command}: old spelling {old} is also a flag of its own")
                table[old] = action
        if self.environment is not None:
            from rkspeech.cli.environment import tracked

            action.__class__ = tracked(type(action))  # given on the command line: beats the environment
            self.environment.add(action)
        return action

    def cpu_affinity(self, group: str | None) -> argparse.Action:
        """``--cpu-affinity big|all|LIST``: the cores the process (its CPU-stage threads) runs on;
        a string here, resolved when the command runs (``core.cpus.apply_affinity``)."""
        from rkspeech.core.cpus import DEFAULT_AFFINITY

        return self.add(group, "--cpu-affinity", default=DEFAULT_AFFINITY, metavar="big|all|LIST",
                        help="CPU cores for the CPU stages' threads: big (default; the big cores, e.g. RK3588's "
                             "A76 cpus 4-7, where the cores differ; nothing changes where they are alike), all "
                             "(leave the scheduler free), or a list such as 4-7 or 4,5")

    def threads(self, group: str | None, what: str) -> argparse.Action:
        """``--threads N``: one meaning, one default (``THREADS_DEFAULTS`` lists the exceptions)."""
        spelling = "--asr-threads" if self.command == "serve" else "--threads"
        # low=None: each command says its own bound in one line (0 = the libraries' default in some)
        return self.add(group, spelling, type=int, low=None, default=threads_default(self.command),
                        metavar="N", help=threads_help(self.command, what))
