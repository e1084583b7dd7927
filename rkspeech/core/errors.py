"""The one exception type for errors a user can cause or fix.

The CLI prints ``RkspeechError`` messages on one line and exits non-zero, without a traceback.
Anything else that escapes is a bug in rkspeech and keeps its traceback.
"""


class RkspeechError(Exception):
    """A user-facing error: the message says what went wrong and what to do."""


class MissingPackage(RkspeechError):
    """An optional package a command needs is not installed here (e.g. the board runtime on a
    host): callers that have another way may offer it."""
