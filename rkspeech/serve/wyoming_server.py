"""The Wyoming front end (Home Assistant's voice pipeline; PyPI ``wyoming``).

Per connection (:class:`WyomingHandler`):

* ``describe`` -> ``info``: an ASR program with one model (its languages) when transcription is
  served, a TTS program with one voice per speaker (the engine's languages as ISO 639-1 codes,
  which Home Assistant matches: ``language_codes``; streaming synthesis supported) when speech
  is; built anew for every ``describe`` (Home Assistant re-lists voices with one), so an
  engine's changed speakers show.
* Speech to text: ``transcribe`` (optional: language; ``transcript_names`` / ``transcript_terms``
  become faster-whisper hotwords), ``audio-start``, ``audio-chunk``..., ``audio-stop`` ->
  ``transcript-start``, ``transcript-chunk`` per decoded segment, ``transcript-stop`` (streaming,
  advertised as ``supports_transcript_streaming``), then ``transcript`` (text stripped, language)
  for every client.  With ``--asr-partials`` and an engine that makes partial transcripts
  (Qwen3-ASR), chunks start while the audio still arrives (``serve.wyoming_partials``).  Chunks of any rate, width and
  channel count are converted to 16 kHz 16-bit mono with ``AudioChunkConverter``; audio longer
  than ``max_audio_s`` is refused when the limit is crossed.
* Text to speech: ``synthesize`` -> ``audio-start``, ``audio-chunk`` per decoded chunk (sent as
  the engine yields it), ``audio-stop``.  A request that names no voice (Home Assistant with no
  voice picked; wyoming-bench) gets the engine's first voice, as wyoming-piper speaks its default
  voice: a custom-voice model cannot speak without one.  The streaming form ``synthesize-start``,
  ``synthesize-chunk``... (text split anywhere, inside words too), ``synthesize-stop``
  synthesizes each sentence as soon as its end arrives, each as its own ``audio-start`` ..
  ``audio-stop`` (wyoming-piper's framing: a client learns the sentence ends; Home Assistant
  reads every chunk up to ``synthesize-stopped`` either way), then the text after the last
  sentence end at ``synthesize-stop``, then ``synthesize-stopped``; a stream of no text gets
  ``synthesize-stopped`` alone.  A plain ``synthesize`` sent alongside a streaming request
  (Home Assistant sends both) is ignored, as wyoming-piper does.  A refused sentence (a bad
  voice, the text limit) is one ``error``; the rest of that stream is dropped and
  ``synthesize-stop`` still gets ``synthesize-stopped``, so a client waiting for it is not left
  hanging.
* Anything wrong -- a line that is not JSON, an unknown event type, events out of order, a full
  queue, a time limit -- is answered with an ``error`` event (text, code) on that connection,
  which stays open; other connections are not affected.  A line longer than the reader's limit
  or a header whose data/payload cannot be read loses the framing: error, then the connection
  is closed.

The events are read by :mod:`rkspeech.serve.wyoming_events` (a malformed line is answered, not a
silent disconnect); ``info`` is built by :mod:`rkspeech.serve.wyoming_info`; the listener that
starts a handler per connection is :mod:`rkspeech.serve.wyoming_listener`.
"""

from __future__ import annotations

import asyncio
import logging
import time

from rkspeech.core.errors import RkspeechError
from rkspeech.serve.audio import pcm16_to_float
from rkspeech.serve.engines import SPEECH, TRANSCRIBE, ServePool
from rkspeech.serve.errors import ClientGone, ServeError
from rkspeech.serve.limits import ServerLimits, abort
from rkspeech.serve.options import SAMPLE_RATE, ServeOptions
from rkspeech.core.sentences import SentenceSplitter
from rkspeech.serve.wyoming_events import Framing, check_audio_format, read_event

