"""Prometheus metrics of one server (its own registry, so several servers in one process -- tests --
do not collide).

* ``rkspeech_requests_total{endpoint, status}``: requests answered, by endpoint (``http
  /v1/audio/transcriptions``, ``wyoming transcribe``, ...) and status (HTTP code; Wyoming:
  ``ok`` or the error code).
* ``rkspeech_queue_depth{kind}``: requests waiting for an engine; ``rkspeech_engines_busy{kind}``.
* ``rkspeech_stage_seconds{stage}``: latency per stage -- ``transcribe_queue`` / ``speech_queue``
  (waiting for an engine), ``decode_audio``, ``encoder``, ``decoder``, ``host`` (faster-whisper's
  own work), ``transcribe_total``, ``speech_first_chunk``, ``speech_total``, ``request`` (end to
  end).
* ``rkspeech_engine_busy_seconds_total{kind, engine}``: time each engine spent in model calls.
* ``rkspeech_speech_batch_streams``: speech streams generating in the running batch now
  (``runtime.tts.batch``; 0 or 1 when the engine generates one at a time).

Label values come only from the server's own lists, never from what a client sends
(:meth:`Metrics.count`): a Wyoming event type once became an endpoint label, so 300 made-up
types of 100 KB grew the process by 54 MB and /metrics to 64 MB (1.75 s a scrape), and one type
that is not valid UTF-8 (``"\\ud800"``) made every later scrape a 500.  An endpoint not in
:data:`ENDPOINTS` is counted as :data:`OTHER`, a status that is not a short ASCII token likewise.
"""

from __future__ import annotations

import re

#: the Wyoming events the server answers (``wyoming_server.WyomingHandler.handle``), and the
#: answer to a streamed synthesis as a whole
WYOMING_EVENTS = ("describe", "transcribe", "audio-start", "audio-chunk", "audio-stop", "synthesize",
                  "synthesize-start", "synthesize-chunk", "synthesize-stop", "synthesize-stream")
#: the HTTP routes (``http_server.build_app``); a path not routed is answered 404 and not counted
HTTP_ROUTES = ("/v1/audio/transcriptions", "/v1/audio/speech", "/v1/models", "/health", "/metrics")
#: every ``endpoint`` label value but :data:`OTHER`
ENDPOINTS = frozenset((*HTTP_ROUTES, "wyoming", "http connect", "wyoming connect",
                       *(f"wyoming {e}" for e in WYOMING_EVENTS)))
#: the one label value of everything not in the server's lists
OTHER = "other"
#: a status label: an HTTP status or a server error code (``errors.ServeError.code``)
_STATUS = re.compile(r"[a-z0-9_-]{1,40}\Z")

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    def __init__(self):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.requests = Counter("rkspeech_requests", "Requests answered", ["endpoint", "status"],
                                registry=self.registry)
        self.queue_depth = Gauge("rkspeech_queue_depth", "Requests waiting for an engine", ["kind"],
                                 registry=self.registry)
        self.engines_busy = Gauge("rkspeech_engines_busy", "Engines running a request", ["kind"],
                                  registry=self.registry)
        self.stage_seconds = Histogram("rkspeech_stage_seconds", "Latency per stage", ["stage"],
                                       buckets=BUCKETS, registry=self.registry)
        self.speech_batch = Gauge("rkspeech_speech_batch_streams", "Speech streams generating in the running batch",
                                  registry=self.registry)
        self.engine_busy = Counter("rkspeech_engine_busy_seconds", "Seconds each engine spent in model calls",
                                   ["kind", "engine"], registry=self.registry)

    def watch_batch(self, speaker) -> None:
        """``rkspeech_speech_batch_streams`` read from ``speaker``'s batch at each scrape."""
        batch = getattr(speaker, "batch", None)
        if batch is not None:
            self.speech_batch.set_function(lambda: batch.active)

    def count(self, endpoint: str, status) -> None:
        """One request answered; ``endpoint`` / ``status`` outside the server's lists count as :data:`OTHER`."""
        status = str(status)
        self.requests.labels(endpoint if endpoint in ENDPOINTS else OTHER,
                             status if _STATUS.match(status) else OTHER).inc()

    def observe_timing(self, timing: dict) -> None:
        """A transcription's time split (``Transcription.timing``) into the stage histogram."""
        for key, stage in (("encoder_s", "encoder"), ("decoder_s", "decoder"), ("host_s", "host"),
                           ("total_s", "transcribe_total")):
            if key in timing:
                self.stage_seconds.labels(stage).observe(max(0.0, timing[key]))

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST
