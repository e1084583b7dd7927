"""The contracts of voice cloning's two graphs: the speaker encoder and the speech tokenizer's encoder.

A Base checkpoint clones a voice from reference audio in two ways (qwen-tts ``create_voice_clone_prompt``):

* **x-vector**: the speaker encoder (ECAPA-TDNN) turns the reference's log-mel into one vector that
  sits in the talker's prompt.  Graph ``mel [1, frames, M] -> xvector [D]``; ``frames`` is dynamic
  (the reference's length; the mel front end runs on the host in numpy,
  ``models.qwen3_tts.speaker_mel``).
* **in context**: the speech tokenizer's encoder (Mimi's SEANet + transformer + split RVQ) turns the
  reference audio into its ``[T, G]`` codes, which the prompt carries with the reference's
  transcript.  Graph ``audio [1, 1, samples], length [1] -> codes [1, G, samples / S]``: the host pads
  the audio with zeros to a multiple of ``S`` samples (:func:`padded_length`), the graph treats
  every position past ``length`` as the reference model treats its own padding, and the host keeps
  the first :func:`code_count` codes (qwen-tts' ``ceil(length / S)``).

Both are stateless and run once per request.  Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rkspeech.contracts.base import Contract
from rkspeech.core.errors import RkspeechError

SPEAKER_FORMAT = "rkspeech-speaker-encoder/1"
SPEECH_FORMAT = "rkspeech-speech-encoder/1"
#: the dynamic dims' names in the ONNX graphs
FRAMES, SAMPLES, CODES = "frames", "samples", "codes"


def code_count(samples: int, samples_per_code: int) -> int:
    """Codes of ``samples`` samples of reference audio: ``ceil(samples / samples_per_code)``."""
    return -(-int(samples) // int(samples_per_code))


def padded_length(samples: int, samples_per_code: int) -> int:
    """The length the speech encoder's graph is fed: ``samples`` rounded up to whole codes."""
    return code_count(samples, samples_per_code) * int(samples_per_code)


def _malformed(kind: str, exc) -> RkspeechError:
    return RkspeechError(f"{kind} contract is malformed: {exc!r}")


@dataclass(frozen=True)
class SpeakerEncoderContract(Contract):
    FORMAT = SPEAKER_FORMAT
    KIND = "speaker-encoder"

    mel_dim: int
    enc_dim: int
    sample_rate: int
    fingerprint: str = ""  # runtime.tts.clone_encoders.speaker_fingerprint of the checkpoint
    frames: int | None = None  # None: dynamic (the CPU graph); an int: a fixed-length graph (the NPU trial)

    def input_shapes(self) -> dict[str, list]:
        return {"mel": [1, FRAMES if self.frames is None else self.frames, self.mel_dim]}

    def output_shapes(self) -> dict[str, list]:
        return {"xvector": [self.enc_dim]}

    def to_dict(self) -> dict[str, Any]:
        return {"format": SPEAKER_FORMAT, "model": "qwen3-tts-speaker-encoder", "mel_dim": self.mel_dim,
                "enc_dim": self.enc_dim, "sample_rate": self.sample_rate, "frames": self.frames,
                "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeakerEncoderContract:
        try:
            frames = d.get("frames")
            c = cls(mel_dim=int(d["mel_dim"]), enc_dim=int(d["enc_dim"]), sample_rate=int(d["sample_rate"]),
                    fingerprint=str(d.get("fingerprint", "")), frames=None if frames is None else int(frames))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise _malformed(cls.KIND, exc) from None
        if min(c.mel_dim, c.enc_dim, c.sample_rate) < 1 or (c.frames is not None and c.frames < 1):
            raise RkspeechError(f"speaker-encoder contract is malformed: {c.to_dict()}")
        return c


@dataclass(frozen=True)
class SpeechEncoderContract(Contract):
    FORMAT = SPEECH_FORMAT
    KIND = "speech-encoder"

    num_code_groups: int  # codebooks kept (qwen-tts' encoder_valid_num_quantizers)
    codebook_size: int
    samples_per_code: int  # audio samples per code frame (1920: 24 kHz -> 12.5 Hz)
    sample_rate: int
    fingerprint: str = ""  # runtime.tts.clone_encoders.speech_fingerprint of the speech tokenizer

    def input_shapes(self) -> dict[str, list]:
        return {"audio": [1, 1, SAMPLES], "length": [1]}

    def output_shapes(self) -> dict[str, list]:
        return {"codes": [1, self.num_code_groups, CODES]}

    def to_dict(self) -> dict[str, Any]:
        return {"format": SPEECH_FORMAT, "model": "qwen3-tts-speech-encoder", "G": self.num_code_groups,
                "V": self.codebook_size, "samples_per_code": self.samples_per_code,
                "sample_rate": self.sample_rate, "fingerprint": self.fingerprint}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpeechEncoderContract:
        try:
            c = cls(num_code_groups=int(d["G"]), codebook_size=int(d["V"]),
                    samples_per_code=int(d["samples_per_code"]), sample_rate=int(d["sample_rate"]),
                    fingerprint=str(d.get("fingerprint", "")))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise _malformed(cls.KIND, exc) from None
        if min(c.num_code_groups, c.codebook_size, c.samples_per_code, c.sample_rate) < 1:
            raise RkspeechError(f"speech-encoder contract is malformed: {c.to_dict()}")
        return c
