"""``ASRTranscriber``: one Qwen3-ASR plan (``plan.asr``) opened for transcription, torch-free.

Per request, as the official ``Qwen3ASRModel.transcribe`` does it (qwen-asr 0.0.6): the audio cut
at its quietest points into pieces the decoder's capacity holds; per piece the log-Mel
(``models.qwen3_asr.features``), the encoder window by window (``models.qwen3_asr.geometry``: the
window graphs on the NPU, the simulator or onnxruntime), the prompt with one audio pad per encoder
token, whose embeddings the encoder's tokens replace; a prefill, then greedy decoding one position
at a time through the talker's ``GraphTalker`` (the decoder is a Qwen3 stack like the talker) and
the head graph, until an end token or ``max_new_tokens``; the ids decoded and parsed into language
and text as the official does.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

#: the official ``max_new_tokens`` default
DEFAULT_MAX_NEW_TOKENS = 512


@dataclass(frozen=True)
class Piece:
    """One cut of the audio, transcribed: where it starts and how long it is (seconds), its
    language and text as the official parses them, the generated ids."""
    offset_s: float
    seconds: float
    language: str
    text: str
    token_ids: list[int]


@dataclass
class ASRResult:
    language: str
    text: str
    #: generated ids per piece, the end token included when one was generated
    token_ids: list[list[int]] = field(default_factory=list)
    seconds: float = 0.0
    audio_seconds: float = 0.0


class ASRTranscriber:
    """Open with a plan path; ``transcribe(wave_16k)``; ``close()`` (or use as a context manager).
    ``backend`` runs the encoder windows (``ort``, ``sim``, ``rknnlite``); the decoder is a CPU
    stage (onnxruntime, ``threads``)."""

    def __init__(self, plan_path, *, backend: str = "ort", threads: int | None = None, core_mask: str | None = None):
        from rkspeech.models.qwen3_asr.asr_config import ASRConfig
        from rkspeech.models.qwen3_asr.geometry import EncoderGeometry
        from rkspeech.models.qwen3_asr.prompt import PromptBuilder
        from rkspeech.plan.asr import load_asr_plan
        from rkspeech.runtime.runners import open_runner
        from rkspeech.runtime.tts.talker_backend import open_graph_talker

        self.plan = plan = load_asr_plan(plan_path)
        self.backend = backend
        host = plan.host
        gen = host.get("generation_config.json")
        self.cfg = ASRConfig.from_dict(json.loads(Path(host["config.json"]).read_text()),
                                       json.loads(Path(gen).read_text()) if gen else None)
        self.geometry = EncoderGeometry.of(self.cfg.audio)
        self.prompts = PromptBuilder(Path(host["config.json"]).parent)
        self._runners = []
        try:
            opts = {"target": plan.target or "rk3588"} if backend == "sim" else {}
            if backend == "rknnlite" and core_mask:
                opts["core_mask"] = core_mask
            self.windows = {k: open_runner(backend, plan.window_file(k, backend), threads=threads, **opts)
                            for k in plan.windows}
            self._runners += list(self.windows.values())
            self.head = open_runner("ort", plan.decoder["head"], threads=threads)
            self._runners.append(self.head)
            self.talker = open_graph_talker(plan.decoder["decode"], plan.decoder["prefill"], backend="ort",
                                            rope="numpy", threads=threads)
        except BaseException:
            self.close()
            raise
        self.embed = np.load(host["embed"], mmap_mode="r")
        self.reset_timing()

    # -- pieces -----------------------------------------------------------------------------

    def embeddings(self, ids) -> np.ndarray:
        """float32 rows of the token embedding (bf16 stored as its bits: widened exactly)."""
        rows = np.asarray(self.embed[np.asarray(ids, dtype=np.int64)])
        if rows.dtype == np.uint16:
            return (rows.astype(np.uint32) << 16).view(np.float32)
        return rows.astype(np.float32, copy=False)

    def encode(self, mel: np.ndarray) -> np.ndarray:
        """Encoder tokens ``[n, out]`` of one utterance's log-Mel ``[mels, frames]``."""
        outs = []
        for win in self.geometry.windows(mel.shape[1]):
            k = min((k for k in self.windows if k >= win.chunks), default=None)
            if k is None:
                raise RkspeechError(f"the plan's encoder windows ({sorted(self.windows)} chunks) cannot hold a "
                                    f"window of {win.chunks}; rebuild with a larger window")
            x, m1, m2, key = self.geometry.window_inputs(mel, win, chunks=k)
            y = self.windows[k].infer({"chunks": x, "mask1": m1, "mask2": m2, "key_mask": key})["features"]
            outs.append(np.asarray(y[:win.tokens], dtype=np.float32))
        return np.concatenate(outs)

    def generate(self, prompt_ids: list[int], audio_at: int, features: np.ndarray, max_new_tokens: int) -> list[int]:
        """Greedy ids after the prompt (end token included when generated)."""
        need = len(prompt_ids) + max_new_tokens
        if len(prompt_ids) + 1 > self.plan.capacity:
            raise RkspeechError(f"the prompt ({len(prompt_ids)} positions) does not fit the decoder's capacity "
                                f"({self.plan.capacity}); shorten the audio or the context, or rebuild with a "
                                "larger --capacity")
        x = self.embeddings(prompt_ids)
        x[audio_at:audio_at + features.shape[0]] = features
        self.talker.start(need)
        h = self.talker.forward(x)
        out: list[int] = []
        stops = set(self.plan.eos_token_ids)
        while len(out) < max_new_tokens:
            logits = self.head.infer({"hidden": h[None].astype(np.float32)})["logits"][0]
            tok = int(np.argmax(logits))
            out.append(tok)
            if tok in stops or self.talker.length >= self.plan.capacity:
                break
            h = self.talker.forward(self.embeddings([tok]))
        return out

    def fitting_seconds(self, max_new_tokens: int, context: str = "", language: str | None = None) -> int:
        """Whole seconds of audio whose tokens fit the decoder beside the prompt and the output: 13
        encoder tokens a second, a started second counted whole."""
        free = self.plan.capacity - max_new_tokens - self.prompts.overhead(context, language)
        return int(free // 13) - 1

    def piece_seconds(self, audio_s: float, max_new_tokens: int, context: str = "", language: str | None = None) -> float:
        """Where the official cut (``split_long_audio``) is asked to go: 1200 s, or less where the
        decoder holds less -- then :data:`~rkspeech.models.qwen3_asr.long_audio.SEARCH_SECONDS`
        less again, as a cut moves up to that far on to the quietest point (400 s of noise once
        made a 1,072-position prompt for a 1,024 cache)."""
        from rkspeech.models.qwen3_asr.long_audio import MAX_SECONDS, SEARCH_SECONDS

        fits = self.fitting_seconds(max_new_tokens, context, language)
        if audio_s <= fits:  # it all fits: cut where the official cuts (only past 1200 s)
            return float(MAX_SECONDS)
        if fits - SEARCH_SECONDS < 1:
            raise RkspeechError(f"the decoder's capacity ({self.plan.capacity}) leaves room for {max(fits, 0)} s of audio "
                                f"beside {max_new_tokens} new tokens and the prompt; {audio_s:.1f} s must be cut into "
                                "pieces, which needs more: lower --max-new-tokens, shorten the context, or rebuild "
                                "with a larger --capacity")
        return min(float(MAX_SECONDS), float(fits - SEARCH_SECONDS))

    # -- a request --------------------------------------------------------------------------

    def iter_pieces(self, wave: np.ndarray, *, context: str = "", language: str | None = None,
                    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS):
        """Each piece of the audio as it is transcribed (:class:`Piece`, in order); the pieces'
        texts joined are the transcript (:meth:`transcribe`).  ``language``: a name or ISO code
        (``models.qwen3_asr.languages``), None to detect."""
        from rkspeech.models.qwen3_asr.features import log_mel
        from rkspeech.models.qwen3_asr.languages import normalize_language
        from rkspeech.models.qwen3_asr.long_audio import split_long_audio
        from rkspeech.models.qwen3_asr.transcript_text import decode_text, parse_output

        if max_new_tokens < 1:
            raise RkspeechError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        forced = normalize_language(language) if language else None
        wave = np.asarray(wave, dtype=np.float32)
        if wave.size == 0:
            raise RkspeechError("the audio is empty")
        limit = self.piece_seconds(wave.size / 16000, max_new_tokens, context, forced)
        for piece, offset in split_long_audio(wave, max_seconds=limit):
            mel = log_mel(piece)
            if mel.shape[1] < 1:
                raise RkspeechError("the audio is shorter than one mel frame (10 ms)")
            t0 = time.perf_counter()
            feats = self.encode(mel)
            t1 = time.perf_counter()
            prompt = self.prompts.build(feats.shape[0], context=context, language=forced)
            out = self.generate(prompt.ids.tolist(), prompt.audio_start, feats, max_new_tokens)
            self.timing["encoder_s"] += t1 - t0
            self.timing["decoder_s"] += time.perf_counter() - t1
            lang, text = parse_output(decode_text(self.prompts.tokenizer, out), forced)
            yield Piece(float(offset), piece.size / 16000, lang, text, out)

    def transcribe(self, wave: np.ndarray, *, context: str = "", language: str | None = None,
                   max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, progress: str | None = None) -> ASRResult:
        """The whole transcript; ``progress``: a description for a line every few seconds with the
        audio transcribed so far (``core.progress.periodic``: an hour is ~100 pieces at the
        default capacity, minutes of work)."""
        from rkspeech.core.progress import periodic
        from rkspeech.models.qwen3_asr.transcript_text import merge_languages

        t0 = time.perf_counter()
        tick = periodic(progress) if progress else None
        total = np.asarray(wave).size / 16000
        pieces = []
        for piece in self.iter_pieces(wave, context=context, language=language, max_new_tokens=max_new_tokens):
            pieces.append(piece)
            if tick is not None:
                tick(f"{piece.offset_s + piece.seconds:.0f} s of {total:.0f} s of audio transcribed")
        return ASRResult(merge_languages(p.language for p in pieces), "".join(p.text for p in pieces),
                         [p.token_ids for p in pieces], time.perf_counter() - t0, np.asarray(wave).size / 16000)

    def reset_timing(self) -> None:
        """Zero the seconds spent in the encoder windows and in the decoder (prefill, steps, head)."""
        self.timing = {"encoder_s": 0.0, "decoder_s": 0.0}

    def close(self) -> None:
        for r in self._runners:
            r.close()
        self._runners = []
        talker = getattr(self, "talker", None)
        if talker is not None:
            talker.close()
            self.talker = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
