"""The Wyoming ``info`` event: what this server offers (ASR model, TTS voices)."""

from __future__ import annotations

from rkspeech.serve.engines import SPEECH, TRANSCRIBE, ServePool
from rkspeech.serve.options import ServeOptions

#: the ``asr`` program of a Whisper model: (name, description, family, attribution, its address)
WHISPER = ("rkspeech-whisper", "faster-whisper with the encoder offloaded", "Whisper",
           "OpenAI Whisper (faster-whisper)", "https://github.com/SYSTRAN/faster-whisper")


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

    qwen = Attribution(name="Qwen3-TTS", url="https://github.com/QwenLM/Qwen3-TTS")
    asr, tts = [], []
    if pool.has(TRANSCRIBE):
        from rkspeech.serve.transcription import model_languages

        model = pool.first_model(TRANSCRIBE)
        # a model may name its program (Qwen3-ASR); else it is Whisper under faster-whisper
        name, description, family, who, url = getattr(model, "program", WHISPER)
        made_by = Attribution(name=who, url=url)
        asr.append(AsrProgram(name=name, description=description, attribution=made_by, installed=True,
                              version=version,
                              models=[AsrModel(name=options.model_name, description=f"{family} ({options.model_name})",
                                               attribution=made_by, installed=True, languages=model_languages(model),
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
