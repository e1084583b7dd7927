"""The errors the server answers with: each carries its HTTP ``status`` and Wyoming ``code``."""

from __future__ import annotations

from rkspeech.core.errors import RkspeechError


class ServeError(RkspeechError):
    """A request the server answers with an error (``status`` for HTTP, ``code`` for Wyoming)."""

    status = 400
    code = "bad-request"


class Busy(ServeError):
    status = 503
    code = "busy"

    def __init__(self, kind: str, retry_after_s: int):
        super().__init__(f"all {kind} engines are busy and {kind} requests are already waiting; retry later")
        self.retry_after_s = retry_after_s


class ShuttingDown(ServeError):
    status = 503
    code = "shutting-down"

    def __init__(self):
        super().__init__("the server is shutting down")


class TimedOut(ServeError):
    status = 504
    code = "timeout"

    def __init__(self, limit_s: float):
        super().__init__(f"the request took longer than the server's limit of {limit_s:g} s")


class Unavailable(ServeError):
    status = 404
    code = "not-available"


class BadAudio(ServeError):
    status = 400
    code = "bad-audio"


class TooLong(ServeError):
    status = 413
    code = "too-long"


class RequestTimeout(ServeError):
    status = 408
    code = "request-timeout"


class TooLarge(ServeError):
    status = 413
    code = "too-large"


class ClientGone(ServeError):
    """The client closed the connection: nothing to answer (its work is dropped or stopped)."""

    status = 499
    code = "client-gone"

    def __init__(self):
        super().__init__("the client closed the connection")
