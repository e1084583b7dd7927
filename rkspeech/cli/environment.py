"""A command's flags from the environment: ``RKSPEECH_<FLAG>`` and ``RKSPEECH_<FLAG>_FILE``.

Containers and systemd units configure a server through the environment (``WYO_WHISPER_*`` in the
Home Assistant add-ons; ``Environment=`` / ``EnvironmentFile=``), and a secret is best handed over
as a file (``/run/secrets/...``, systemd ``LoadCredential=``): it then shows in neither ``ps`` nor
``systemctl show``.  So a command that opts in (``vocabulary.Flags(..., environment=True)``) takes
every flag from a variable whose name is derived here, once, from the flag's spelling:
``--max-connections`` -> ``RKSPEECH_MAX_CONNECTIONS`` (from the spelling; a flag's ``dest`` is
its spelling too, ``--asr-model-dir`` stores ``asr_model_dir``), and from ``<that>_FILE``, the name
of a file holding the value.

Precedence: the command line, then the environment, then the flag's default.  A flag counts as
given on the command line when argparse called its action (:func:`tracked`), so ``--max-queue 8``
beats ``RKSPEECH_MAX_QUEUE=4`` although 8 is the default.  An empty variable counts as unset
(``RKSPEECH_API_KEY=`` in an env file meant "no key" before this module).  A value is converted
and checked by the flag's own ``type`` and ``choices``, so a bad one gets the flag's words, naming
the variable: ``RKSPEECH_MAX_CONNECTIONS: 'abc' is not an integer``.  Switches (``--asr-vad``) take
1/true/yes/on or 0/false/no/off; a flag whose value is optional (``--zeroconf [NAME]``) takes
those words too (on: the flag alone, its default NAME; off: not given), any other value is its
value; flags of several values (``--asr-core-mask``) take them separated by spaces.

Standard library only: CLI modules import it at load time.
"""

from __future__ import annotations

import argparse
import os

from rkspeech.core.errors import RkspeechError

PREFIX = "RKSPEECH_"
FILE_SUFFIX = "_FILE"
#: the namespace attribute that lists the dests given on the command line
GIVEN = "_flags_given"
#: the namespace attribute that holds a command's :class:`Environment` (``cli.main`` applies it)
ENVIRONMENT = "_environment"
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def variable(spelling: str) -> str:
    """``--max-connections`` -> ``RKSPEECH_MAX_CONNECTIONS``."""
    return PREFIX + spelling.lstrip("-").upper().replace("-", "_")


def spelling(action: argparse.Action) -> str:
    """A flag's one spelling (the longest option string: ``--api-key``, not an old alias)."""
    return max(action.option_strings, key=len)


def tracked(cls: type) -> type:
    """``cls`` (an argparse Action class) that records its dest in ``namespace._flags_given``
    when argparse calls it, i.e. when the flag is on the command line."""

    class Given(cls):
        def __call__(self, parser, namespace, values, option_string=None):
            setattr(namespace, GIVEN, set(getattr(namespace, GIVEN, ())) | {self.dest})
            super().__call__(parser, namespace, values, option_string)

    Given.__name__ = f"Given{cls.__name__}"
    return Given


class Environment:
    """The flags of one command that the environment may set (``add``), applied to a parsed
    namespace by :meth:`apply`; :attr:`sources` then says which dest came from which variable."""

    def __init__(self, command: str):
        self.command = command
        self.actions: list[argparse.Action] = []

    def add(self, action: argparse.Action) -> None:
        if action.option_strings:
            self.actions.append(action)

    def variables(self) -> list[str]:
        return [variable(spelling(a)) for a in self.actions]

    def apply(self, args: argparse.Namespace, environ=None) -> dict[str, str]:
        """Set every flag not given on the command line from its variable, when set; returns
        {flag spelling: the variable it came from} (also kept as ``args._flags_from``)."""
        environ = os.environ if environ is None else environ
        given = getattr(args, GIVEN, set())
        sources = {}
        for action in self.actions:
            name = variable(spelling(action))
            raw, source = _read(name, environ)
            if raw is None or action.dest in given:
                continue
            setattr(args, action.dest, _convert(action, raw, source))
            sources[spelling(action)] = source
        args._flags_from = sources
        return sources

    def help(self) -> str:
        """The ``--help`` epilog that says all of this in three lines."""
        example = self.actions[0] if self.actions else None
        eg = f" (e.g. {spelling(example)}: {variable(spelling(example))})" if example else ""
        return (f"Every flag can also be set by the environment: {PREFIX} + the flag's name in capitals, "
                f"'-' as '_'{eg}, or read from the file named by that variable + {FILE_SUFFIX} (secrets). "
                "The command line wins over the environment, the environment over the defaults; "
                "an empty variable is unset.")


def explain(message: str, args: argparse.Namespace) -> str:
    """``message`` (an RkspeechError's) naming the variable behind a flag it names, for a value
    checked after parsing (``--http 'localhost': use HOST:PORT`` when ``RKSPEECH_HTTP`` said so)."""
    for flag, source in getattr(args, "_flags_from", {}).items():
        if f"{flag} " in message or message.endswith(flag):
            return f"{message} ({flag} was set by {source})"
    return message


def _read(name: str, environ) -> tuple[str | None, str]:
    """(the value, the variable it came from); (None, name) when neither is set."""
    value, path = environ.get(name) or None, environ.get(name + FILE_SUFFIX) or None
    if value is not None and path is not None:
        raise RkspeechError(f"both {name} and {name}{FILE_SUFFIX} are set: keep one")
    if path is None:
        return value, name
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read().strip()  # the newline an editor or `echo` leaves is not part of a key or path
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise RkspeechError(f"{name}{FILE_SUFFIX}={path}: cannot read it ({why})") from None
    return (text or None), f"{name}{FILE_SUFFIX}"


def _convert(action: argparse.Action, raw: str, source: str):
    """``raw`` as the flag would have parsed it; RkspeechError with argparse's words otherwise."""
    if action.nargs == 0:  # a switch
        word = raw.strip().lower()
        if word in TRUE:
            return action.const
        if word in FALSE:
            return action.default
        raise RkspeechError(f"{source}: {raw!r} is not one of {'/'.join(TRUE)} or {'/'.join(FALSE)}")
    if action.nargs == "?" and raw.strip().lower() in TRUE + FALSE:  # the flag alone, or not given
        return action.const if raw.strip().lower() in TRUE else action.default
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        return [_one(action, part, source) for part in raw.split()]
    return _one(action, raw, source)


def _one(action: argparse.Action, raw: str, source: str):
    value = raw
    if action.type is not None:
        try:
            value = action.type(raw)
        except argparse.ArgumentTypeError as exc:
            raise RkspeechError(f"{source}: {exc}") from None
        except (TypeError, ValueError):
            name = getattr(action.type, "__name__", repr(action.type))
            raise RkspeechError(f"{source}: invalid {name} value: {raw!r}") from None
    if action.choices is not None and value not in action.choices:
        choices = ", ".join(map(repr, action.choices))
        raise RkspeechError(f"{source}: invalid choice: {value!r} (choose from {choices})")
    return value

