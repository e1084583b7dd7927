"""The OpenAI-compatible HTTP front end (Starlette app, served by uvicorn).

* ``POST /v1/audio/transcriptions`` -- multipart: ``file`` (any format PyAV decodes), ``model``
  (accepted, not used: the server has one), ``language``, ``prompt``, ``response_format``
  (json | text | srt | vtt | verbose_json), ``timestamp_granularities[]`` (segment | word; word
  turns on faster-whisper's word timestamps and adds ``words`` to verbose_json).  ``temperature``
  is accepted and ignored (faster-whisper's fallback schedule, as ``rkspeech transcribe``).
  verbose_json's ``language`` is Whisper's code ("en"; OpenAI's service writes "english").
  ``stream=true`` (json / text): server-sent ``transcript.text.delta`` events, one per decoded
  segment, then ``transcript.text.done`` (:mod:`rkspeech.serve.transcript_stream`); ``hotwords``
  (repeatable) biases the decoder (:mod:`rkspeech.serve.biasing`).
* ``POST /v1/audio/speech`` -- JSON: ``input``, ``voice`` (a speaker of the engine, or
  "default"), ``response_format`` (mp3, the default, | opus | aac | flac | wav | pcm; encoded by
  :mod:`rkspeech.serve.speech_formats`), ``speed`` (0.25-4.0, FFmpeg's atempo: pitch kept),
  ``stream_format`` (audio | sse), ``instructions``; the body is streamed as the engine decodes.
* ``GET /v1/models`` (each model with what it serves: voices, languages, formats),
  ``GET /health`` (no key needed), ``GET /metrics`` (Prometheus text).

Safety: with ``api_key`` every route but ``/health`` wants ``Authorization: Bearer KEY``
(compared in constant time).  An upload is read into memory up to ``max_upload_bytes`` (413
beyond, also when ``Content-Length`` says so up front) and parsed there: Starlette's multipart
parser spools a file to disk past 1 MB, so ours keeps it in memory up to that bound, and no
name or path from the request is used.  Errors are OpenAI-shaped JSON ``{"error": {"message",
"type", "code"}}`` with one-line messages; 503 answers carry ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time

from rkspeech.core.errors import RkspeechError
from rkspeech.serve.engines import SPEECH, TRANSCRIBE, ServePool
from rkspeech.serve.errors import Busy, ServeError
from rkspeech.serve.options import ServeOptions

log = logging.getLogger("rkspeech.serve")


class HttpError(ServeError):
    def __init__(self, status: int, message: str, code: str):
        super().__init__(message)
        self.status, self.code = status, code


def _error_response(exc: ServeError):
    from starlette.responses import JSONResponse

    kind = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
            408: "timeout", 413: "invalid_request_error", 503: "server_busy",
            504: "timeout"}.get(exc.status, "server_error")
    headers = {}
    if isinstance(exc, Busy) or exc.status == 503:
        headers["Retry-After"] = str(getattr(exc, "retry_after_s", 2))
    if exc.status in (408, 413) or exc.code == "over-budget":
        # the rest of the body is not wanted: close (a refusal before any reading, 503 busy, keeps
        # the connection: closing it under a client still sending its upload reset the
        # connection, and the client saw a connection error instead of the 503)
        headers["Connection"] = "close"
    return JSONResponse({"error": {"message": str(exc), "type": kind, "param": None, "code": exc.code}},
                        status_code=exc.status, headers=headers)


def build_app(pool: ServePool, options: ServeOptions, metrics=None, limits=None):
    """The Starlette application over ``pool``; ``limits`` (:class:`rkspeech.serve.limits.ServerLimits`)
    holds the memory budget request bodies count against."""
    from starlette.applications import Starlette
    from starlette.responses import (
        JSONResponse,
        PlainTextResponse,
        Response,
        StreamingResponse,
    )
    from starlette.routing import Route

    from rkspeech.models.whisper.window import SAMPLE_RATE
    from rkspeech.runtime.audio import AudioError, decode_audio
    from rkspeech.serve import biasing, transcription
    from rkspeech.serve.audio import bad_audio
    from rkspeech.serve.http_limits import read_body as read_limited
    from rkspeech.serve.http_limits import unless_gone, watch_gone
    from rkspeech.serve.limits import ServerLimits
    from rkspeech.serve.speech import SpeakRequest
    from rkspeech.serve.speech_formats import (
        SpeechEncoder,
        check_format,
        check_speed,
        check_stream_format,
        encoded_body,
    )
    from rkspeech.serve.transcript_stream import sse_body, transcript_events

    limits = limits or ServerLimits.from_options(options, metrics)

    class LeasedStream(StreamingResponse):
        """A streamed answer that holds its request's share of the memory budget (the decoded
        audio a transcript stream reads) until its body ends, and closes the body then: a body
        stopped by a disconnect stops its generation now, not when the generator is collected."""

        def __init__(self, content, lease, **kw):
            super().__init__(content, **kw)
            self.lease = lease

        async def __call__(self, scope, receive, send):
            try:
                await super().__call__(scope, receive, send)
            finally:
                await self.body_iterator.aclose()
                self.lease.close()

    def count(endpoint: str, status) -> None:
        if metrics is not None:
            metrics.count(endpoint, status)

    def peer(request):
        """The client a request counts for in the wait line (serve.lane): the peer's host."""
        return request.client.host if request.client else None

    def observe(result) -> None:
        if metrics is not None:
            metrics.observe_timing(result.timing)

    def authorize(request) -> None:
        if options.api_key is None:
            return
        given = request.headers.get("authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), options.api_key.encode()):
            raise HttpError(401, "missing or wrong API key (send Authorization: Bearer KEY)", "invalid-api-key")

    def endpoint(name: str):
        """Auth, error mapping and counting around a handler."""
        def wrap(handler):
            async def route(request):
                start = time.perf_counter()
                response = None
                request.state.lease = limits.budget.lease()
                try:
                    if name != "/health":
                        authorize(request)
                    response = await handler(request)
                except ServeError as exc:
                    response = _error_response(exc)
                except RkspeechError as exc:  # the engine refused the input (bad voice, language, ...)
                    response = _error_response(HttpError(400, str(exc), "bad-request"))
                except Exception as exc:
                    log.exception("%s failed", name)
                    response = _error_response(HttpError(500, f"internal error: {type(exc).__name__}", "internal"))
                finally:
                    if not isinstance(response, LeasedStream):  # a streamed body gives it back when it ends
                        request.state.lease.close()  # the body is parsed (speech) or transcribed by now
                count(name, response.status_code)
                if metrics is not None and name.startswith("/v1/"):
                    metrics.stage_seconds.labels("request").observe(time.perf_counter() - start)
                return response
            return route
        return wrap

    async def read_body(request, limit: int) -> bytes:
        return await read_limited(request, limit=limit, timeout_s=options.body_timeout_s, lease=request.state.lease)

    async def parse_form(request, body: bytes):
        from starlette.formparsers import MultiPartException, MultiPartParser

        class InMemory(MultiPartParser):
            spool_max_size = len(body) + 1  # never rolls over to a temporary file

        async def stream():
            yield body
            yield b""

        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise HttpError(400, "send the audio as multipart/form-data with a 'file' field", "bad-request")
        try:
            return await InMemory(request.headers, stream(), max_files=1, max_fields=32,
                                  max_part_size=64 * 1024).parse()
        except MultiPartException as exc:
            raise HttpError(400, f"malformed multipart body: {exc}", "bad-request") from None

    @endpoint("/v1/audio/transcriptions")
    async def transcriptions(request):
        pool.first_model(TRANSCRIBE)
        client = peer(request)
        pool.check_capacity(TRANSCRIBE, client)  # refuse before reading and decoding when already full
        deadline = pool.deadline()
        form = await parse_form(request, await read_body(request, options.max_upload_bytes))
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise HttpError(400, "no 'file' field with the audio", "bad-request")
        data = await upload.read()
        await upload.close()
        fmt = str(form.get("response_format") or "json")
        if fmt not in transcription.RESPONSE_FORMATS:
            raise HttpError(400, f"response_format {fmt!r} is not one of {', '.join(transcription.RESPONSE_FORMATS)}",
                            "bad-request")
        grains = form.getlist("timestamp_granularities[]") + form.getlist("timestamp_granularities")
        bad = [g for g in grains if g not in transcription.GRANULARITIES]
        if bad:
            raise HttpError(400, f"timestamp_granularities {bad[0]!r} is not one of segment, word", "bad-request")
        stream = str(form.get("stream") or "false").lower()
        if stream not in ("true", "false"):
            raise HttpError(400, f"stream {stream!r} is not true or false", "bad-request")
        if stream == "true" and fmt not in ("json", "text"):
            raise HttpError(400, f"stream=true answers with events; response_format {fmt!r} cannot be streamed "
                                 "(use json or text)", "bad-request")
        model = pool.first_model(TRANSCRIBE)
        req = transcription.check_request(model, transcription.TranscribeRequest(
            language=transcription.check_language(model, form.get("language") or options.asr_language),
            prompt=biasing.prompt(form.get("prompt")), word_timestamps="word" in grains,
            hotwords=biasing.hotwords(form.getlist("hotwords") or None, options.hotwords_file),
            beam_size=options.asr_beam_size, vad=options.asr_vad))
        start = time.perf_counter()
        try:
            # the samples are held until transcribed (float32: 3.7 MB a minute): they count as the
            # body did, taken block by block while decoding (a 1.3 MB FLAC can decode to 460 MB)
            audio = await asyncio.to_thread(decode_audio, data, sample_rate=SAMPLE_RATE, what="the uploaded file",
                                            max_seconds=options.max_audio_s, hold=request.state.lease)
        except AudioError as exc:
            raise bad_audio(exc) from None
        if metrics is not None:
            metrics.stage_seconds.labels("decode_audio").observe(time.perf_counter() - start)
        log.info("transcription: %s", req.logged())
        if stream == "true":
            # a client that leaves stops the decoding at the next segment, also before the first
            # event (silence has no partial text: the first event can be the last)
            gone = watch_gone(request)
            events = transcript_events(pool, audio, req, deadline=deadline, client=client, gone=gone.done)
            try:
                first = await unless_gone(request, anext(events), gone)  # errors before it get a status code
            except BaseException:
                gone.cancel()
                raise
            return LeasedStream(sse_body(events, first, on_done=observe), request.state.lease,
                                media_type="text/event-stream")
        # a client that leaves while its request waits for an engine is not transcribed
        result = await unless_gone(request, pool.run(TRANSCRIBE, transcription.run, audio, req, deadline=deadline,
                                                     client=client))
        observe(result)
        body, media = transcription.render(result, fmt, words="word" in grains)
        if media == "json":
            return JSONResponse(body)
        return PlainTextResponse(body, media_type=media)

    @endpoint("/v1/audio/speech")
    async def speech(request):
        engine = pool.first_model(SPEECH)
        client = peer(request)
        pool.check_capacity(SPEECH, client)
        body = await read_body(request, options.max_text_chars * 8 + 4096)
        try:
            spec = json.loads(body or b"{}")
        except (ValueError, RecursionError):
            raise HttpError(400, "the body is not JSON (or nested too deep)", "bad-request") from None
        if not isinstance(spec, dict):
            raise HttpError(400, "the body must be a JSON object", "bad-request")
        fmt, speed = check_format(spec.get("response_format")), check_speed(spec.get("speed", 1.0))
        sse = check_stream_format(spec.get("stream_format")) == "sse"
        voice = spec.get("voice")
        if isinstance(voice, dict):
            voice = voice.get("id") or voice.get("name")
        req = SpeakRequest.checked(engine, spec.get("input"), speaker=voice, language=spec.get("language"),
                                   instruct=spec.get("instructions") or None, max_chars=options.max_text_chars)
        began = time.perf_counter()
        chunks = pool.stream(SPEECH, req.open, client=client, budget=limits.budget).__aiter__()
        try:
            # errors before the first chunk get a status code; a client that leaves while its
            # request waits for the engine is not spoken for (it leaves the wait line)
            first = await unless_gone(request, chunks.__anext__())
        except StopAsyncIteration:
            first = None
        if metrics is not None:
            metrics.stage_seconds.labels("speech_first_chunk").observe(time.perf_counter() - began)

        encoder = SpeechEncoder(fmt, engine.sample_rate, speed)

        def done():
            if metrics is not None:
                metrics.stage_seconds.labels("speech_total").observe(time.perf_counter() - began)

        return LeasedStream(encoded_body(chunks, first, encoder, sse=sse, on_end=done), request.state.lease,
                            media_type="text/event-stream" if sse else encoder.media_type,
                            headers={"X-Sample-Rate": str(engine.sample_rate)})

    @endpoint("/health")
    async def health(request):
        status = "shutting-down" if pool.closing else "ok"
        return JSONResponse({"status": status, "engines": pool.status()}, status_code=503 if pool.closing else 200)

    @endpoint("/metrics")
    async def metrics_route(request):
        if metrics is None:
            raise HttpError(404, "metrics are off", "not-found")
        data, ctype = metrics.render()
        return Response(data, media_type=ctype)

    @endpoint("/v1/models")
    async def models(request):
        from rkspeech.serve.models_list import models_list

        return JSONResponse(models_list(pool, options))

    return Starlette(routes=[
        Route("/v1/audio/transcriptions", transcriptions, methods=["POST"]),
        Route("/v1/audio/speech", speech, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
    ])


class HttpServer:
    """uvicorn serving :func:`build_app` on ``host:port`` (port 0: a free one, see :attr:`address`),
    in the caller's event loop; signals are left to the caller."""

    def __init__(self, address: str, pool: ServePool, options: ServeOptions, metrics=None, limits=None):
        from rkspeech.serve.limits import ServerLimits
        from rkspeech.serve.options import split_host_port

        self.host, self.port = split_host_port(address, flag="--http")
        self.pool, self.options, self.metrics = pool, options, metrics
        self.limits = limits or ServerLimits.from_options(options, metrics)
        self._server = None
        self._task = None
        self.address: str | None = None

    async def start(self) -> None:
        import socket

        import uvicorn

        class _Server(uvicorn.Server):
            def capture_signals(self):  # the serve command owns the ending signals (core.child.ENDING_SIGNALS)
                import contextlib

                return contextlib.nullcontext()

        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.create_server((self.host, self.port), family=family, reuse_port=False)
        sock.setblocking(False)
        host, port = sock.getsockname()[:2]
        self.address = f"{'[' + host + ']' if ':' in host else host}:{port}"
        from rkspeech.serve.http_limits import protocol_class
        from rkspeech.serve.limits import ACCEPT_BATCH, deepen

        config = uvicorn.Config(build_app(self.pool, self.options, self.metrics, self.limits), log_level="warning",
                                lifespan="off", access_log=False,
                                http=protocol_class(self.limits.gate, self.options.header_timeout_s,
                                                   self.options.request_timeout_s),
                                timeout_keep_alive=self.options.keep_alive_timeout_s, backlog=ACCEPT_BATCH,
                                timeout_graceful_shutdown=max(1, int(self.options.shutdown_grace_s)))
        self._server = _Server(config)
        self._task = asyncio.create_task(self._server.serve(sockets=[sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the startup error
                raise RuntimeError("the HTTP server stopped during startup")
            await asyncio.sleep(0.01)
        deepen(sock)  # uvicorn listened with the accept batch; the queue itself is longer

    async def stop(self) -> None:
        """Stop accepting; uvicorn lets running responses finish (up to the grace time)."""
        if self._server is not None:
            self._server.should_exit = True
            await self._task
