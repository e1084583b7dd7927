"""Text to codec frames: our own Qwen3-TTS generation (custom voice, voice design, voice clone).

``TTSModel.load(model_dir)`` reads a model root (``tts_checkpoint``); ``generate_frames`` yields one
frame at a time, a ``numpy.int64`` array of shape ``[num_code_groups]`` (codebook 0 from the talker,
the rest from the code predictor), ready for ``StreamingVocoder``; ``generate_codes`` returns all
of them as ``[T, num_code_groups]``.

:class:`HostModel` is what the two host loops share: the checks of a request, the prompt
(``prompt.prompt_rows``) and the frame loop (``loop.run_frames``), over the model's host backend
``self.ops``.  :class:`TTSModel` is that over torch (``torch_host.TorchHost``), the reference;
``runtime.tts.numpy_loop.NumpyTTSModel`` the same over numpy, without torch.

With the torch host and backends, codes follow qwen-tts 0.1.1 ``Qwen3TTSForConditionalGeneration
.generate`` (the prompt and the loop are described in ``prompt`` and ``loop``): greedy codes are
identical, and so are sampled codes for the same seed (qwen-tts seeded with
``torch.manual_seed(s)``, ours with ``GenerationOptions(seed=s)``: the same draws in the same order
from bitwise-equal distributions; ``tests/models/test_tts_generate.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.core.text import check_text
from rkspeech.models.qwen3_tts.loop import FrameSampler, TalkerLogitRules, new_timing, run_frames
from rkspeech.models.qwen3_tts.prompt import PromptRequest, prompt_rows
from rkspeech.models.qwen3_tts.sampling import GenerationOptions


class HostModel:
    """What a loaded model root offers, the checks of a request, its prompt and its frames,
    torch-free: shared by ``TTSModel`` (torch host) and ``runtime.tts.numpy_loop.NumpyTTSModel``
    (numpy host).  Needs ``self.cfg`` (``TTSConfig``), ``self.tokenizer``, ``self.ops``
    (``loop.HostOps``), ``self.speaker_embedding(audio)``, ``self.reference_codes(audio)`` (in-context
    cloning's codes of the reference), ``self.talker_backend`` and ``self.code_predictor_backend``."""

    #: voice cloning's graphs when a plan holds them (``runtime.tts.clone_encoders``; the numpy host runs them)
    speaker_encoder_backend = speech_encoder_backend = None

    # -- what the checkpoint offers ------------------------------------------------------------
    @property
    def host(self) -> str:
        """Which host runs the loop: ``numpy`` or ``torch`` (``Speaker``'s and the gate's ``host_loop``)."""
        return self.ops.name

    @property
    def variant(self) -> str:
        return self.cfg.variant

    @property
    def speakers(self) -> list[str]:
        return self.cfg.speakers

    @property
    def languages(self) -> list[str]:
        return self.cfg.languages

    @property
    def num_code_groups(self) -> int:
        return self.cfg.talker.num_code_groups

    # -- prompt ----------------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def _check_request(self, text, speaker, language, instruct, ref_audio, voice=None):
        check_text(text)
        if voice is not None:
            if ref_audio is not None:
                raise RkspeechError(f"a saved voice ({voice.name}) and --ref-audio both name the voice; give one")
            ref_audio = voice.x_vector  # stands for the recording below: a Base model's reference is given
        if instruct:
            check_text(instruct, "the instruct text")
        kind = self.cfg.tts_model_type
        if kind == "custom_voice":
            if ref_audio is not None:
                raise RkspeechError("this custom-voice checkpoint cannot clone a voice (--ref-audio needs a Base model)")
            if not speaker:
                raise RkspeechError(f"this custom-voice checkpoint needs a speaker; one of: {', '.join(self.speakers)}")
            if instruct and self.cfg.tts_model_size in ("0b6", ""):
                raise RkspeechError("the 0.6B custom-voice checkpoint takes no instruct text (qwen-tts drops it); "
                                    "omit --instruct or use the 1.7B model")
        elif kind == "voice_design":
            if speaker or ref_audio is not None:
                raise RkspeechError("this voice-design checkpoint takes an instruct text describing the voice, "
                                    "not --speaker or --ref-audio")
            if not instruct:
                raise RkspeechError("this voice-design checkpoint needs an instruct text describing the voice")
        else:
            if speaker or instruct:
                raise RkspeechError("this Base checkpoint clones a voice from --ref-audio; it takes no --speaker "
                                    "or --instruct (those need custom-voice / voice-design checkpoints)")
            if ref_audio is None:
                raise RkspeechError("this Base checkpoint needs reference audio to clone (--ref-audio WAV)")
        if speaker and speaker.lower() not in self.cfg.talker.spk_id:
            raise RkspeechError(f"unknown speaker {speaker!r}; this checkpoint has: {', '.join(self.speakers)}")
        lang = (language or "auto").lower()
        if lang not in self.languages:
            raise RkspeechError(f"unknown language {language!r}; choose one of: {', '.join(self.languages)}")
        return lang

    def _check_icl(self, ref_audio, ref_text, ref_codes, voice=None):
        if voice is not None:
            if ref_text is not None or ref_codes is not None:
                raise RkspeechError(f"the saved voice {voice.name} holds its own reference; give no --ref-text")
            return voice.ref_codes.astype(np.int64) if voice.in_context else None
        if ref_text is None and ref_codes is None:
            return None
        if ref_audio is None:
            raise RkspeechError("in-context cloning (ref_text + ref_codes) also needs the reference audio (--ref-audio) "
                                "for the speaker embedding")
        if not ref_text or not str(ref_text).strip():
            raise RkspeechError("in-context cloning needs the reference audio's transcript (ref_text) with its codes")
        if ref_codes is None:  # the speech tokenizer's encoder gives them (qwen-tts create_voice_clone_prompt)
            ref_codes = self.reference_codes(np.asarray(ref_audio, dtype=np.float32))
        codes = np.asarray(ref_codes)
        g = self.num_code_groups
        if codes.ndim != 2 or codes.shape[1] != g or codes.shape[0] < 1 or not np.issubdtype(codes.dtype, np.integer):
            raise RkspeechError(f"ref_codes must be an integer array [T, {g}], got {codes.dtype} {list(codes.shape)}")
        if codes.min() < 0 or codes.max() >= self.cfg.code_predictor.vocab_size:
            raise RkspeechError(f"ref_codes hold ids outside 0..{self.cfg.code_predictor.vocab_size - 1}")
        return codes.astype(np.int64)

    def _check_options(self, options):
        """The options to run (default ``GenerationOptions()``), checked; sampling code-predictor
        options are refused when the code predictor is a greedy graph."""
        opts = options or GenerationOptions()
        opts.check()
        if getattr(self.code_predictor_backend, "greedy_only", False) and (
                opts.subtalker_dosample or opts.subtalker_repetition_penalty != 1.0):
            raise RkspeechError(f"the code predictor runs as a greedy graph ({self.code_predictor_backend.name}): "
                                "it cannot sample; use greedy code-predictor options (subtalker_dosample=False, "
                                "rkspeech speak --greedy or --subtalker-greedy)")
        return opts

    def prompt_ids(self, text: str) -> list[int]:
        """The chat template around ``text`` as token ids: the role (3 ids), the text's own ids
        (``[3:-5]``), the closing tags (5 ids)."""
        ids = self._ids(f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n")
        if len(ids) < 9:
            raise RkspeechError("the text tokenizer did not split the chat template as expected (need at least 9 "
                                "tokens around the text); check tokenizer_config.json's special tokens")
        return ids

    def _language_id(self, lang: str, speaker: str | None) -> int | None:
        """The codec language token of a checked request (a dialect speaker's own for chinese/auto)."""
        t = self.cfg.talker
        language_id = None if lang == "auto" else t.codec_language_id[lang]
        if lang in ("chinese", "auto") and speaker and t.spk_is_dialect.get(speaker.lower(), False) is not False:
            language_id = t.codec_language_id[t.spk_is_dialect[speaker.lower()]]
        return language_id

    def _check_length(self, prompt_len: int, opts) -> int:
        """Talker steps to run; refuses a prompt longer than the talker's context.  A talker graph
        holds fewer positions (its KV capacity, fixed at export): the utterance ends there as it
        would at ``max_new_tokens``, rather than failing mid-stream after audio went out."""
        limit = self.cfg.talker.max_position_embeddings
        capacity = getattr(getattr(self, "talker_backend", None), "capacity", None)
        where = f"the talker's context is {limit}"
        if isinstance(capacity, int) and capacity < limit:
            limit, where = capacity, (f"the talker graph holds {capacity} positions (rebuild with a larger "
                                      "--talker-capacity)")
        if prompt_len >= limit:
            raise RkspeechError(f"the text is too long: its prompt takes {prompt_len} positions, {where}; "
                                "split it into shorter sentences")
        steps = min(opts.max_new_tokens, limit - prompt_len)
        # an utterance that runs to this limit is cut, not ended: said by _ended (last_cut)
        self.last_cut, self._cut_reason = None, (
            f"{where}, the prompt took {prompt_len}" if steps < opts.max_new_tokens else None)
        return steps

    def _ended(self, frames: int, by_eos: bool) -> None:
        """The loop ended after ``frames`` frames; when the talker did not end the utterance but
        the positions ran out, ``last_cut`` says so in one line (it cut utterances silently:
        issue 37), for the caller to print and report."""
        reason = getattr(self, "_cut_reason", None)
        if not by_eos and reason:
            self.last_cut = (f"the utterance was cut after {frames} frames ({frames * 0.08:.2f} s): {reason}; "
                             "split the text into shorter sentences")

    def prompt_request(self, text: str, *, speaker=None, language=None, instruct=None, ref_audio=None,
                       ref_text: str | None = None, ref_codes: np.ndarray | None = None,
                       voice=None) -> PromptRequest:
        """A request checked and turned into the prompt's token-level parts; ``voice``: a saved
        clone prompt (``runtime.tts.saved_voices.SavedVoice``) instead of ``ref_audio`` / ``ref_text``."""
        lang = self._check_request(text, speaker, language, instruct, ref_audio, voice)
        icl_codes = self._check_icl(ref_audio, ref_text, ref_codes, voice)
        if voice is not None:
            speaker_embed, ref_text = voice.x_vector, voice.ref_text
        elif ref_audio is not None:
            speaker_embed = self.speaker_embedding(ref_audio)
        elif speaker:
            speaker_embed = self.ops.codec([self.cfg.talker.spk_id[speaker.lower()]])[0]
        else:
            speaker_embed = None
        icl = None
        if icl_codes is not None:
            icl = (self._ids(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n")[3:-2], icl_codes)
        return PromptRequest(ids=self.prompt_ids(text), speaker_embed=speaker_embed,
                             instruct_ids=self._ids(f"<|im_start|>user\n{instruct}<|im_end|>\n") if instruct else None,
                             language_id=self._language_id(lang, speaker), icl=icl)

    def prompt_rows(self, text: str, *, text_in_prompt: bool | None = None, **request):
        """``(prompt [L, Ht], trailing text [n, Ht], tts_pad [1, Ht])`` in the host's arrays
        (``prompt.prompt_rows``); ``request``: ``prompt_request``'s keywords."""
        if text_in_prompt is None:
            text_in_prompt = self.cfg.default_text_in_prompt
        return prompt_rows(self.ops, self.cfg, self.prompt_request(text, **request), text_in_prompt)

    def generate_frames(self, text: str, *, speaker: str | None = None, language: str | None = None,
                        instruct: str | None = None, ref_audio: np.ndarray | None = None,
                        ref_text: str | None = None, ref_codes: np.ndarray | None = None,
                        options: GenerationOptions | None = None, voice=None) -> Iterator[np.ndarray]:
        """Yield frames ``int64 [num_code_groups]`` as they are generated (``loop.run_frames``).

        ``speaker`` (custom voice), ``instruct`` (voice design; custom voice at 1.7B), ``ref_audio``
        (mono float32 24 kHz; Base: clone from the x-vector), plus ``ref_text`` (its transcript) for
        in-context cloning, with ``ref_codes`` (``[T, 16]`` codes of ``ref_audio``; None: computed by
        ``reference_codes``, the speech tokenizer's encoder).  The frames continue the
        reference; they do not repeat it.  ``voice``: a saved clone prompt in place of the reference."""
        opts = self._check_options(options)
        prompt, trailing, pad = self.prompt_rows(text, speaker=speaker, language=language, instruct=instruct,
                                                 ref_audio=ref_audio, ref_text=ref_text, ref_codes=ref_codes,
                                                 voice=voice, text_in_prompt=opts.text_in_prompt)
        steps = self._check_length(prompt.shape[0], opts)
        return self._frames(prompt, trailing, pad, steps, opts)

    def _frames(self, prompt, trailing, pad, steps: int, opts: GenerationOptions) -> Iterator[np.ndarray]:
        self.last_timing = timing = new_timing()
        sampler = FrameSampler(self.ops, opts)
        self.last_margins = sampler.margins
        frames, by_eos = yield from run_frames(
            self.ops, self.talker_backend, self.code_predictor_backend,
            TalkerLogitRules.of(self.cfg.talker, opts.repetition_penalty), sampler,
            prompt, trailing, pad, steps, timing)
        self._ended(frames, by_eos)

    def use_backends(self, *, talker=None, code_predictor=None, speaker_encoder=None, speech_encoder=None) -> None:
        """Run the talker and/or the code predictor on other backends (``backends`` interfaces);
        ``speaker_encoder`` / ``speech_encoder``: voice cloning's graphs (``runtime.tts.clone_encoders``)."""
        if talker is not None:
            self.talker_backend = talker
        if code_predictor is not None:
            self.code_predictor_backend = code_predictor
        if speaker_encoder is not None:
            self.speaker_encoder_backend = speaker_encoder
        if speech_encoder is not None:
            self.speech_encoder_backend = speech_encoder

    def generate_codes(self, text: str, **kw) -> np.ndarray:
        """All frames as ``int64 [T, num_code_groups]`` (``T`` may be 0)."""
        frames = list(self.generate_frames(text, **kw))
        if not frames:
            return np.zeros((0, self.num_code_groups), dtype=np.int64)
        return np.stack(frames)


class TTSModel(HostModel):
    """A loaded Qwen3-TTS model root (talker, code predictor, speaker encoder, text tokenizer)."""

    def __init__(self, cfg, net, tokenizer, files):
        from rkspeech.models.qwen3_tts.backends import TorchCodePredictor, TorchTalker
        from rkspeech.models.qwen3_tts.speech_encoder import LazySpeechEncoder
        from rkspeech.models.qwen3_tts.torch_host import TorchHost

        self.cfg, self.net, self.tokenizer, self.files = cfg, net, tokenizer, files
        self._speech_encoder = LazySpeechEncoder(files.root)  # in-context cloning's, read on first use
        self.ops = TorchHost(net.talker)
        #: where the decoder stacks run (``backends``): torch on the host unless a plan says otherwise
        self.talker_backend = TorchTalker(net.talker)
        self.code_predictor_backend = TorchCodePredictor(net.talker)
        #: seconds and calls of the two stages in the last (or current) generation
        self.last_timing: dict = {}
        #: its greedy decisions' margins, a row per talker step (``loop.FrameSampler.margins``)
        self.last_margins: list = []

    @classmethod
    def load(cls, model_dir: str | os.PathLike | None) -> TTSModel:
        from rkspeech.models.qwen3_tts.text_tokenizer import TextTokenizer
        from rkspeech.models.qwen3_tts.tts_checkpoint import (
            load_tts_net,
            read_tts_config,
            resolve_model_root,
        )

        files = resolve_model_root(model_dir)
        cfg = read_tts_config(files)
        tokenizer = TextTokenizer(files.root)
        net = load_tts_net(files, cfg)
        return cls(cfg, net, tokenizer, files)

    def speaker_embedding(self, audio: np.ndarray):
        """The x-vector ``[enc_dim]`` of mono float32 24 kHz audio (Base models)."""
        import torch

        from rkspeech.models.qwen3_tts.speaker_encoder import mel_spectrogram

        if self.net.speaker_encoder is None:
            raise RkspeechError(f"this {self.variant} checkpoint has no speaker encoder; voice clone needs a Base model")
        audio = np.asarray(audio, dtype=np.float32)
        if audio.ndim != 1 or audio.size < 2048:
            raise RkspeechError("reference audio must be mono float32 at 24 kHz, at least 2048 samples")
        with torch.no_grad():
            return self.net.speaker_encoder(mel_spectrogram(audio, self.cfg.speaker_encoder.sample_rate))

    def reference_codes(self, audio: np.ndarray) -> np.ndarray:
        """``[T, 16]`` int64 codes of mono float32 24 kHz reference audio (in-context cloning):
        the speech tokenizer's encoder in torch (``speech_encoder``), loaded on first use."""
        return self._speech_encoder.codes(audio)

    def build_prompt(self, text: str, *, text_in_prompt: bool | None = None, **request):
        """``(prompt embeds [1, L, hidden], trailing text embeds [1, n, hidden], tts_pad embed [1, 1, hidden])``,
        with their autograd graph (training runs through it)."""
        return tuple(x.unsqueeze(0) for x in self.prompt_rows(text, text_in_prompt=text_in_prompt, **request))

    # -- generation ------------------------------------------------------------------------------
    def generate_frames(self, text: str, **kw) -> Iterator[np.ndarray]:
        """``HostModel.generate_frames`` with the prompt and the frames under ``torch.no_grad``."""
        import torch

        with torch.no_grad():
            return super().generate_frames(text, **kw)

    def _frames(self, prompt, trailing, pad, steps: int, opts: GenerationOptions) -> Iterator[np.ndarray]:
        import torch

        # no_grad wrapped around the generator function: torch sets it only while the generator runs,
        # so the caller's own code between frames keeps its grad mode
        return torch.no_grad()(super()._frames)(prompt, trailing, pad, steps, opts)


class LazyTTSModel:
    """A model root's ``TTSModel``, loaded on first ``get()`` and then shared: the stages of one
    ``build qwen3-tts`` that need torch (exports, verifies) load it once (published: ~9 GB and
    a minute here), and a resumed build whose stages are fresh never loads it."""

    def __init__(self, files):
        self.files, self._tts = files, None
        self._transforms: list = []

    def get(self) -> TTSModel:
        if self._tts is None:
            tts = TTSModel.load(self.files.root)
            for fn in self._transforms:
                fn(tts)
            self._tts = tts
        return self._tts

    def transform(self, fn) -> None:
        """Apply ``fn(tts)`` (an in-place change of the weights, e.g. the fp16 headroom's exact
        rescale) now if the model is loaded, else when ``get`` loads it."""
        if self._tts is not None:
            fn(self._tts)
        else:
            self._transforms.append(fn)