#: Output chunk size for speech (samples): engines may yield longer chunks; Wyoming clients
#: expect a steady stream of small ones.
CHUNK_SAMPLES = 2048
log = logging.getLogger("rkspeech.serve")


class WyomingHandler:
    def __init__(self, reader, writer, pool: ServePool, options: ServeOptions, metrics, describe,
                 limits: ServerLimits | None = None):
        self.reader, self.writer = reader, writer
        self.pool, self.options, self.metrics = pool, options, metrics
        self.describe = describe  # () -> the info event, built per describe (wyoming_info.info_event)
        limits = limits or ServerLimits.from_options(options, metrics)
        # buffered audio and streamed text count against the server's memory budget
        self._audio_lease, self._text_lease = limits.budget.lease(), limits.budget.lease()
        self._budget = limits.budget  # speech generated ahead of this client counts too
        self._language = None
        self._bias: list = []  # transcribe's transcript_names + transcript_terms (hotwords)
        self._converter = None
        self._audio: list = []
        self._audio_bytes = 0
        self._too_long = False
        self._partials = None  # a PartialFeed while audio arrives, with --asr-partials
        # while synthesize-start .. synthesize-stop: {"voice", "text" (a SentenceSplitter), "failed"}
        self._streaming = None
        peer = writer.get_extra_info("peername")
        #: who this connection counts as in the wait line (serve.lane): the peer's host
        self.client = peer[0] if isinstance(peer, tuple) and peer else "local"
        self.busy = False  # inside handle(): shutdown waits for it; idle connections are closed

    async def write(self, event, deadline: float | None = None) -> None:
        """Write one event; a client that has not taken it within the request time limit -- or,
        for the events of an answer, by its request's ``deadline`` (``--request-timeout`` bounds
        the whole request, the writing of its answer included) -- is dropped (ConnectionError),
        so a reader that stopped, or reads too slowly to take the answer in time, cannot hold a
        connection, its audio or an engine.  A write that needs no wait goes out even past the
        deadline: it gets one step (``asyncio.wait_for`` with no time left would not start it;
        ``asyncio.timeout`` is Python 3.11+)."""
        from wyoming.event import async_write_event

        left = self.options.request_timeout_s
        if deadline is not None:
            left = min(left, deadline - time.monotonic())
        task = asyncio.ensure_future(async_write_event(event, self.writer))
        try:
            done, _ = await asyncio.wait({task}, timeout=max(0.0, left))
        except BaseException:
            task.cancel()
            raise
        if not done:
            task.cancel()
            abort(self.writer.transport)
            raise ConnectionResetError("the client did not take the answer within the request time limit")
        task.result()

    def gone(self) -> bool:
        """The client closed the connection (end of stream read, or the transport lost): a
        transcription that has no partial to send yet never writes, so it checks this between
        segments instead; a request waiting for an engine checks it too (``ServePool._acquire``).  Events the client sent before closing still count as there: nothing
        is dropped that it may wait for."""
        return self.reader.at_eof() or self.writer.transport.is_closing()

    async def error(self, text: str, code: str, endpoint: str = "wyoming") -> None:
        from wyoming.error import Error

        self._count(endpoint, code)
        await self.write(Error(text=text, code=code).event())

    def _count(self, endpoint: str, status: str) -> None:
        if self.metrics is not None:
            self.metrics.count(endpoint, status)

    async def run(self) -> None:
        try:
            while True:
                try:
                    event = await asyncio.wait_for(read_event(self.reader), self.options.idle_timeout_s)
                except asyncio.TimeoutError:
                    break  # idle past --idle-timeout: the descriptor goes back
                except ValueError as exc:
                    await self.error(f"malformed event: {exc}", "malformed-event")
                    continue
                except Framing as exc:
                    await self.error(f"malformed event: {exc}; closing the connection", "malformed-event")
                    break
                if event is None:
                    break
                self.busy = True
                try:
                    await self.handle(event)
                except ClientGone:  # it left (while its request waited for an engine, or between segments)
                    self._count(f"wyoming {event.type}", ClientGone.code)
                    break
                except ServeError as exc:
                    await self.error(str(exc), exc.code, f"wyoming {event.type}")
                except RkspeechError as exc:  # the engine refused the input (bad voice, language, ...)
                    await self.error(str(exc), "bad-request", f"wyoming {event.type}")
                except (KeyError, TypeError, ValueError, AttributeError) as exc:
                    await self.error(f"malformed {event.type} event: {exc!r}", "malformed-event")
                except (ConnectionError, asyncio.CancelledError):
                    raise
                except Exception as exc:
                    log.exception("wyoming %s failed", event.type)
                    await self.error(f"internal error: {type(exc).__name__}", "internal", f"wyoming {event.type}")
                finally:
                    self.busy = False
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            if self._partials is not None:
                self._partials.cancel()
            self._audio_lease.release()
            self._text_lease.release()
            self.writer.close()

    async def handle(self, event) -> None:
        from wyoming.asr import Transcribe
        from wyoming.audio import AudioChunk, AudioStart, AudioStop
        from wyoming.info import Describe
        from wyoming.tts import (
            Synthesize,
            SynthesizeChunk,
            SynthesizeStart,
            SynthesizeStop,
        )

        if Describe.is_type(event.type):
            await self.write(self.describe())
            self._count("wyoming describe", "ok")
        elif Transcribe.is_type(event.type):
            self.pool.first_model(TRANSCRIBE)  # Unavailable when not served
            request = Transcribe.from_event(event)
            self._language = request.language
            self._bias = [*(request.transcript_names or []), *(request.transcript_terms or [])]
        elif AudioStart.is_type(event.type):
            self.pool.first_model(TRANSCRIBE)
            from wyoming.audio import AudioChunkConverter

            start = AudioStart.from_event(event)
            check_audio_format(start.rate, start.width, start.channels)
            self._converter = AudioChunkConverter(rate=SAMPLE_RATE, width=2, channels=1)
            self._audio, self._audio_bytes, self._too_long = [], 0, False
            self._audio_lease.release()
            if self._partials is not None:
                self._partials.cancel()
            from rkspeech.serve.wyoming_partials import open_partials

            self._partials = open_partials(self)
        elif AudioChunk.is_type(event.type):
            if self._converter is None:
                raise ServeError("audio-chunk before audio-start")
            if self._too_long:
                return
            chunk = AudioChunk.from_event(event)
            frame = check_audio_format(chunk.rate, chunk.width, chunk.channels)
            if len(chunk.audio) % frame:
                raise ServeError(f"audio-chunk of {len(chunk.audio)} bytes is not whole frames of {frame} bytes "
                                 f"(width {chunk.width} x channels {chunk.channels})")
            # the size after conversion, known before converting: a tiny chunk declaring a low
            # rate must not allocate gigabytes (the resampler's output grows by 16000 / rate)
            converted = 2 * (len(chunk.audio) // frame) * SAMPLE_RATE // chunk.rate
            self._audio_bytes += converted
            if self._audio_bytes > self.options.max_audio_s * SAMPLE_RATE * 2:
                self._too_long, self._audio = True, []
                self._audio_lease.release()
                return
            try:
                self._audio_lease.add(converted, "this audio")
            except ServeError:
                self._converter, self._audio = None, []  # the stream ends here: audio-stop is out of order now
                self._audio_lease.release()
                raise
            self._audio.append(self._converter.convert(chunk).audio)
            if self._partials is not None:
                await self._partials.audio_arrived(self)
        elif AudioStop.is_type(event.type):
            await self._transcribe()
        elif Synthesize.is_type(event.type):
            if self._streaming is not None:
                return  # the non-streaming copy of a streaming request
            request = Synthesize.from_event(event)
            await self._speak(request.text, request.voice)
            self._count("wyoming synthesize", "ok")
        elif SynthesizeStart.is_type(event.type):
            self.pool.first_model(SPEECH)
            self._streaming = {"voice": SynthesizeStart.from_event(event).voice, "text": SentenceSplitter(),
                               "failed": False}
        elif SynthesizeChunk.is_type(event.type):
            if self._streaming is None:
                raise ServeError("synthesize-chunk before synthesize-start")
            state = self._streaming
            if state["failed"]:
                return  # this stream was refused once (one error): the rest is dropped until synthesize-stop
            splitter = state["text"]
            sentences = splitter.feed(SynthesizeChunk.from_event(event).text)
            try:
                if len(splitter.text) > self.options.max_text_chars:
                    raise ServeError(f"the text of this synthesize stream has no sentence end within "
                                     f"{self.options.max_text_chars} characters (--max-text-chars)")
                self._text_lease.release()  # the text held is what is not yet a sentence
                self._text_lease.add(len(splitter.text) + sum(map(len, sentences)), "this text stream")
                for sentence in sentences:
                    if sentence.strip():
                        await self._speak(sentence.strip(), state["voice"])  # audio-start .. audio-stop per sentence
            except (ServeError, RkspeechError):
                state["failed"] = True
                splitter.rest()
                self._text_lease.release()
                raise
        elif SynthesizeStop.is_type(event.type):
            if self._streaming is None:
                raise ServeError("synthesize-stop before synthesize-start")
            from wyoming.tts import SynthesizeStopped

            state, self._streaming = self._streaming, None
            self._text_lease.release()
            rest = state["text"].rest()
            try:
                if rest.strip() and not state["failed"]:
                    await self._speak(rest.strip(), state["voice"])
            except ClientGone:
                raise
            except (ServeError, RkspeechError) as exc:  # said before synthesize-stopped, which still follows
                await self.error(str(exc), getattr(exc, "code", "bad-request"), "wyoming synthesize-stop")
            await self.write(SynthesizeStopped().event())
            if not state["failed"]:  # a refused stream was counted by its error
                self._count("wyoming synthesize-stream", "ok")
        else:
            raise ServeError(f"unknown or unsupported event type {event.type!r}")

    async def _transcribe(self) -> None:
        from wyoming.asr import Transcript, TranscriptChunk, TranscriptStart, TranscriptStop

        from rkspeech.serve import biasing, transcription
        from rkspeech.serve.transcript_stream import transcript_events

        if self._converter is None:
            raise ServeError("audio-stop before audio-start")
        audio_bytes, too_long, language, bias = b"".join(self._audio), self._too_long, self._language, self._bias
        self._converter, self._audio, self._audio_bytes, self._language, self._bias = None, [], 0, None, []
        partials, self._partials = self._partials, None
        if partials is not None:
            await partials.finish(self)  # a step already computed is sent; one still running is dropped
        if too_long or not audio_bytes:
            self._audio_lease.release()
        if too_long:
            from rkspeech.runtime.audio import too_long_message
            from rkspeech.serve.errors import TooLong

            raise TooLong(too_long_message("the audio", self.options.max_audio_s))
        start = time.perf_counter()
        deadline = self.pool.deadline()
        events = None
        # after partial chunks, the final text's chunks are what it adds to them (nothing when it
        # revised them: the transcript then says what was heard)
        sent = partials.sent if partials is not None and partials.started else None
        try:  # the buffered audio is held until transcribed (or refused)
            model = self.pool.first_model(TRANSCRIBE)
            request = transcription.check_request(model, transcription.TranscribeRequest(
                language=transcription.check_language(model, language or self.options.asr_language),
                hotwords=biasing.hotwords(bias or None, self.options.hotwords_file),
                beam_size=self.options.asr_beam_size, vad=self.options.asr_vad))
            audio = pcm16_to_float(audio_bytes)
            del audio_bytes
            if audio.size == 0:
                raise ServeError("no audio between audio-start and audio-stop")
            # the float32 samples, twice the 16-bit audio buffered, are held until transcribed too
            self._audio_lease.add(audio.nbytes, "this audio")
            log.info("wyoming transcription: %s", request.logged())
            # streamed (wyoming 1.10): transcript-start, a chunk per decoded segment, transcript-stop,
            # then the plain transcript, which clients that do not stream wait for
            started = sent is not None
            events = transcript_events(self.pool, audio, request, deadline=deadline, client=self.client,
                                       gone=self.gone)
            async for kind, value in events:
                if not started:
                    await self.write(TranscriptStart(language=request.language).event(), deadline)
                    started = True
                if kind == "delta" and sent is None:
                    await self.write(TranscriptChunk(text=value).event(), deadline)
                elif kind != "delta":
                    result = value
        finally:
            if events is not None:
                await events.aclose()  # a write that failed stops the decoding now
            self._audio_lease.release()
        text = result.text.strip()
        if sent is not None and text.startswith(sent) and len(text) > len(sent):
            await self.write(TranscriptChunk(text=text[len(sent):]).event(), deadline)
        await self.write(TranscriptStop().event(), deadline)
        await self.write(Transcript(text=text, language=result.language).event(), deadline)
        if self.metrics is not None:
            self.metrics.observe_timing(result.timing)
            self.metrics.stage_seconds.labels("request").observe(time.perf_counter() - start)
        self._count("wyoming transcribe", "ok")

    async def _speak(self, text: str, voice) -> None:
        """Synthesize ``text``: audio-start (after the engine's first chunk: a refusal comes before
        any audio), audio-chunk..., audio-stop."""
        from wyoming.audio import AudioChunk, AudioStart

        from rkspeech.serve.audio import float_to_pcm16
        from rkspeech.serve.language_codes import model_language
        from rkspeech.serve.speech import SpeakRequest

        engine = self.pool.first_model(SPEECH)
        named = getattr(voice, "speaker", None) or getattr(voice, "name", None)
        request = SpeakRequest.checked(engine, text, speaker=named or "default",  # none named: the first voice
                                       language=model_language(getattr(voice, "language", None),
                                                               engine.languages or []),
                                       max_chars=self.options.max_text_chars)
        rate = engine.sample_rate
        began = time.perf_counter()
        deadline = self.pool.deadline()
        chunks = self.pool.stream(SPEECH, request.open, deadline=deadline, client=self.client, budget=self._budget,
                                  gone=self.gone)
        started = False
        try:
            async for chunk in chunks:
                if not started:  # after the first chunk: an engine's refusal comes before any audio-start
                    await self.write(AudioStart(rate=rate, width=2, channels=1).event(), deadline)
                    started = True
                    if self.metrics is not None:
                        self.metrics.stage_seconds.labels("speech_first_chunk").observe(time.perf_counter() - began)
                pcm = float_to_pcm16(chunk)
                for i in range(0, len(pcm), CHUNK_SAMPLES * 2):
                    await self.write(AudioChunk(rate=rate, width=2, channels=1,
                                                audio=pcm[i:i + CHUNK_SAMPLES * 2]).event(), deadline)
        except Exception as exc:
            if started and not isinstance(exc, ConnectionError):
                # an error mid-stream: close the audio first, so no audio-start lacks its audio-stop
                await self._audio_stop()
            raise
        finally:
            await chunks.aclose()  # a client gone mid-stream stops the generation now, not at collection
        if not started:
            await self.write(AudioStart(rate=rate, width=2, channels=1).event(), deadline)
        if self.metrics is not None:
            self.metrics.stage_seconds.labels("speech_total").observe(time.perf_counter() - began)
        await self._audio_stop()

    async def _audio_stop(self) -> None:
        from wyoming.audio import AudioStop

        await self.write(AudioStop().event())
