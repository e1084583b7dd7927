"""Text to codec frames: our own Qwen3-TTS generation loop (custom voice, voice design, voice clone).

``TTSModel.load(model_dir)`` reads a model root (``tts_checkpoint``); ``generate_frames`` yields one
frame at a time, a ``numpy.int64`` array of shape ``[num_code_groups]`` (codebook 0 from the talker,
the rest from the code predictor), ready for ``StreamingVocoder``; ``generate_codes`` returns all
of them as ``[T, num_code_groups]``.

The prompt and the loop follow qwen-tts 0.1.1 ``Qwen3TTSForConditionalGeneration.generate`` and the
HF ``generate`` it drives, for one sequence, so greedy codes are identical, and so are sampled
codes for the same seed (qwen-tts seeded with ``torch.manual_seed(s)``, ours with
``GenerationOptions(seed=s)``: the same draws in the same order from bitwise-equal distributions;
``tests/test_tts_generate.py``):

* prompt: ``<|im_start|>assistant\\n`` (3 text tokens) projected; then codec control tokens
  (``think``/``nothink``, ``think_bos``, language, ``think_eos``, speaker, ``pad``) each added to
  ``tts_pad`` (``tts_bos`` on the last), and the first text token + ``codec_bos``.  The remaining
  text is fed one token per frame (added to the frame's summed codec embeddings), then
  ``tts_eos``, then ``tts_pad``.  With ``text_in_prompt`` (qwen-tts' ``non_streaming_mode``; its
  default for custom voice and voice design, not for clone) the whole text + ``tts_eos`` sits in
  the prompt over ``codec_pad`` and every frame gets ``tts_pad``.
* talker logits: repetition penalty over the codebook-0 tokens generated so far, the top 1024 ids
  except ``codec_eos`` suppressed, ``codec_eos`` banned for the first 2 frames (``min_new_tokens``);
  sampling applies temperature, top-k, top-p in that order.
* ``codec_eos`` ends generation; so does ``max_new_tokens`` talker steps, where, as in qwen-tts,
  the token sampled at the last step gets no frame (its code predictor would run in the next step).
* code predictor: positions 0-1 are the talker's last hidden state and codebook 0's embedding;
  ``lm_head[j-1]`` gives codebook j; no penalty, no suppression (qwen-tts passes none).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.core.text import check_text
from rkspeech.models.qwen3_tts.sampling import GenerationOptions, choose_token, penalize

MIN_NEW_TOKENS = 2
SUPPRESSED_TAIL = 1024


class RequestChecks:
    """What a loaded model root offers and the checks of a request, torch-free: shared by
    ``TTSModel`` (torch host path) and ``runtime.tts.numpy_loop.NumpyTTSModel`` (numpy host path).
    Needs ``self.cfg`` (``TTSConfig``) and ``self.tokenizer``."""

    # -- what the checkpoint offers ------------------------------------------------------------
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

    def _check_request(self, text, speaker, language, instruct, ref_audio):
        check_text(text)
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

    def _check_icl(self, ref_audio, ref_text, ref_codes):
        if ref_text is None and ref_codes is None:
            return None
        if ref_audio is None:
            raise RkspeechError("in-context cloning (ref_text + ref_codes) also needs the reference audio (--ref-audio) "
                                "for the speaker embedding")
        if not ref_text or not str(ref_text).strip():
            raise RkspeechError("in-context cloning needs the reference audio's transcript (ref_text) with its codes")
        if ref_codes is None:
            raise RkspeechError("in-context cloning needs the reference audio's codes (ref_codes, [T, 16] from the "
                                "speech tokenizer's encoder, which rkspeech does not run); or drop ref_text to clone "
                                "from the speaker embedding alone")
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

    def use_backends(self, *, talker=None, code_predictor=None) -> None:
        """Run the talker and/or the code predictor on other backends (``backends`` interfaces)."""
        if talker is not None:
            self.talker_backend = talker
        if code_predictor is not None:
            self.code_predictor_backend = code_predictor

    def generate_codes(self, text: str, **kw) -> np.ndarray:
        """All frames as ``int64 [T, num_code_groups]`` (``T`` may be 0)."""
        frames = list(self.generate_frames(text, **kw))
        if not frames:
            return np.zeros((0, self.num_code_groups), dtype=np.int64)
        return np.stack(frames)


class TTSModel(RequestChecks):
    """A loaded Qwen3-TTS model root (talker, code predictor, speaker encoder, text tokenizer)."""

    def __init__(self, cfg, net, tokenizer, files):
        from rkspeech.models.qwen3_tts.backends import TorchCodePredictor, TorchTalker

        self.cfg, self.net, self.tokenizer, self.files = cfg, net, tokenizer, files
        t = cfg.talker
        self._suppress = [i for i in range(t.vocab_size - SUPPRESSED_TAIL, t.vocab_size) if i != t.codec_eos_token_id]
        #: where the decoder stacks run (``backends``): torch on the host unless a plan says otherwise
        self.talker_backend = TorchTalker(net.talker)
        self.code_predictor_backend = TorchCodePredictor(net.talker)
        #: seconds and calls of the two stages in the last (or current) generation
        self.last_timing: dict = {}

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

    def build_prompt(self, text: str, *, speaker=None, language=None, instruct=None, ref_audio=None,
                     ref_text: str | None = None, ref_codes: np.ndarray | None = None,
                     text_in_prompt: bool | None = None):
        """``(prompt embeds [1, L, hidden], trailing text embeds [1, n, hidden], tts_pad embed [1, 1, hidden])``."""
        import torch

        lang = self._check_request(text, speaker, language, instruct, ref_audio)
        icl_codes = self._check_icl(ref_audio, ref_text, ref_codes)
        cfg, t, talker = self.cfg, self.cfg.talker, self.net.talker
        if text_in_prompt is None:
            text_in_prompt = cfg.default_text_in_prompt
        ids = self.prompt_ids(text)

        def tt(x):
            return torch.tensor([x], dtype=torch.long)

        parts = []
        if instruct:
            parts.append(talker.text(tt(self._ids(f"<|im_start|>user\n{instruct}<|im_end|>\n"))))
        if ref_audio is not None:
            speaker_embed = self.speaker_embedding(ref_audio)
        elif speaker:
            speaker_embed = talker.codec([t.spk_id[speaker.lower()]])[0, 0]
        else:
            speaker_embed = None
        language_id = self._language_id(lang, speaker)
        bos, eos, pad = talker.text(tt([cfg.tts_bos_token_id, cfg.tts_eos_token_id, cfg.tts_pad_token_id])).chunk(3, dim=1)
        if language_id is None:
            control = [t.codec_nothink_id, t.codec_think_bos_id, t.codec_think_eos_id]
        else:
            control = [t.codec_think_id, t.codec_think_bos_id, language_id, t.codec_think_eos_id]
        codec = [talker.codec(control)]
        if speaker_embed is not None:
            codec.append(speaker_embed.view(1, 1, -1))
        codec.append(talker.codec([t.codec_pad_id, t.codec_bos_id]))
        codec = torch.cat(codec, dim=1)
        role = talker.text(tt(ids[:3]))
        tags = torch.cat((pad.expand(-1, codec.shape[1] - 2, -1), bos), dim=1) + codec[:, :-1]
        body = ids[3:-5]
        if icl_codes is not None:
            prompt, trailing = self._icl_prompt(body, ref_text, icl_codes, pad, eos, text_in_prompt)
            prompt = torch.cat((role, tags, prompt), dim=1)
        elif text_in_prompt:
            text_part = torch.cat((talker.text(tt(body)), eos), dim=1) + talker.codec([t.codec_pad_id] * (len(body) + 1))
            prompt = torch.cat((role, tags, text_part, pad + talker.codec([t.codec_bos_id])), dim=1)
            trailing = pad
        else:
            prompt = torch.cat((role, tags, talker.text(tt(ids[3:4])) + codec[:, -1:]), dim=1)
            trailing = torch.cat((talker.text(tt(ids[4:-5])), eos), dim=1)
        parts.append(prompt)
        return torch.cat(parts, dim=1), trailing, pad

    def _icl_prompt(self, body, ref_text, codes, pad, eos, text_in_prompt):
        """qwen-tts ``generate_icl_prompt``: reference + target text over codec_bos + the reference frames."""
        import torch

        t, talker = self.cfg.talker, self.net.talker
        cp = talker.code_predictor
        ref_ids = self._ids(f"<|im_start|>assistant\n{ref_text}<|im_end|>\n")[3:-2]
        text = torch.cat((talker.text(torch.tensor([ref_ids + body], dtype=torch.long)), eos), dim=1)
        c = torch.from_numpy(codes)
        frames = [talker.model.codec_embedding(c[:, :1])]
        frames += [cp.model.codec_embedding[i - 1](c[:, i:i + 1]) for i in range(1, codes.shape[1])]
        codec = torch.cat((talker.codec([t.codec_bos_id]), torch.cat(frames, dim=1).sum(1).unsqueeze(0)), dim=1)
        n_text, n_codec = text.shape[1], codec.shape[1]
        if text_in_prompt:
            return torch.cat((text + talker.codec([t.codec_pad_id] * n_text), codec + pad), dim=1), pad
        if n_text > n_codec:
            return text[:, :n_codec] + codec, text[:, n_codec:]
        return torch.cat([text] + [pad] * (n_codec - n_text), dim=1) + codec, pad

    # -- generation ------------------------------------------------------------------------------
    def generate_frames(self, text: str, *, speaker: str | None = None, language: str | None = None,
                        instruct: str | None = None, ref_audio: np.ndarray | None = None,
                        ref_text: str | None = None, ref_codes: np.ndarray | None = None,
                        options: GenerationOptions | None = None) -> Iterator[np.ndarray]:
        """Yield frames ``int64 [num_code_groups]`` as they are generated (see the module docstring).

        ``speaker`` (custom voice), ``instruct`` (voice design; custom voice at 1.7B), ``ref_audio``
        (mono float32 24 kHz; Base: clone from the x-vector), plus ``ref_text`` and ``ref_codes``
        (``[T, 16]`` codes of ``ref_audio``) for in-context cloning.  The frames continue the
        reference; they do not repeat it."""
        import torch

        opts = self._check_options(options)
        with torch.no_grad():
            prompt, trailing, pad = self.build_prompt(text, speaker=speaker, language=language, instruct=instruct,
                                                      ref_audio=ref_audio, ref_text=ref_text, ref_codes=ref_codes,
                                                      text_in_prompt=opts.text_in_prompt)
        steps = self._check_length(prompt.shape[1], opts)
        # no_grad wrapped around the generator function: torch sets it only while the generator runs,
        # so the caller's own code between frames keeps its grad mode
        return torch.no_grad()(self._loop)(prompt, trailing, pad, steps, opts)

    def _loop(self, prompt, trailing, pad, steps: int, opts: GenerationOptions) -> Iterator[np.ndarray]:
        import torch

        t = self.cfg.talker
        talker = self.net.talker
        cp = talker.code_predictor
        stack, predictor = self.talker_backend, self.code_predictor_backend
        generator = torch.Generator()
        if opts.seed is not None:
            generator.manual_seed(opts.seed)
        else:
            generator.seed()
        suppress = torch.tensor(self._suppress, dtype=torch.long)
        history: list[int] = []
        cp_hist: list[int] = []

        def choose(j: int, lg) -> int:
            if j == 1:
                cp_hist.clear()
            lg = penalize(lg, cp_hist, opts.subtalker_repetition_penalty)
            code = choose_token(lg, opts.subtalker_dosample, opts.subtalker_temperature, opts.subtalker_top_k,
                            opts.subtalker_top_p, generator)
            cp_hist.append(code)
            return code

        clock = time.perf_counter
        tm = self.last_timing = {"talker_s": 0.0, "talker_calls": 0, "code_predictor_s": 0.0, "code_predictor_calls": 0}

        def talk(x):
            t0 = clock()
            out = torch.from_numpy(stack.forward(x)).view(1, 1, -1)
            tm["talker_s"] += clock() - t0
            tm["talker_calls"] += 1
            return out

        stack.start(prompt.shape[1] + steps)
        hidden = talk(prompt[0].numpy())
        for step in range(steps):
            logits = talker.codec_head(hidden)[0, 0].float()
            logits = penalize(logits, history, opts.repetition_penalty)
            if step < MIN_NEW_TOKENS:
                logits[t.codec_eos_token_id] = float("-inf")
            logits[suppress] = float("-inf")
            token = choose_token(logits, opts.do_sample, opts.temperature, opts.top_k, opts.top_p, generator)
            if token == t.codec_eos_token_id or step == steps - 1:
                self._ended(step, token == t.codec_eos_token_id)
                return
            history.append(token)
            first = talker.codec([token])
            t0 = clock()
            codes = predictor.frame(hidden[0, 0].numpy(), first[0, 0].numpy(), choose)
            tm["code_predictor_s"] += clock() - t0
            tm["code_predictor_calls"] += 1
            frame = [token, *codes]
            embeds = [first] + [cp.model.codec_embedding[j - 1](torch.tensor([[c]], dtype=torch.long))
                                for j, c in enumerate(codes, start=1)]
            yield np.asarray(frame, dtype=np.int64)
            text_in = trailing[:, step:step + 1] if step < trailing.shape[1] else pad
            # summed as qwen-tts sums them (one cat + sum, the same float rounding)
            x = torch.cat(embeds, dim=1).sum(1, keepdim=True) + text_in
            hidden = talk(x[0].numpy())

class LazyTTSModel:
    """A model root's ``TTSModel``, loaded on first ``get()`` and then shared: the stages of one
    ``build qwen3-tts`` that need torch (exports, verifies) load it once (published: ~9 GB and
    a minute here), and a resumed build whose stages are fresh never loads it."""

    def __init__(self, files):
        self.files, self._tts = files, None

    def get(self) -> TTSModel:
        if self._tts is None:
            self._tts = TTSModel.load(self.files.root)
        return self._tts
