"""The Wyoming ``info`` event: what this server offers (ASR model, TTS voices)."""

from __future__ import annotations

from rkspeech.serve.engines import SPEECH, TRANSCRIBE, ServePool
from rkspeech.serve.options import ServeOptions


def info_event(pool: ServePool, options: ServeOptions):
    """The ``info`` answer to ``describe``."""
    from wyoming.info import (
        AsrModel,
        AsrProgram,
        Attribution,
        Info,
        TtsProgram,
        TtsVoice,
        TtsVoiceSpeaker,
    )

    from rkspeech import __version__ as version

    whisper = Attribution(name="OpenAI Whisper (faster-whisper)", url="https://github.com/SYSTRAN/faster-whisper")
    qwen = Attribution(name="Qwen3-TTS", url="https://github.com/QwenLM/Qwen3-TTS")
    asr, tts = [], []
    if pool.has(TRANSCRIBE):
        from rkspeech.serve.transcription import model_languages

        languages = model_languages(pool.first_model(TRANSCRIBE))
        asr.append(AsrProgram(name="rkspeech-whisper", description="faster-whisper with the encoder offloaded",
                              attribution=whisper, installed=True, version=version,
                              models=[AsrModel(name=options.model_name, description=f"Whisper ({options.model_name})",
                                               attribution=whisper, installed=True, languages=languages,
                                               version=version)],
                              supports_transcript_streaming=True))
    if pool.has(SPEECH):
        from rkspeech.serve.language_codes import advertised

        engine = pool.first_model(SPEECH)
        voices = [TtsVoice(name=s, description=f"{options.speech_model_name}: {s}", attribution=qwen,
                           installed=True, version=version, languages=advertised(engine.languages),
                           speakers=[TtsVoiceSpeaker(name=s)])
                  for s in (engine.speakers or ["default"])]
        tts.append(TtsProgram(name="rkspeech-speech", description=options.speech_model_name, attribution=qwen,
                              installed=True, version=version, voices=voices, supports_synthesize_streaming=True))
    return Info(asr=asr, tts=tts).event()
