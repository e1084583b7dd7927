"""Capture: recording what a stage is fed and returns, and the sample requests checks run with.

The other half of comparison (``core.compare``): a check runs a reference, records what each
stage saw, then replays it through the stage under test.  Written once here (numpy only):

* recorders, each a pass-through wrapper that appends copies to lists the caller owns (the
  wrapped object stays the caller's: ``close`` does not close it):
  :class:`RecordingTalker` (a ``TalkerBackend``: ``forward``'s input and output),
  :class:`RecordingCodePredictor` (a ``CodePredictorBackend``: each frame's inputs and
  logits), :class:`RecordingRunner` (a graph runner: every ``infer`` feed, or the first few
  feeds and outputs: the CPU stages' golden replays, ``pipelines.cpu_goldens``);
* sample requests, the ``generate_frames`` keywords a check generates with, by the checkpoint's
  variant (``tts.cfg.tts_model_type``): :func:`sample_request` (one run),
  :func:`cycled_requests` (speakers x languages, the accuracy gate), :func:`random_request`
  (training), and the reference clips a voice clone is given (:func:`tone_clip`,
  :func:`step_sine_clip`).  Each check keeps the request it was measured with (its texts,
  instruct and clip are parameters here), so no figure changed when they moved (2026-12).

``tts`` is any generation model (``models.qwen3_tts.generate.HostModel``: ``cfg``,
``speakers``, ``languages``); nothing here imports it.
"""

from __future__ import annotations

import numpy as np

from rkspeech.core.errors import RkspeechError

#: The voice-design instruct of the quantized-stage check, the talker's check and the gate.
CALM_VOICE = "A calm voice."
#: The voice-design instruct of the code predictor's build checks and its calibration.
CALM_CLEAR_VOICE = "A calm, clear voice."


class RecordingTalker:
    """A ``TalkerBackend`` that appends ``(embeds float32 [t, Ht], hidden float32 [Ht])`` of every
    ``forward`` to ``calls``."""

    def __init__(self, inner, calls: list | None = None):
        self.inner, self.name = inner, f"recording {inner.name}"
        self.calls: list[tuple[np.ndarray, np.ndarray]] = [] if calls is None else calls

    def start(self, capacity: int) -> None:
        self.inner.start(capacity)

    def forward(self, embeds):
        out = self.inner.forward(embeds)
        self.calls.append((np.array(embeds, dtype=np.float32), np.array(out, dtype=np.float32)))
        return out

    def close(self) -> None:  # the caller owns the inner backend
        pass


def _numpy(x) -> np.ndarray:
    return np.array(x.numpy() if hasattr(x, "numpy") else x, dtype=np.float32)


class RecordingCodePredictor:
    """A ``CodePredictorBackend`` that appends each frame's inputs ``(hidden [Ht], first [Ht])``
    to ``inputs`` and its logits ``float32 [G-1, V]`` to ``logits``.  A greedy-only backend (the
    frame graph) is run through ``infer`` and its argmax taken, as the loop does."""

    def __init__(self, inner, inputs: list | None = None, logits: list | None = None):
        self.inner, self.name = inner, f"recording {inner.name}"
        self.greedy_only = getattr(inner, "greedy_only", False)
        self.inputs = [] if inputs is None else inputs
        self.logits = [] if logits is None else logits

    def frame(self, hidden, first_embed, choose):
        rows: list[np.ndarray] = []
        if self.greedy_only:
            logits = np.asarray(self.inner.infer(hidden, first_embed)["logits"], dtype=np.float32)
            codes = [int(c) for c in logits.argmax(-1)]
            rows = list(logits)
        else:
            def spy(j, lg):
                rows.append(_numpy(lg))
                return choose(j, lg)

            codes = self.inner.frame(hidden, first_embed, spy)
        self.inputs.append((np.array(hidden, np.float32).reshape(-1), np.array(first_embed, np.float32).reshape(-1)))
        self.logits.append(np.stack(rows))
        return codes

    def close(self) -> None:
        pass


def teacher(codes, rows: list):
    """A code predictor's ``choose`` that appends each codebook's logits to ``rows`` and answers
    with ``codes[j - 1]`` (teacher forcing inside a frame)."""
    def choose(j, lg):
        rows.append(_numpy(lg))
        return codes[j - 1]

    return choose


class RecordingRunner:
    """A graph runner whose every ``infer`` feed is appended (copied) to ``feeds``; with
    ``outputs`` (a list) each call's outputs are appended (copied) too; with ``limit`` only the
    first ``limit`` calls are kept (later calls pass through uncopied: a published talker's cache
    is 117 MB a call).  ``owns``: ``close`` closes the wrapped runner (a recorder put in a stage's
    place, whose ``close`` is the stage's); else the runner stays the caller's."""

    def __init__(self, runner, feeds: list | None = None, *, outputs: list | None = None,
                 limit: int | None = None, owns: bool = False):
        self.runner, self.limit, self.owns = runner, limit, owns
        self.feeds: list[dict[str, np.ndarray]] = [] if feeds is None else feeds
        self.outputs = outputs

    def infer(self, feed):
        keep = self.limit is None or len(self.feeds) < self.limit
        if keep:
            self.feeds.append({k: np.array(v) for k, v in feed.items()})
        out = self.runner.infer(feed)
        if keep and self.outputs is not None:
            self.outputs.append({k: np.array(v) for k, v in out.items()})
        return out

    def close(self) -> None:
        if self.owns:
            self.runner.close()


def _refuse(kind: str, what: str, hint: str) -> RkspeechError:
    return RkspeechError(f"{what} runs custom-voice or voice-design models, not {kind!r}{hint}")


def sample_request(tts, run: int = 0, *, language: str | None = "english", instruct: str = CALM_VOICE,
                   ref_audio: np.ndarray | None = None, what: str = "this check", hint: str = "") -> dict:
    """``generate_frames`` keywords of check run ``run``: custom voice: speaker ``run`` (cycled),
    voice design: ``instruct``; a base model clones ``ref_audio`` (None: refused in one line
    naming ``what``, then ``hint``).  ``language``: None leaves it out (the model's default)."""
    kind = tts.cfg.tts_model_type
    if kind == "custom_voice":
        kw = {"speaker": tts.speakers[run % len(tts.speakers)]}
    elif kind == "voice_design":
        kw = {"instruct": instruct}
    elif ref_audio is not None:
        kw = {"ref_audio": ref_audio}
    else:
        raise _refuse(kind, what, hint)
    return kw if language is None else {**kw, "language": language}


def cycled_requests(tts, n: int, *, instruct: str = CALM_VOICE, what: str = "this check", hint: str = "") -> list[dict]:
    """``n`` requests over the checkpoint's speakers and languages (custom voice: round r gives
    speaker s language ``(s + r) % L``, so the first ``S x L`` requests are distinct pairs and
    every speaker and language occurs early; voice design: ``instruct``, languages cycled)."""
    kind = tts.cfg.tts_model_type
    languages = list(tts.languages) or ["auto"]
    if kind == "custom_voice":
        speakers = tts.speakers
        pairs = [(s, (s + r) % len(languages)) for r in range(len(languages)) for s in range(len(speakers))]
        return [{"speaker": speakers[pairs[i % len(pairs)][0]], "language": languages[pairs[i % len(pairs)][1]]}
                for i in range(n)]
    if kind == "voice_design":
        return [{"instruct": instruct, "language": languages[i % len(languages)]} for i in range(n)]
    if kind == "base":  # x-vector clones of held-out voices made here (no download), languages cycled
        voices = reference_voices()
        return [{"ref_audio": voices[i % len(voices)], "language": languages[i % len(languages)]} for i in range(n)]
    raise _refuse(kind, what, hint)


#: (fundamental, its amplitude, an overtone, its amplitude) of the held-out voices a Base model is
#: judged on: low and high, bright and dull -- none is a clip any check or test clones elsewhere
REFERENCE_VOICES = ((110.0, 0.3, 770.0, 0.08), (165.0, 0.25, 1320.0, 0.1), (196.0, 0.3, 980.0, 0.05),
                    (247.0, 0.2, 1730.0, 0.12), (330.0, 0.25, 2310.0, 0.06))


def reference_voices(seconds: float = 2.0) -> list[np.ndarray]:
    """The held-out reference clips of :data:`REFERENCE_VOICES` (24 kHz, float32)."""
    return [tone_clip((f, a), (o, b), seconds=seconds) for f, a, o, b in REFERENCE_VOICES]


def random_request(tts, rng: np.random.Generator) -> dict:
    """A random speaker and language (custom voice), as a user would pass them."""
    speakers, languages = tts.speakers, tts.languages
    return {"speaker": speakers[int(rng.integers(len(speakers)))],
            "language": languages[int(rng.integers(len(languages)))]}


def tone_clip(*tones: tuple[float, float], seconds: float = 1.0, rate: int = 24000) -> np.ndarray:
    """A reference clip to clone: the sum of ``amplitude * sin(2 pi f t)`` over ``(f, amplitude)``
    ``tones``, float32."""
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    return sum(a * np.sin(2 * np.pi * f * t) for f, a in tones).astype(np.float32)


def step_sine_clip(step: float = 0.05, amplitude: float = 0.3, samples: int = 24000) -> np.ndarray:
    """``amplitude * sin(step * n)`` over ``samples`` samples, float32 (the talker check's clip)."""
    return np.sin(np.arange(samples, dtype=np.float32) * step) * amplitude
