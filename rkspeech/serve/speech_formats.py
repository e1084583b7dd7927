"""Speech output in the OpenAI formats, encoded by PyAV (FFmpeg) as the engine decodes.

``response_format``: ``mp3`` (the OpenAI API's default, libmp3lame 64 kb/s), ``opus`` (libopus in
Ogg, 32 kb/s, 20 ms pages), ``aac`` (FFmpeg's AAC in ADTS, 64 kb/s), ``flac`` (lossless),
``wav`` (16-bit PCM with an open-ended header) and ``pcm`` (raw 16-bit little-endian), all mono
at the engine's rate (Opus decodes at 48 kHz: every Opus decoder outputs 48 kHz).  Every format
is fed the same 16-bit samples the wav path sends (:func:`rkspeech.serve.audio.float_to_pcm16`),
so ``flac`` decodes bit-exact to ``wav``.

Streaming: :meth:`SpeechEncoder.feed` returns the bytes the muxer has written so far; nothing
waits for the end of the text.  A streamed file cannot be rewritten at the end, so the muxers
skip what needs a seek back: the mp3 has no Xing/LAME (gapless) frame and the FLAC STREAMINFO
says "length unknown".  Decoders therefore output the encoders' priming samples too: mp3 starts
with :data:`ENCODER_DELAY` ``["mp3"]`` = 1105 samples (LAME's 576 plus the decoder's 529) and
aac with 1024, and both pad their last frame; the samples in between are the wav path's
(tests/serve/test_serve.py measures the lag and the length).

Encoding runs on the event loop, chunk by chunk: 17-45 ms per 1.6 s of speech by format
(measured, docs/serve.md), small beside the engine's own time.

Speed (``speed`` 0.25-4.0): FFmpeg's ``atempo`` filter (WSOLA time stretching: the tempo
changes, the pitch is kept), chained in steps of at most x2 / x0.5, applied to every format.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from rkspeech.serve.errors import ServeError

SPEED_RANGE = (0.25, 4.0)



@dataclass(frozen=True)
class Format:
    container: str | None  # None: raw 16-bit PCM written by us (wav, pcm)
    codec: str | None
    bit_rate: int | None
    media_type: str
    options: tuple = ()


FORMATS = {
    "mp3": Format("mp3", "libmp3lame", 64000, "audio/mpeg"),
    "opus": Format("ogg", "libopus", 32000, "audio/ogg", (("page_duration", "20000"),)),
    "aac": Format("adts", "aac", 64000, "audio/aac"),
    "flac": Format("flac", "flac", None, "audio/flac"),
    "wav": Format(None, None, None, "audio/wav"),
    "pcm": Format(None, None, None, "audio/pcm"),
}
#: OpenAI ``response_format`` values served for speech; the first is the default (as the API's).
SPEECH_FORMATS = tuple(FORMATS)
DEFAULT_FORMAT = "mp3"
STREAM_FORMATS = ("audio", "sse")
#: Priming samples a decoder outputs before the first input sample (streamed files carry no
#: gapless tag); measured with PyAV 18.1 / FFmpeg's decoders on this host (tests/serve/test_serve.py).
ENCODER_DELAY = {"mp3": 1105, "aac": 1024, "flac": 0, "wav": 0, "pcm": 0}


def check_format(fmt) -> str:
    fmt = DEFAULT_FORMAT if fmt in (None, "") else fmt
    if not isinstance(fmt, str) or fmt not in FORMATS:
        raise ServeError(f"response_format {fmt!r} is not served; use one of {', '.join(SPEECH_FORMATS)}")
    return fmt


def check_speed(speed) -> float:
    if speed is None:
        return 1.0
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not \
            SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise ServeError(f"speed {speed!r} is out of range; give a number from {SPEED_RANGE[0]} to {SPEED_RANGE[1]}")
    return float(speed)


def check_stream_format(value) -> str:
    value = value or "audio"
    if value not in STREAM_FORMATS:
        raise ServeError(f"stream_format {value!r} is not one of {', '.join(STREAM_FORMATS)}")
    return value


def atempo_steps(speed: float) -> list[float]:
    """``speed`` as a chain of atempo factors, each within [0.5, 2] (the range every FFmpeg
    version's atempo takes)."""
    steps = []
    while speed > 2.0:
        steps.append(2.0)
        speed /= 2.0
    while speed < 0.5:
        steps.append(0.5)
        speed /= 0.5
    return steps + [speed]


class _Sink:
    """A non-seekable file for the muxer: what it writes is taken by the next :meth:`take`."""

    def __init__(self):
        self.parts: list[bytes] = []

    def write(self, data) -> int:
        self.parts.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self.parts = b"".join(self.parts), []
        return out


class _Tempo:
    """16-bit mono frames through atempo."""

    def __init__(self, sample_rate: int, speed: float):
        import av

        self.graph = av.filter.Graph()
        src = self.graph.add_abuffer(format="s16", sample_rate=sample_rate, layout="mono",
                                     time_base=Fraction(1, sample_rate))
        node = src
        for factor in atempo_steps(speed):
            nxt = self.graph.add("atempo", f"{factor:.6f}")
            node.link_to(nxt)
            node = nxt
        sink = self.graph.add("abuffersink")
        node.link_to(sink)
        self.graph.configure()

    def __call__(self, frame) -> list:
        import av

        self.graph.push(frame)
        out = []
        while True:
            try:
                out.append(self.graph.pull())
            except (av.BlockingIOError, av.EOFError):
                return out


class SpeechEncoder:
    """``SpeechEncoder(fmt, sample_rate, speed)``: :meth:`header`, then :meth:`feed` per float32
    chunk, then :meth:`finish`; each returns the bytes to send next."""

    def __init__(self, fmt: str, sample_rate: int, speed: float = 1.0):
        self.fmt, self.rate, self.speed = check_format(fmt), sample_rate, check_speed(speed)
        self.spec = FORMATS[self.fmt]
        self.media_type = self.spec.media_type
        self._pts = 0
        self._tempo = _Tempo(sample_rate, self.speed) if self.speed != 1.0 else None
        self._container = None
        if self.spec.container is not None:
            import av

            self._sink = _Sink()
            self._container = av.open(self._sink, "w", format=self.spec.container, options=dict(self.spec.options))
            self._stream = self._container.add_stream(self.spec.codec, rate=sample_rate, layout="mono")
            if self.spec.bit_rate:
                self._stream.bit_rate = self.spec.bit_rate
            self._stream.codec_context.open()
            ctx = self._stream.codec_context
            self._resampler = av.AudioResampler(format=ctx.format.name, layout="mono", rate=sample_rate)
            self._fifo = av.AudioFifo()
            self._frame_size = ctx.frame_size or 1024

    def header(self) -> bytes:
        if self.fmt == "wav":
            from rkspeech.serve.audio import wav_header

            return wav_header(self.rate)
        return b""

    def _frames(self, pcm16: np.ndarray | None) -> list:
        """16-bit samples as frames, through the tempo filter when ``speed`` is not 1 (None: flush)."""
        import av

        if pcm16 is None:
            return self._tempo(None) if self._tempo is not None else []
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm16.reshape(1, -1)), format="s16", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = self.rate, self._pts, Fraction(1, self.rate)
        self._pts += pcm16.size
        return self._tempo(frame) if self._tempo is not None else [frame]

    def _encode(self, frames: list, *, last: bool = False) -> bytes:
        if self._container is None:
            return b"".join(f.to_ndarray().astype("<i2").tobytes() for f in frames)
        for frame in frames:
            frame.pts = None
            for converted in self._resampler.resample(frame):
                self._fifo.write(converted)
        while self._fifo.samples >= self._frame_size or (last and self._fifo.samples):
            frame = self._fifo.read(min(self._frame_size, self._fifo.samples))
            for packet in self._stream.encode(frame):
                self._container.mux(packet)
        if last:
            for packet in self._stream.encode(None):
                self._container.mux(packet)
            self._container.close()
        return self._sink.take()

    def feed(self, chunk) -> bytes:
        from rkspeech.serve.audio import float_to_pcm16

        pcm = np.frombuffer(float_to_pcm16(chunk), dtype="<i2")
        if self._container is None and self._tempo is None:
            return pcm.tobytes()
        return self._encode(self._frames(pcm)) if pcm.size else b""

    def finish(self) -> bytes:
        return self._encode(self._frames(None), last=True)

    def close(self) -> None:
        """Release the muxer of a stream that ended early (a client gone)."""
        if self._container is not None:
            import contextlib

            with contextlib.suppress(Exception):
                self._container.close()


