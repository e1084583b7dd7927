"""Text to codec frames without torch: the host's part of ``models.qwen3_tts.generate`` in numpy.

When a plan places both the talker and the code predictor as graphs, the host's work is the
prompt (text embedding + projection, codec embeddings, speaker and language tokens), the codec
head, the logits controls and sampling, and the code predictor's input projection, embeddings
and heads.  :class:`NumpyTTSModel` does all of it in numpy over ``host_weights.HostWeights`` (only
those tensors are read) and the ``tokenizers`` text tokenizer, and calls the graph backends
(``GraphTalker`` with the numpy RoPE recipe, ``NumpyCodebookCodePredictor`` over the
code-predictor step graph, or ``GraphCodePredictor`` over the frame graph; opened by
``runtime.tts.numpy_stages.open_numpy_stages``).  torch is imported
only for voice cloning's speaker encoder (``--ref-audio``), lazily, and a missing torch is one
line saying so.

The prompt, the order of the embedding sums and the loop are ``TTSModel``'s, line for line, so
greedy codes are those of the torch host path over the same graphs (``tests/test_numpy_loop.py``).
Bit for bit the two differ where numpy and torch round differently: matrix products (BLAS
summation order: 50-90 % of a projection's outputs differ in the last bits), softmax, and RoPE
(``stepgraph.host.numpy_rope_cos_sin``); docs/numpy-runtime.md has the measured effect.

Sampling (:func:`choose_token`) applies qwen-tts' controls in the torch code's order
(repetition penalty, then temperature, top-k, top-p) and draws from a
``numpy.random.Generator`` (PCG64, seeded by ``GenerationOptions.seed``).  torch.multinomial's
stream cannot be reproduced from numpy, so sampled codes for a seed differ from the torch
path's; their distribution is the same (a statistical test compares the two samplers).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.generate import MIN_NEW_TOKENS, SUPPRESSED_TAIL, RequestChecks
from rkspeech.models.qwen3_tts.sampling import GenerationOptions

NEG_INF = np.float32(-np.inf)


# -- numerics (float32, in the torch code's order) ----------------------------------------------
def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
    y = np.matmul(x, w.T)
    return y + b if b is not None else y


def silu(x: np.ndarray) -> np.ndarray:
    return x / (np.float32(1.0) + np.exp(-x))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def penalize(logits: np.ndarray, history: list[int], penalty: float) -> np.ndarray:
    """``sampling.penalize`` in numpy: logits of tokens seen so far divided (positive) or
    multiplied (negative) by ``penalty``."""
    if penalty == 1.0 or not history:
        return logits
    idx = np.asarray(history, dtype=np.int64)
    score = logits[idx]
    out = logits.copy()
    out[idx] = np.where(score < 0, score * np.float32(penalty), score / np.float32(penalty))
    return out


def warped_probs(logits: np.ndarray, temperature: float, top_k: int, top_p: float) -> np.ndarray:
    """The distribution ``choose_token`` samples from: HF's temperature, top-k, top-p warpers
    (``sampling.choose_token``'s order), then softmax; float32 ``[V]``."""
    scores = logits / np.float32(temperature) if temperature != 1.0 else logits.copy()
    if top_k:
        k = min(top_k, scores.shape[-1])
        kth = np.partition(scores, scores.shape[-1] - k)[scores.shape[-1] - k]
        scores = np.where(scores < kth, NEG_INF, scores)
    if top_p < 1.0:
        order = np.argsort(scores, kind="stable")
        cum = np.cumsum(softmax(scores[order]))
        remove = cum <= (1 - top_p)
        remove[-1] = False
        drop = np.zeros_like(remove)
        drop[order] = remove
        scores = np.where(drop, NEG_INF, scores)
    return softmax(scores)


def choose_token(logits: np.ndarray, sample: bool, temperature: float, top_k: int, top_p: float,
                 rng: np.random.Generator) -> int:
    """Argmax, or one draw from ``warped_probs`` by inverse CDF (one ``rng.random()`` a draw)."""
    if not sample:
        return int(np.argmax(logits))
    probs = warped_probs(logits, temperature, top_k, top_p).astype(np.float64)
    cdf = np.cumsum(probs)
    return int(min(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"), len(cdf) - 1))


def blas_one_thread():
    """numpy's BLAS on one thread while a generation runs (``threadpoolctl``, when installed).
    The loop's products are matrix-vector (a frame's heads: 15 of H x 2048); OpenBLAS spreads them
    over its worker threads, which then spin between calls and take the cores from the graph
    runtime: on the reduced plan (2 shared cores) the code predictor took 2.08 s with the default
    BLAS threads against 0.97 s on one (3 texts x 40 frames, benchmarks/bench_numpy_loop.py).
    Process-wide while the generation runs (OpenBLAS has one setting), restored when it ends."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


# -- the model ------------------------------------------------------------------------------------
class NumpyTTSModel(RequestChecks):
    """A Qwen3-TTS model root's host side in numpy; its talker and code predictor backends must be
    graphs (``use_backends`` / ``numpy_stages.open_numpy_stages``).  The interface ``Speaker`` uses:
    ``generate_frames``, ``last_timing``, ``talker_backend``, ``code_predictor_backend``,
    ``speakers``, ``languages``, ``variant``, ``files``."""

    host = "numpy"

    def __init__(self, cfg, weights, tokenizer, files):
        self.cfg, self.weights, self.tokenizer, self.files = cfg, weights, tokenizer, files
        t = cfg.talker
        self._suppress = np.array([i for i in range(t.vocab_size - SUPPRESSED_TAIL, t.vocab_size)
                                   if i != t.codec_eos_token_id], dtype=np.int64)
        self.talker_backend = self.code_predictor_backend = None
        self.last_timing: dict = {}
        self._speaker_encoder = None

    @classmethod
    def load(cls, model_dir) -> NumpyTTSModel:
        from rkspeech.models.qwen3_tts.text_tokenizer import TextTokenizer
        from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root
        from rkspeech.runtime.tts.host_weights import HostWeights

        files = resolve_model_root(model_dir)
        cfg = read_tts_config(files)
        return cls(cfg, HostWeights(files.weights, cfg), TextTokenizer(files.root), files)

    # -- embeddings ---------------------------------------------------------------------------
    def text(self, ids) -> np.ndarray:
        """``talker.text``: projected text embeddings ``[n, Ht]``."""
        w = self.weights
        x = w.text_embedding.rows(ids)
        return linear(silu(linear(x, w.fc1_w, w.fc1_b)), w.fc2_w, w.fc2_b)

    def codec(self, ids) -> np.ndarray:
        """``talker.codec``: codec embeddings ``[n, Ht]``."""
        return self.weights.codec_embedding[np.asarray(ids, dtype=np.int64).reshape(-1)]

    def speaker_embedding(self, audio: np.ndarray) -> np.ndarray:
        """The x-vector of mono float32 24 kHz audio: the speaker encoder runs in torch (the one
        part of text to speech that still needs it)."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or audio.size < 2048:
            raise RkspeechError("reference audio must be mono float32 at 24 kHz, at least 2048 samples")
        if self.cfg.tts_model_type != "base":
            raise RkspeechError(f"this {self.variant} checkpoint has no speaker encoder; voice clone needs a Base model")
        try:
            import torch
        except ImportError:
            raise RkspeechError("voice cloning (--ref-audio) runs the speaker encoder in torch, which is not "
                                "installed here; install torch (pip install torch) for cloning, or use a "
                                "custom-voice or voice-design model (they need no torch)") from None
        from rkspeech.models.qwen3_tts.speaker_encoder import SpeakerEncoder, mel_spectrogram

        if self._speaker_encoder is None:
            enc = SpeakerEncoder(self.cfg.speaker_encoder)
            f, prefix = self.weights.file, "speaker_encoder."
            state = {k[len(prefix):]: torch.from_numpy(f.get(k)) for k in f.keys() if k.startswith(prefix)}
            try:
                enc.load_state_dict(state, strict=True)
            except RuntimeError as exc:
                raise RkspeechError(f"{f.path}: the speaker encoder's weights do not load ({str(exc).splitlines()[0]})"
                                    ) from None
            self._speaker_encoder = enc.eval()
        with torch.no_grad():
            return self._speaker_encoder(mel_spectrogram(audio, self.cfg.speaker_encoder.sample_rate)).numpy()

    # -- prompt (TTSModel.build_prompt, in numpy) --------------------------------------------
    def build_prompt(self, text: str, *, speaker=None, language=None, instruct=None, ref_audio=None,
                     ref_text: str | None = None, ref_codes: np.ndarray | None = None,
                     text_in_prompt: bool | None = None):
        """``(prompt [L, Ht], trailing text [n, Ht], tts_pad [1, Ht])`` float32."""
        lang = self._check_request(text, speaker, language, instruct, ref_audio)
        icl_codes = self._check_icl(ref_audio, ref_text, ref_codes)
        cfg, t = self.cfg, self.cfg.talker
        if text_in_prompt is None:
            text_in_prompt = cfg.default_text_in_prompt
        ids = self.prompt_ids(text)
        parts = []
        if instruct:
            parts.append(self.text(self._ids(f"<|im_start|>user\n{instruct}<|im_end|>\n")))
        if ref_audio is not None:
            speaker_embed = self.speaker_embedding(ref_audio)
        elif speaker:
            speaker_embed = self.codec([t.spk_id[speaker.lower()]])[0]
        else:
            speaker_embed = None
        language_id = self._language_id(lang, speaker)
        bos, eos, pad = np.split(self.text([cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id]), 3)
        if language_id is None:
            control = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
        else:
            control = [t.codec_think_id, t.codec_think_bos_id, language_id, t.codec_think_eos_id]
        codec = [self.codec(control)]
        if speaker_embed is not None:
            codec.append(np.asarray(speaker_embed, np.float32).reshape(1, -1))
        codec.append(self.codec([t.codec_pad_id, t.codec_bos_id]))
        codec = np.concatenate(codec)
        role = self.text(ids[:3])
        tags = np.concatenate((np.repeat(pad, codec.shape[0] - 2, axis=0), bos)) + codec[:-1]
        body = ids[3:-5]
        if icl_codes is not None:
            prompt, trailing = self._icl_prompt(body, ref_text, icl_codes, pad, eos, text_in_prompt)
            prompt = np.concatenate((role, tags, prompt))
        elif text_in_prompt:
            text_part = np.concatenate((self.text(body), eos)) + self.codec([t.codec_pad_id] * (len(body) + 1))
            prompt = np.concatenate((role, tags, text_part, pad + self.codec([t.codec_bos_id])))
            trailing = pad
        else:
            prompt = np.concatenate((role, tags, self.text(ids[3:4]) + codec[-1:]))
            trailing = np.concatenate((self.text(ids[4:-5]), eos))
        parts.append(prompt)
        return np.concatenate(parts), trailing, pad

    def _icl_prompt(self, body, ref_text, codes, pad, eos, text_in_prompt):
        t, w = self.cfg.talker, self.weights
        ref_ids = self._ids(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n")[3:-2]
        text = np.concatenate((self.text(ref_ids + body), eos))
        frames = np.stack([self.codec(codes[:, 0])]
                          + [w.cp_embedding[i - 1][codes[:, i]] for i in range(1, codes.shape[1])], axis=1)
        codec = np.concatenate((self.codec([t.codec_bos_id]), frames.sum(1)))
        n_text, n_codec = text.shape[0], codec.shape[0]
        if text_in_prompt:
            return np.concatenate((text + self.codec([t.codec_pad_id] * n_text), codec + pad)), pad
        if n_text > n_codec:
            return text[:n_codec] + codec, text[n_codec:]
        return np.concatenate([text] + [pad] * (n_codec - n_text)) + codec, pad

    # -- generation ---------------------------------------------------------------------------
    def generate_frames(self, text: str, *, speaker: str | None = None, language: str | None = None,
                        instruct: str | None = None, ref_audio: np.ndarray | None = None,
                        ref_text: str | None = None, ref_codes: np.ndarray | None = None,
                        options: GenerationOptions | None = None) -> Iterator[np.ndarray]:
        """``TTSModel.generate_frames`` in numpy (frames ``int64 [G]``)."""
        if self.talker_backend is None or self.code_predictor_backend is None:
            raise RkspeechError("the numpy host loop runs the talker and the code predictor as graphs; open them "
                                "first (a plan from rkspeech build qwen3-tts)")
        opts = self._check_options(options)
        prompt, trailing, pad = self.build_prompt(text, speaker=speaker, language=language, instruct=instruct,
                                                  ref_audio=ref_audio, ref_text=ref_text, ref_codes=ref_codes,
                                                  text_in_prompt=opts.text_in_prompt)
        steps = self._check_length(prompt.shape[0], opts)
        return self._loop(prompt, trailing, pad, steps, opts)

    def _loop(self, prompt, trailing, pad, steps: int, opts: GenerationOptions) -> Iterator[np.ndarray]:
        with blas_one_thread():
            yield from self._frames(prompt, trailing, pad, steps, opts)

    def _frames(self, prompt, trailing, pad, steps: int, opts: GenerationOptions) -> Iterator[np.ndarray]:
        t, w = self.cfg.talker, self.weights
        stack, predictor = self.talker_backend, self.code_predictor_backend
        rng = np.random.default_rng(opts.seed)
        history: list[int] = []
        cp_hist: list[int] = []

        def choose(j: int, lg) -> int:
            if j == 1:
                cp_hist.clear()
            lg = penalize(np.asarray(lg, np.float32), cp_hist, opts.subtalker_repetition_penalty)
            code = choose_token(lg, opts.subtalker_dosample, opts.subtalker_temperature, opts.subtalker_top_k,
                                opts.subtalker_top_p, rng)
            cp_hist.append(code)
            return code

        clock = time.perf_counter
        tm = self.last_timing = {"talker_s": 0.0, "talker_calls": 0, "code_predictor_s": 0.0, "code_predictor_calls": 0}

        def talk(x):
            t0 = clock()
            out = np.asarray(stack.forward(x), np.float32).reshape(-1)
            tm["talker_s"] += clock() - t0
            tm["talker_calls"] += 1
            return out

        stack.start(prompt.shape[0] + steps)
        hidden = talk(prompt)
        for step in range(steps):
            logits = linear(hidden, w.codec_head)
            logits = penalize(logits, history, opts.repetition_penalty)
            if step < MIN_NEW_TOKENS:
                logits[t.codec_eos_token_id] = NEG_INF
            logits[self._suppress] = NEG_INF
            token = choose_token(logits, opts.do_sample, opts.temperature, opts.top_k, opts.top_p, rng)
            if token == t.codec_eos_token_id or step == steps - 1:
                self._ended(step, token == t.codec_eos_token_id)
                return
            history.append(token)
            first = w.codec_embedding[token]
            t0 = clock()
            codes = predictor.frame(hidden, first, choose)
            tm["code_predictor_s"] += clock() - t0
            tm["code_predictor_calls"] += 1
            yield np.asarray([token, *codes], dtype=np.int64)
            embeds = np.stack([first] + [w.cp_embedding[j - 1][c] for j, c in enumerate(codes, start=1)])
            text_in = trailing[step:step + 1] if step < trailing.shape[0] else pad
            hidden = talk(embeds.sum(0, keepdims=True) + text_in)
