"""Typed settings of ``rkspeech serve`` (the CLI builds them; library code takes them)."""

from __future__ import annotations

from dataclasses import dataclass

from rkspeech.core.errors import RkspeechError

#: Whisper's input rate: everything the server transcribes is resampled to it.
from rkspeech.models.whisper.window import SAMPLE_RATE  # noqa: F401 - re-exported for front ends


@dataclass(frozen=True)
class ServeOptions:
    """Addresses, limits and transcription defaults.

    Defaults are safe: loopback only, 25 MB uploads (the OpenAI API's limit), 10 minutes of audio,
    4096 characters of text (the OpenAI speech limit), at most 8 requests waiting per engine kind.
    ``wyoming`` is a ``tcp://host:port`` URI, ``http`` a ``host:port``; either may be None (that
    front end is off); port 0 picks a free port (tests).
    """

    wyoming: str | None = "tcp://127.0.0.1:10300"
    http: str | None = "127.0.0.1:8000"
    api_key: str | None = None
    max_queue: int = 8
    request_timeout_s: float = 300.0
    retry_after_s: int = 2
    max_upload_bytes: int = 25 * 1024 * 1024
    max_audio_s: float = 600.0
    max_text_chars: int = 4096
    shutdown_grace_s: float = 30.0
    #: a Wyoming connection with no event for this long is closed (an idle client holds a
    #: descriptor; 1,100 idle ones once exhausted a systemd unit's 1024 and took both front ends down)
    idle_timeout_s: float = 300.0
    #: Wyoming connections open at once; one more is closed at once, before it costs anything
    max_connections: int = 256
    # transcription defaults: those of ``rkspeech transcribe`` (see serve.transcription)
    beam_size: int = 5
    language: str | None = None
    vad: bool = False
    #: one phrase per line, given to faster-whisper as ``hotwords`` (serve.biasing; re-read when changed)
    hotwords_file: str | None = None
    model_name: str = "whisper"
    speech_model_name: str = "speech"

    def __post_init__(self):
        for name, low in (("max_queue", 0), ("request_timeout_s", 0.001), ("retry_after_s", 0),
                          ("max_upload_bytes", 1), ("max_audio_s", 0.001), ("max_text_chars", 1),
                          ("shutdown_grace_s", 0), ("beam_size", 1), ("idle_timeout_s", 0.001),
                          ("max_connections", 1)):
            if getattr(self, name) < low:
                raise RkspeechError(f"{name} must be >= {low}, got {getattr(self, name)}")
        if self.wyoming is not None and not self.wyoming.startswith(("tcp://", "unix://")):
            raise RkspeechError(f"--wyoming {self.wyoming!r}: use tcp://HOST:PORT or unix://PATH")
        if self.http is not None:
            split_host_port(self.http, flag="--http")


def split_host_port(value: str, *, flag: str) -> tuple[str, int]:
    """``"127.0.0.1:8000"`` -> ("127.0.0.1", 8000); ``"[::1]:8000"`` for IPv6."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise RkspeechError(f"{flag} {value!r}: use HOST:PORT, e.g. 127.0.0.1:8000")
    return host.strip("[]"), int(port)
