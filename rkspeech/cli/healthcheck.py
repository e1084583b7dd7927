"""``rkspeech healthcheck [URI]``: exit 0 when a Wyoming server answers ``describe`` with the
programs expected, 1 when it does not (within ``--timeout``), 2 for a usage error.

For container ``HEALTHCHECK`` lines, systemd ``ExecStartPost=`` (with ``--wait``: the unit is
active once it serves) and watchdog timers (docs/serve.md).  The URI defaults to
``$RKSPEECH_WYOMING`` -- the variable ``rkspeech serve`` reads for ``--wyoming`` -- and the
programs expected to those serve's env file configures (``RKSPEECH_ASR_MODEL_DIR``: asr,
``RKSPEECH_TTS_MODEL_DIR``: tts), so one env file configures both commands; a wildcard host
(``0.0.0.0``) is reached on loopback.
"""

from __future__ import annotations

import argparse

from rkspeech.cli.environment import variable
from rkspeech.cli.vocabulary import Flags

#: serve's --wyoming default and variable (one env file for both commands)
DEFAULT_URI = "tcp://127.0.0.1:10300"
WYOMING_ENV = variable("--wyoming")
#: program kind -> the serve flag whose variable (or its _FILE twin) says it is served
SERVED_BY = {"asr": variable("--asr-model-dir"), "tts": variable("--tts-model-dir")}


def register(subparsers) -> None:
    p = subparsers.add_parser("healthcheck", help="exit 0 if a Wyoming server answers describe with the expected programs")
    f = Flags(p, "healthcheck")
    f.add(None, "uri", nargs="?", default=None, metavar="URI",
          help=f"tcp://HOST:PORT or unix://PATH (default ${WYOMING_ENV} if set, else {DEFAULT_URI})")
    f.add(None, "--expect", nargs="+", choices=("asr", "tts"), default=(),
          help=f"program kinds the server must offer (default: those serve's environment configures: "
               f"${SERVED_BY['asr']} asr, ${SERVED_BY['tts']} tts; neither set: asr or tts, at least one)")
    f.add(None, "--timeout", type=float, default=5.0, metavar="S",
          help="the whole describe -> info round trip must end within S seconds (default 5)")
    f.add(None, "--wait", type=float, default=0.0, metavar="S",
          help="retry every 0.5 s until healthy or S seconds have passed (a server still loading "
               "its models; default 0: one try)")
    f.add(None, "-q", "--quiet", action="store_true", help="print nothing when healthy")
    p.set_defaults(func=run)


def resolve_uri(uri, environ=None) -> str:
    """The URI given, else serve's ``$RKSPEECH_WYOMING``, else the default; a wildcard host is
    reached on loopback."""
    import os

    environ = os.environ if environ is None else environ
    uri = uri or environ.get(WYOMING_ENV) or DEFAULT_URI
    for wildcard, local in (("//0.0.0.0:", "//127.0.0.1:"), ("//[::]:", "//[::1]:")):
        uri = uri.replace(wildcard, local, 1)
    return uri


def expected(expect, environ=None) -> tuple:
    """``--expect`` as given, else the kinds serve's variables configure (empty: at least one)."""
    import os

    from rkspeech.cli.environment import FILE_SUFFIX

    environ = os.environ if environ is None else environ
    if expect:
        return tuple(expect)
    return tuple(kind for kind, name in SERVED_BY.items() if environ.get(name) or environ.get(name + FILE_SUFFIX))


def run(args: argparse.Namespace) -> int:
    import asyncio
    import sys
    import time

    from rkspeech.core.errors import RkspeechError
    from rkspeech.serve.health import Unhealthy, check

    uri = resolve_uri(args.uri)
    if args.timeout <= 0:
        raise RkspeechError(f"--timeout must be > 0, got {args.timeout}")
    end = time.monotonic() + args.wait
    while True:
        try:
            line = asyncio.run(check(uri, expect=expected(args.expect), timeout_s=args.timeout))
        except Unhealthy as exc:
            if time.monotonic() + 0.5 < end:
                time.sleep(0.5)
                continue
            print(f"rkspeech healthcheck: unhealthy: {exc}", file=sys.stderr)
            return 1
        if not args.quiet:
            print(f"rkspeech healthcheck: healthy: {line}")
        return 0
