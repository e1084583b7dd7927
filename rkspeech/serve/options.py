"""Typed settings of ``rkspeech serve`` (the CLI builds them; library code takes them)."""

from __future__ import annotations

import math
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
    #: connections open at once, split evenly between the front ends served (they share the
    #: descriptors; lowered to stay ``limits.FD_RESERVE`` below RLIMIT_NOFILE); one more than a
    #: front end's share is answered and closed at once
    max_connections: int = 256
    #: HTTP: a request head must arrive within this of connecting or of the last response
    header_timeout_s: float = 10.0
    #: HTTP: a request body must arrive within this of its head (25 MB in 60 s is 3.5 Mbit/s)
    body_timeout_s: float = 60.0
    #: HTTP: a kept-alive connection with no new request for this long is closed (uvicorn's 5 s)
    keep_alive_timeout_s: float = 5.0
    #: client data held at once -- bodies being read, buffered Wyoming audio, streamed text;
    #: past it new work is refused with 503 / Wyoming ``over-budget`` (256 MB: ten uploads at
    #: the 25 MB limit; the models of an 8 GB board leave room for it)
    memory_budget_bytes: int = 256 * 1024 * 1024
    # transcription defaults: those of ``rkspeech transcribe`` (see serve.transcription)
    asr_beam_size: int = 5
    asr_language: str | None = None
    asr_vad: bool = False
    #: Wyoming: transcript chunks while the audio arrives, for an engine that makes them (Qwen3-ASR:
    #: ``runtime.qwen3_asr.partials``), only when an engine is free; off by default: a step running
    #: when the audio ends delays the final transcript on a one-engine server by up to one step
    asr_partials: bool = False
    #: one phrase per line, given to faster-whisper as ``hotwords`` (serve.biasing; re-read when changed)
    hotwords_file: str | None = None
    model_name: str = "whisper"
    speech_model_name: str = "speech"
    #: announce the Wyoming listener by zeroconf under this name (serve.discovery); None: not announced
    zeroconf: str | None = None

    def __post_init__(self):
        for name, low in (("max_queue", 0), ("request_timeout_s", 0.001), ("retry_after_s", 0),
                          ("max_upload_bytes", 1), ("max_audio_s", 0.001), ("max_text_chars", 1),
                          ("shutdown_grace_s", 0), ("asr_beam_size", 1), ("idle_timeout_s", 0.001),
                          ("max_connections", 1), ("header_timeout_s", 0.001), ("body_timeout_s", 0.001),
                          ("keep_alive_timeout_s", 0.001), ("memory_budget_bytes", 1)):
            value = getattr(self, name)
            # nan passes every comparison (a nan time limit once made every request a 504)
            if not (math.isfinite(value) and value >= low):
                raise RkspeechError(f"{name} must be a finite number >= {low}, got {value}")
        if self.api_key is not None and not self.api_key.strip():
            raise RkspeechError("--api-key is empty: give a key, or leave the flag out to serve without one")
        if self.wyoming is not None and not self.wyoming.startswith(("tcp://", "unix://")):
            raise RkspeechError(f"--wyoming {self.wyoming!r}: use tcp://HOST:PORT or unix://PATH")
        if self.http is not None:
            split_host_port(self.http, flag="--http")
        if self.zeroconf is not None and not (self.wyoming or "").startswith("tcp://"):
            raise RkspeechError(f"--zeroconf announces a tcp:// Wyoming listener; --wyoming is {self.wyoming or 'off'}")


def split_host_port(value: str, *, flag: str) -> tuple[str, int]:
    """``"127.0.0.1:8000"`` -> ("127.0.0.1", 8000); ``"[::1]:8000"`` for IPv6."""
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise RkspeechError(f"{flag} {value!r}: use HOST:PORT, e.g. 127.0.0.1:8000")
    return host.strip("[]"), int(port)
