"""Voices saved beside a Base plan: a clone prompt made once from a recording, spoken by name.

What qwen-tts' ``create_voice_clone_prompt`` returns, kept on disk: the speaker's x-vector and,
for in-context cloning, the recording's ``[T, 16]`` codes and its transcript.  ``rkspeech voices
save NAME --plan PLAN --ref-audio WAV [--ref-text TEXT]`` runs the plan's speaker encoder (and
speech encoder) once and writes ``<plan folder>/voices/NAME.voice``; ``speak --voice NAME`` and
``serve`` (OpenAI ``voice``, the Wyoming voice list) speak it without the recording.  The
authors' workflow, a voice designed with VoiceDesign and then cloned by Base, becomes two commands.

A ``.voice`` file is a numpy ``.npz`` (``x_vector`` float32 ``[enc_dim]``, ``ref_codes`` int64
``[T, G]`` when in context, ``meta``: JSON of its format, name, transcript and the fingerprints of
the encoders that made it), read with ``allow_pickle=False``: a voice from another model is
refused in one line, as a damaged file is.  Numpy only: the board install has no safetensors
(the aarch64 rehearsal's ``voices save`` stopped on its import).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

FORMAT = "rkspeech-voice/1"
SUFFIX = ".voice"
FOLDER = "voices"
#: a voice name: what a Wyoming voice list and an OpenAI ``voice`` carry without quoting
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class SavedVoice:
    """One clone prompt: ``x_vector`` (the speaker embedding), with ``ref_codes`` and ``ref_text``
    for in-context cloning (both or neither); the fingerprints of the encoders that made them."""

    name: str
    x_vector: np.ndarray
    ref_codes: np.ndarray | None = None
    ref_text: str | None = None
    speaker_fingerprint: str = ""
    speech_fingerprint: str = ""

    @property
    def in_context(self) -> bool:
        return self.ref_codes is not None


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise RkspeechError(f"voice name {name!r}: use 1-64 letters, digits, '-', '_' or '.', starting with a "
                            "letter or digit")
    return name


def voices_folder(plan_path) -> Path:
    """``voices/`` in the folder of ``plan_path`` (a plan.json or its folder)."""
    p = Path(plan_path)
    return (p if p.is_dir() else p.parent) / FOLDER


def save_voice(plan_path, voice: SavedVoice, *, replace: bool = False) -> Path:
    """Write ``voice`` as ``voices/<name>.voice`` beside the plan (atomically); an existing voice
    of that name is kept unless ``replace``."""
    from rkspeech.core.atomic import atomic_path

    check_name(voice.name)
    path = voices_folder(plan_path) / f"{voice.name}{SUFFIX}"
    if path.exists() and not replace:
        raise RkspeechError(f"{path}: a voice named {voice.name!r} is already saved; pick another name or add --force")
    arrays = {"x_vector": np.ascontiguousarray(voice.x_vector, dtype=np.float32)}
    meta = {"format": FORMAT, "name": voice.name, "speaker_fingerprint": voice.speaker_fingerprint}
    if voice.ref_codes is not None:
        arrays["ref_codes"] = np.ascontiguousarray(voice.ref_codes, dtype=np.int64)
        meta.update(ref_text=voice.ref_text or "", speech_fingerprint=voice.speech_fingerprint)
    with atomic_path(path, suffix=SUFFIX) as tmp, open(tmp, "wb") as f:
        np.savez(f, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
    return path


def load_voice(path) -> SavedVoice:
    """The voice in ``path``; one line for a file that is not one."""
    import zipfile

    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise RkspeechError(f"{path}: not an rkspeech voice (format "
                                    f"{meta.get('format') if isinstance(meta, dict) else None!r}, expected {FORMAT})")
            x = z["x_vector"] if "x_vector" in z.files else None
            codes = z["ref_codes"] if "ref_codes" in z.files else None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise RkspeechError(f"{path}: not a readable voice file ({str(exc).splitlines()[0] if str(exc) else exc})") \
            from None
    if x is None or x.ndim != 1 or x.dtype != np.float32 or not np.isfinite(x).all():
        raise RkspeechError(f"{path}: the voice's x_vector is missing or damaged")
    if codes is not None and (codes.ndim != 2 or codes.dtype != np.int64 or not meta.get("ref_text")):
        raise RkspeechError(f"{path}: the voice's reference codes or their transcript are missing or damaged")
    return SavedVoice(name=meta.get("name") or path.stem, x_vector=x, ref_codes=codes,
                      ref_text=meta.get("ref_text") or None, speaker_fingerprint=meta.get("speaker_fingerprint", ""),
                      speech_fingerprint=meta.get("speech_fingerprint", ""))


def model_fingerprints(model) -> dict[str, str]:
    """The fingerprints a voice of ``model`` (a ``NumpyTTSModel`` / ``TTSModel`` of a Base root)
    must carry."""
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import resolve_checkpoint
    from rkspeech.runtime.tts.clone_encoders import speaker_fingerprint, speech_fingerprint
    from rkspeech.runtime.tts.host_weights import SafetensorsFile

    return {"speaker": speaker_fingerprint(SafetensorsFile(model.files.weights)),
            "speech": speech_fingerprint(resolve_checkpoint(model.files.root).weights)}


def check_voice(voice: SavedVoice, model, fingerprints: dict[str, str], where) -> SavedVoice:
    """``voice`` if ``model`` can speak it: a Base model of its size whose encoders made it."""
    if model.cfg.tts_model_type != "base":
        raise RkspeechError(f"{where}: saved voices are spoken by Base models; this plan's model is "
                            f"{model.variant}")
    width = model.cfg.speaker_encoder.enc_dim
    if voice.x_vector.shape != (width,):
        raise RkspeechError(f"{where}: the voice's x-vector has {voice.x_vector.shape[0]} values, this model's "
                            f"{width}: it was saved from another model size")
    if voice.speaker_fingerprint != fingerprints["speaker"] or (
            voice.in_context and voice.speech_fingerprint != fingerprints["speech"]):
        raise RkspeechError(f"{where}: the voice was saved from another model (its encoders' fingerprints differ); "
                            "save it again with this plan (rkspeech voices save)")
    if voice.in_context and (voice.ref_codes.shape[1] != model.num_code_groups
                             or voice.ref_codes.min() < 0
                             or voice.ref_codes.max() >= model.cfg.code_predictor.vocab_size):
        raise RkspeechError(f"{where}: the voice's reference codes do not fit this model")
    return voice


def plan_voices(plan_path, model) -> dict[str, SavedVoice]:
    """Every voice saved beside the plan, by name, each checked against ``model`` (a Base one;
    other variants have none)."""
    folder = voices_folder(plan_path)
    if model.cfg.tts_model_type != "base" or not folder.is_dir():
        return {}
    fingerprints = model_fingerprints(model)
    out = {}
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        voice = check_voice(load_voice(path), model, fingerprints, path)
        if voice.name != path.stem:
            raise RkspeechError(f"{path}: the file says it is voice {voice.name!r}; rename it {voice.name}{SUFFIX}")
        out[voice.name] = voice
    return out


def listed_voices(plan_path, variant: str) -> list[dict]:
    """What ``rkspeech voices --plan`` shows: each saved voice's name, mode and transcript (a file
    that does not read: its one-line problem instead).  Not checked against a model."""
    folder = voices_folder(plan_path)
    if variant != "base" or not folder.is_dir():
        return []
    rows = []
    for path in sorted(folder.glob(f"*{SUFFIX}")):
        try:
            v = load_voice(path)
            rows.append({"name": v.name, "in_context": v.in_context, "ref_text": v.ref_text, "file": str(path)})
        except RkspeechError as exc:
            rows.append({"name": path.stem, "in_context": False, "ref_text": None, "file": str(path),
                         "problem": str(exc)})
    return rows


def make_voice(model, name: str, ref_audio: np.ndarray, ref_text: str | None = None) -> SavedVoice:
    """Run ``model``'s encoders (the plan's graphs) over ``ref_audio`` once: the x-vector, and with
    ``ref_text`` the codes of an in-context prompt."""
    check_name(name)
    if model.cfg.tts_model_type != "base":
        raise RkspeechError(f"voices are saved with a Base model's plan; this plan's model is {model.variant}")
    if ref_text is not None and not ref_text.strip():
        raise RkspeechError("--ref-text is empty: give the recording's transcript, or leave it out to keep the "
                            "x-vector alone")
    fp = model_fingerprints(model)
    x = np.asarray(model.speaker_embedding(ref_audio), dtype=np.float32).reshape(-1)
    codes = None
    if ref_text is not None:
        codes = np.asarray(model.reference_codes(np.asarray(ref_audio, dtype=np.float32)), dtype=np.int64)
    return SavedVoice(name=name, x_vector=x, ref_codes=codes, ref_text=ref_text, speaker_fingerprint=fp["speaker"],
                      speech_fingerprint=fp["speech"] if codes is not None else "")


def save_from_recording(plan_path, model_dir, name: str, ref_audio_path, ref_text: str | None = None, *,
                        replace: bool = False, threads: int | None = None) -> tuple[Path, SavedVoice]:
    """``voices save``: the plan's clone encoders (onnxruntime) over the recording, the voice written
    beside the plan; ``(path, voice)``.  Every input is checked before the encoders run."""
    from rkspeech.plan.plan import load_plan
    from rkspeech.runtime.audio import decode_audio
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel
    from rkspeech.runtime.tts.open_stages import open_clone_encoders
    from rkspeech.runtime.tts.speak import MIN_REF_AUDIO_S

    check_name(name)
    target = voices_folder(plan_path) / f"{name}{SUFFIX}"
    if target.exists() and not replace:
        raise RkspeechError(f"{target}: a voice named {name!r} is already saved; pick another name or add --force")
    plan = load_plan(plan_path, backend="ort")
    model = NumpyTTSModel.load(model_dir)
    if model.cfg.tts_model_type != "base":
        raise RkspeechError(f"voices are saved with a Base model's plan; {model.files.root} is {model.variant}")
    encoders = open_clone_encoders(plan, "ort", model=model, threads=threads)
    if "speaker_encoder" not in encoders or (ref_text is not None and "speech_encoder" not in encoders):
        for e in encoders.values():
            e.close()
        raise RkspeechError(f"{plan.path}: the plan holds no clone encoder graphs; rebuild it with rkspeech build "
                            "qwen3-tts on this Base model")
    try:
        model.use_backends(**encoders)
        rate = model.cfg.speaker_encoder.sample_rate
        audio = decode_audio(ref_audio_path, sample_rate=rate, what="reference audio", min_seconds=MIN_REF_AUDIO_S)
        voice = make_voice(model, name, audio, ref_text)
    finally:
        for e in encoders.values():
            e.close()
    return save_voice(plan.path, voice, replace=replace), voice
