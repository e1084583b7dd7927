"""Text to speech, streaming: talker + code predictor frames into the plan's streaming vocoder.

:class:`Speaker` holds one loaded Qwen3-TTS model (talker, code predictor, speaker encoder) and
an engine pool over the plan's vocoder.  A plan from ``rkspeech build qwen3-tts`` also places
the talker and the code predictor (``plan.sections``): those run as their graphs and the host's
part (prompt, heads, sampling) in numpy, without torch (``runtime.tts.numpy_loop``; torch only for
voice cloning's speaker encoder); ``host="torch"`` keeps the host's part in torch
(``runtime.tts.open_stages``, the reference); a ``qwen3-tts-vocoder`` plan leaves both stages in torch.  :meth:`Speaker.stream` yields PCM while generation
goes on: each frame (16 codes) is pushed into a :class:`StreamingVocoder` as soon as the
generator yields it, so the first audio comes after the first step's worth of frames (the
plan's first B, else its main B), not after the whole utterance.  The steps the vocoder runs
are the ones a whole-codes decode runs (it buffers to B), so the streamed audio is
bit-identical to ``rkspeech decode`` of the same codes on the same backend (tested).

The plan must be the one built for this model's speech tokenizer: its contract is checked
against the checkpoint's vocoder config (codebooks, codebook size, attention geometry, sample
rate), and a mismatch is one line naming the fields.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.runtime.tts.generation_thread import Generation


@dataclass
class SpeechTiming:
    """Where the time of one utterance went (seconds, wall clock)."""

    frames: int = 0
    samples: int = 0
    generate_s: float = 0.0  # talker + code predictor, inside the frame generator
    vocoder_s: float = 0.0  # inside vocoder engine calls (includes waiting for a pool slot)
    total_s: float = 0.0
    first_audio_s: float | None = None
    stages: dict = field(default_factory=dict)  # per-stage split when the generator reports it
    #: one line per utterance the talker's positions cut short (capacity or context), in order
    cuts: list = field(default_factory=list)

    @property
    def host_s(self) -> float:
        return max(0.0, self.total_s - self.generate_s - self.vocoder_s)

    def to_dict(self, sample_rate: int) -> dict:
        audio_s = self.samples / sample_rate if sample_rate else 0.0
        return {
            "frames": self.frames, "samples": self.samples, "audio_seconds": round(audio_s, 4),
            "total_seconds": round(self.total_s, 4), "generate_seconds": round(self.generate_s, 4),
            "vocoder_seconds": round(self.vocoder_s, 4), "host_seconds": round(self.host_s, 4),
            "time_to_first_audio_s": None if self.first_audio_s is None else round(self.first_audio_s, 4),
            "realtime_factor": round(self.total_s / audio_s, 4) if audio_s else None,
            "stages": {k: round(v, 4) for k, v in self.stages.items()},
            **({"cut": list(self.cuts)} if self.cuts else {}),
        }


#: Sampling seed when the caller gives none (``rkspeech speak --seed``, the server): the same text
#: and voice give the same audio from the CLI and from a server.
DEFAULT_SEED = 0
#: What runs the host's part of generation (``Speaker(host=...)``, ``rkspeech speak --host-loop``).
HOST_LOOPS = ("auto", "numpy", "torch")
#: Whether ``Speaker``'s onnxruntime sessions spin-wait between parallel sections (onnxruntime's
#: default).  No: generation and the vocoder run in two threads at once, and each session's idle
#: threads spinning took the cores from the other.  Published int4 plan, 16 frames, 2 x86 cores
#: shared with other jobs (load 6-9), 2026-12-01: real-time factor 12.3 spinning vs 3.2 not (2
#: threads each), 2.7-2.9 not spinning with 1 or 2 threads per session (docs/speak.md).
SPIN = False
#: The shortest reference recording ``rkspeech speak --ref-audio`` accepts (``runtime.audio.decode_audio``'s
#: ``min_seconds``).
MIN_REF_AUDIO_S = 0.5


class Speaker:
    """Text in, an iterator of float32 PCM chunks (mono, :attr:`sample_rate`) out.

    ``model_dir``: a Qwen3-TTS model root (or HF cache snapshot); ``plan``: ``plan.json`` from
    ``rkspeech build qwen3-tts-vocoder`` for its speech tokenizer; ``backend`` runs the vocoder
    (``ort``, ``sim``, ``rknnlite``); ``engines``: pool slots, so that several streams can
    decode at once (a server's; one is enough for the CLI); ``options``: the
    ``GenerationOptions`` of :meth:`stream` calls that pass none (default: sampling with
    :data:`DEFAULT_SEED`).  Each :meth:`stream` call owns its
    own generation state and vocoder stream, so calls from several threads do not mix; the
    torch talker is shared and serialised by a lock (one generation at a time per Speaker).

    ``host``: what runs the host's part of generation (prompt, heads, sampling; :data:`HOST_LOOPS`):
    ``numpy`` (``runtime.tts.numpy_loop``: no torch; needs a plan that places both the talker and
    the code predictor as graphs), ``torch`` (``models.qwen3_tts.generate.TTSModel``, the
    reference), or ``auto``: numpy when the plan places both stages and ``host_stages`` is not
    set, else torch (a ``model`` given: its own loop).

    ``streams``: generations at once over the plan's lanes graphs (``runtime.tts.batch``; numpy
    host loop): each :meth:`stream` call then takes a pair of lanes (waiting for one) instead of
    the Speaker's lock, and its graph calls join the running batch; None: the plan's lanes at
    most one per two usable cores, 1 below four cores (``batch.default_streams``); 1: one at a time.
    """

    def __init__(self, model_dir, plan, *, backend: str = "ort", engines: int = 1, threads: int | None = None,
                 core_mask=None, target: str | None = None, model=None, options=None, host_stages: bool = False,
                 host: str = "auto", stage_threads: int | None = None, streams: int | None = 1):
        import threading

        from rkspeech.plan.plan import check_plan_for_model, load_plan
        from rkspeech.runtime.tts.pool import open_pool

        from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_config, resolve_checkpoint

        if host not in HOST_LOOPS:
            raise RkspeechError(f"host loop must be one of {', '.join(HOST_LOOPS)}, got {host!r}")
        self.backend = backend
        self.options = options  # GenerationOptions for stream() calls that give none
        self.plan = load_plan(plan, backend=backend, expect_target=target if backend == "rknnlite" else None)
        self.host = _host_loop(host, self.plan, host_stages=host_stages, model=model)
        if model is not None:
            self.model = model
        elif self.host == "numpy":
            from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel

            self.model = NumpyTTSModel.load(model_dir)
        else:
            self.model = _load_model(model_dir)
        check_plan_for_model(self.plan, read_config(resolve_checkpoint(self.model.files.root)))
        self.stage_backends: dict = {}
        #: the plan's lanes graphs when streams are generated together (``runtime.tts.batch``), else None
        if stage_threads is None:
            stage_threads = threads
        self.batch = _open_batch(self.plan, self.model, streams, host=self.host, threads=stage_threads)
        try:  # a vocoder engine per stream at least: the batch's streams vocode at once
            self.pool = open_pool(self.plan, backend, size=max(engines, self.streams), threads=threads,
                                  core_mask=core_mask, target=target, spin=SPIN)
        except BaseException:
            if self.batch is not None:
                self.batch.close()
            raise
        # the talker and code predictor on the first of the vocoder's cores unless the plan pins them
        stage_mask = core_mask[0] if core_mask else None
        try:
            from rkspeech.runtime.tts.open_stages import open_clone_encoders, open_stage_backends

            if self.batch is None:
                self.stage_backends = open_stage_backends(self.plan, backend, model=self.model, threads=stage_threads,
                                                          target=target, host_stages=host_stages,
                                                          core_mask=stage_mask, spin=SPIN)
            else:  # the lanes only: the one-stream graphs would hold a second copy of the weights
                self.stage_backends = open_clone_encoders(self.plan, backend, model=self.model, threads=threads,
                                                          spin=SPIN)
        except BaseException:
            self.close()
            raise
        self.model.use_backends(**self.stage_backends)
        self._lock = threading.Lock()
        try:
            from rkspeech.runtime.tts.saved_voices import plan_voices

            #: voices saved beside a Base plan (``rkspeech voices save``), spoken by name as speakers are
            self.voices = plan_voices(self.plan.path, self.model)
        except BaseException:
            self.close()
            raise

    # ---- what the model offers --------------------------------------------------------------
    @property
    def sample_rate(self) -> int:
        return int(self.plan.contract.sample_rate)

    @property
    def speakers(self) -> list[str]:
        """The model's named speakers, then the voices saved beside the plan."""
        return list(self.model.speakers) + list(self.voices)

    @property
    def languages(self) -> list[str]:
        return list(self.model.languages)

    @property
    def variant(self) -> str:
        return self.model.variant

    @property
    def greedy_code_predictor(self) -> bool:
        """True when the code predictor runs as a greedy graph: its codebooks are argmax, and
        requests must not ask it to sample (the default options do not)."""
        return bool(getattr(self.model.code_predictor_backend, "greedy_only", False))

    @property
    def stage_names(self) -> dict[str, str]:
        """Where each stage runs: ``{"talker": "torch"|graph backend, "code_predictor": ...}``."""
        if self.batch is not None:
            return {"talker": self.batch.talker.name, "code_predictor": self.batch.code_predictor.name}
        return {"talker": self.model.talker_backend.name, "code_predictor": self.model.code_predictor_backend.name}

    @property
    def streams(self) -> int:
        """Streams generated at once (1: one at a time, the others wait for the engine)."""
        return self.batch.streams if self.batch is not None else 1

    def default_options(self, **kw):
        """Sampling with :data:`DEFAULT_SEED` (qwen-tts' controls), the code predictor greedy
        when its graph is (``kw``: GenerationOptions fields to set)."""
        from rkspeech.models.qwen3_tts.sampling import GenerationOptions

        kw.setdefault("seed", DEFAULT_SEED)
        if self.greedy_code_predictor:
            kw["subtalker_dosample"] = False
        return GenerationOptions(**kw)

    # ---- speech -----------------------------------------------------------------------------
    def stream(self, text: str, *, speaker: str | None = None, language: str | None = None,
               instruct: str | None = None, ref_audio=None, ref_text: str | None = None, ref_codes=None,
               options=None,
               codes_out: list | None = None, margins_out: list | None = None,
               timing: SpeechTiming | None = None) -> Iterator[np.ndarray]:
        """Yield PCM chunks (float32, [-1, 1]) as the vocoder steps complete.

        ``ref_audio`` (float32 mono at :attr:`sample_rate`, e.g. from ``runtime.audio.decode_audio``)
        clones a voice on Base models; with ``ref_text`` and ``ref_codes`` (its transcript and its
        ``[T, 16]`` codes) in context.
        ``codes_out``: a list that receives each frame's 16 codes as it is generated;
        ``margins_out``: one that receives, when the generation ends, a row per talker step of
        its greedy decisions' margins (``loop.FrameSampler.margins``: the frames', then the
        decision that ended it);
        ``timing``: filled in as the stream goes (time to first audio, per-stage seconds).
        A ``speaker`` that names a voice saved beside the plan speaks that voice.
        Bad text, speaker, language or mode is refused before any audio is produced."""
        timing = timing if timing is not None else SpeechTiming()
        voice = self.voices.get(speaker) if speaker else None
        if voice is not None:
            speaker = None
        if options is None:
            options = self.options if self.options is not None else self.default_options()
        request = dict(speaker=speaker, language=language, instruct=instruct, ref_audio=ref_audio, ref_text=ref_text,
                       ref_codes=ref_codes, options=options, voice=voice)
        if self.batch is None:
            frames = self.model.generate_frames(text, **request)
            yield from self._speech(self.model, frames, self._lock, None, codes_out, margins_out, timing)
            return
        import copy

        host = copy.copy(self.model)  # its own backends and per-generation state; weights and host shared
        host.use_backends(**self.batch.reserved())
        frames = host.generate_frames(text, **request)  # a bad request is refused before it waits for lanes
        with self.batch.stream() as (talker, code_predictor):
            host.use_backends(talker=talker, code_predictor=code_predictor)  # the generator starts on these
            yield from self._speech(host, frames, contextlib.nullcontext(), self.batch.rounds, codes_out,
                                    margins_out, timing)

    def _speech(self, model, frames, lock, rounds, codes_out, margins_out, timing: SpeechTiming
                ) -> Iterator[np.ndarray]:
        """:meth:`stream`'s audio: ``frames`` (``model``'s generator, not started) run holding
        ``lock`` (``rounds``: the batch's, which the generating thread joins) into the vocoder."""
        # eager, fed one frame at a time: small steps after the first, so the utterance ends one
        # small step after its last frame, and the steps depend on the frames only, not on timing
        sv = self.pool.open_stream(eager=True)
        start = time.perf_counter()
        with Generation(frames, lock, timing, codes_out, rounds) as produced:
            for frame in produced:
                pcm = self._push(sv, frame, timing)
                if pcm.size:
                    if timing.first_audio_s is None:
                        timing.first_audio_s = time.perf_counter() - start
                    timing.samples += pcm.size
                    timing.total_s = time.perf_counter() - start
                    yield pcm
        stages = getattr(model, "last_timing", None)
        if stages:
            timing.stages = dict(stages)
        if margins_out is not None:
            margins_out.extend(getattr(model, "last_margins", []))
        cut = getattr(model, "last_cut", None)
        if cut:  # the talker's positions ran out before it ended the utterance: one line, and the report
            from rkspeech.core import progress

            timing.cuts.append(cut)
            progress.info(f"warning: {cut}")
        if timing.frames == 0:
            raise RkspeechError("the model generated no speech frames for this text (it ended at once)")
        tail = self._push(sv, None, timing)
        timing.total_s = time.perf_counter() - start
        if tail.size:
            if timing.first_audio_s is None:
                timing.first_audio_s = timing.total_s
            timing.samples += tail.size
            yield tail

    @staticmethod
    def _push(sv, frame, timing: SpeechTiming) -> np.ndarray:
        steps = len(sv.timings)
        pcm = sv.push(frame) if frame is not None else sv.flush()
        timing.vocoder_s += sum(t.engine_s for t in sv.timings[steps:])
        return pcm

    def speak(self, text: str, **kwargs) -> np.ndarray:
        """The whole utterance as one array (see :meth:`stream`)."""
        chunks = list(self.stream(text, **kwargs))
        return np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)

    def close(self) -> None:
        for b in getattr(self, "stage_backends", {}).values():
            b.close()
        self.stage_backends = {}
        if getattr(self, "batch", None) is not None:
            self.batch.close()
        self.pool.close()

    def __enter__(self) -> Speaker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _host_loop(host: str, plan, *, host_stages: bool, model) -> str:
    """``numpy`` or ``torch`` for a Speaker (see its docstring); one line when numpy cannot be."""
    both = all(plan.stages.get(k) is not None for k in ("talker", "code_predictor"))
    if model is not None and host != "auto" and host != getattr(model, "host", "torch"):
        raise RkspeechError(f"host loop {host} was asked for with a loaded {type(model).__name__}; load the "
                            "model for that loop (or pass host='auto')")
    if host == "auto":
        if model is not None:  # a loaded model says which loop it is
            return getattr(model, "host", "torch")
        return "numpy" if both and not host_stages else "torch"
    if host == "numpy":
        if not both:
            raise RkspeechError("the numpy host loop (no torch) needs a plan that places both the talker and the "
                                "code predictor as graphs (rkspeech build qwen3-tts); this plan holds "
                                + (", ".join(k for k in ("talker", "code_predictor") if plan.stages.get(k)) or
                                   "only the vocoder") + "; use --host-loop torch")
        if host_stages:
            raise RkspeechError("--host-stages runs the talker and the code predictor in torch; it needs "
                                "--host-loop torch (or auto), not numpy")
    return host


def _open_batch(plan, model, streams: int | None, *, host: str, threads: int | None):
    """The plan's lanes (``runtime.tts.batch.StreamBatch``) for ``streams`` at once, or None for
    one at a time (``streams`` 1; None: ``batch.default_streams``, 1 on a plan without lanes
    graphs); more than one stream on a plan or host loop that cannot batch is one line."""
    from rkspeech.runtime.tts.batch import StreamBatch, default_streams

    if streams is not None and streams < 1:
        raise RkspeechError(f"--streams must be >= 1, got {streams}")
    if streams is None:
        streams = default_streams(plan) if host == "numpy" else 1
    if streams == 1:
        return None
    if host != "numpy":
        raise RkspeechError(f"{streams} streams at once run the numpy host loop over the plan's lanes graphs; "
                            f"the {host} host loop generates one at a time (--streams 1)")
    return StreamBatch(plan, model, streams=streams, threads=threads, spin=SPIN)


def _load_model(model_dir):
    from rkspeech.models.qwen3_tts.generate import TTSModel

    return TTSModel.load(model_dir)