async def encoded_body(chunks, first, encoder: SpeechEncoder, *, sse: bool, on_end=None):
    """The response body: ``first`` (a chunk already taken, or None) and the rest of ``chunks``
    encoded as they come; with ``sse`` as server-sent events ``speech.audio.delta`` (base64 of
    the encoded bytes) and a closing ``speech.audio.done``, as the OpenAI API streams
    ``stream_format="sse"``.  ``on_end()`` is called after the last byte."""
    import base64
    import json

    def out(data: bytes) -> bytes:
        if not sse or not data:
            return data
        return b"data: " + json.dumps({"type": "speech.audio.delta",
                                       "audio": base64.b64encode(data).decode()}).encode() + b"\n\n"

    try:
        head = encoder.header()
        if head:
            yield out(head)
        if first is not None:
            data = encoder.feed(first)
            if data:
                yield out(data)
            async for chunk in chunks:
                data = encoder.feed(chunk)
                if data:
                    yield out(data)
        tail = encoder.finish()
        if tail:
            yield out(tail)
        if sse:
            yield b"data: " + json.dumps({"type": "speech.audio.done", "usage": {
                "input_tokens": 0, "output_tokens": 0, "total_tokens": 0}}).encode() + b"\n\n"
        if on_end is not None:
            on_end()
    finally:
        encoder.close()
        await chunks.aclose()
