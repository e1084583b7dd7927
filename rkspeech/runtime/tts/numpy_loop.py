"""Text to codec frames without torch: ``models.qwen3_tts.generate.HostModel`` over the numpy host.

When a plan places both the talker and the code predictor as graphs, the host's work is the
prompt, the codec head, the logit rules and sampling, and the code predictor's input projection,
embeddings and heads.  :class:`NumpyTTSModel` runs the one generation loop (``HostModel``:
``models.qwen3_tts.prompt`` and ``models.qwen3_tts.loop``) over ``models.qwen3_tts.numpy_host
.NumpyHost`` on ``host_weights.HostWeights`` (only those tensors are read) and the ``tokenizers``
text tokenizer, and calls the graph backends (``GraphTalker`` with the numpy RoPE recipe,
``CodebookCodePredictor`` over the code-predictor step graph, or ``GraphCodePredictor`` over the
frame graph; opened by ``runtime.tts.open_stages.open_stage_backends``).  Voice cloning runs the
plan's speaker encoder and speech encoder graphs (``runtime.tts.clone_encoders``); a plan built
before them runs the speaker encoder in torch, imported lazily (a missing torch is one line).

Greedy codes are those of the torch host over the same graphs (``tests/runtime/test_numpy_loop.py``);
floats differ where numpy and torch round differently (``numpy_host``; docs/numpy-runtime.md).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.qwen3_tts.generate import HostModel
from rkspeech.models.qwen3_tts.sampling import GenerationOptions


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
class NumpyTTSModel(HostModel):
    """A Qwen3-TTS model root's host side in numpy; its talker and code predictor backends must be
    graphs (``use_backends`` / ``open_stages.open_stage_backends``).  The interface ``Speaker`` uses:
    ``generate_frames``, ``last_timing``, ``last_margins``, ``talker_backend``, ``code_predictor_backend``,
    ``speakers``, ``languages``, ``variant``, ``files``."""

    def __init__(self, cfg, weights, tokenizer, files):
        from rkspeech.models.qwen3_tts.numpy_host import NumpyHost

        self.cfg, self.weights, self.tokenizer, self.files = cfg, weights, tokenizer, files
        self.ops = NumpyHost(weights, cfg)
        self.talker_backend = self.code_predictor_backend = None
        self.last_timing: dict = {}
        self.last_margins: list = []
        self._speaker_encoder = None

    @classmethod
    def load(cls, model_dir) -> NumpyTTSModel:
        from rkspeech.models.qwen3_tts.text_tokenizer import TextTokenizer
        from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config, resolve_model_root
        from rkspeech.runtime.tts.host_weights import HostWeights

        files = resolve_model_root(model_dir)
        cfg = read_tts_config(files)
        return cls(cfg, HostWeights(files.weights, cfg), TextTokenizer(files.root), files)

    def speaker_embedding(self, audio: np.ndarray) -> np.ndarray:
        """The x-vector of mono float32 24 kHz audio: the plan's speaker encoder graph
        (``runtime.tts.clone_encoders``, no torch) when it holds one, else the torch module
        (plans built before the graph existed); neither is one line."""
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or audio.size < 2048:
            raise RkspeechError("reference audio must be mono float32 at 24 kHz, at least 2048 samples")
        if self.cfg.tts_model_type != "base":
            raise RkspeechError(f"this {self.variant} checkpoint has no speaker encoder; voice clone needs a Base model")
        if self.speaker_encoder_backend is not None:
            return self.speaker_encoder_backend(audio)
        try:
            import torch
        except ImportError:
            raise RkspeechError("voice cloning (--ref-audio) needs the speaker encoder graph, which this plan does not "
                                "hold, or torch, which is not installed here; rebuild the plan with rkspeech build "
                                "qwen3-tts on this Base model (it builds the graph), or pip install torch") from None
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

    def reference_codes(self, audio: np.ndarray) -> np.ndarray:
        """``[T, 16]`` codes of the reference audio (in-context cloning): the plan's speech encoder graph."""
        if self.speech_encoder_backend is None:
            raise RkspeechError("in-context cloning (--ref-text) runs the speech tokenizer's encoder graph, which this "
                                "plan does not hold; rebuild the plan with rkspeech build qwen3-tts on this Base model, "
                                "or use --host-loop torch, or drop --ref-text to clone from the x-vector alone")
        return self.speech_encoder_backend(audio)

    def build_prompt(self, text: str, **kw):
        """``(prompt [L, Ht], trailing text [n, Ht], tts_pad [1, Ht])`` float32 (``prompt_rows``)."""
        return self.prompt_rows(text, **kw)

    # -- generation ---------------------------------------------------------------------------
    def generate_frames(self, text: str, **kw) -> Iterator[np.ndarray]:
        """``HostModel.generate_frames`` (frames ``int64 [G]``) once both stages are graphs."""
        if self.talker_backend is None or self.code_predictor_backend is None:
            raise RkspeechError("the numpy host loop runs the talker and the code predictor as graphs; open them "
                                "first (a plan from rkspeech build qwen3-tts)")
        return super().generate_frames(text, **kw)

    def _frames(self, prompt, trailing, pad, steps: int, opts: GenerationOptions) -> Iterator[np.ndarray]:
        with blas_one_thread():
            yield from super()._frames(prompt, trailing, pad, steps, opts)
