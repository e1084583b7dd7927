"""Every kind of contract an artifact may carry, by its format string."""

from __future__ import annotations

from rkspeech.contracts.asr_encoder import ASREncoderContract
from rkspeech.contracts.base import Contract
from rkspeech.contracts.clone import SpeakerEncoderContract, SpeechEncoderContract
from rkspeech.contracts.code_predictor import CodePredictorContract
from rkspeech.contracts.head import HeadContract
from rkspeech.contracts.talker import TalkerContract
from rkspeech.contracts.vocoder import VocoderContract

#: format string -> contract class
KINDS: dict[str, type[Contract]] = {c.FORMAT: c for c in (VocoderContract, TalkerContract, CodePredictorContract,
                                                     HeadContract, SpeakerEncoderContract,
                                                     SpeechEncoderContract, ASREncoderContract)}
