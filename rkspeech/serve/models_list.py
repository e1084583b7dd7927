"""``GET /v1/models``: OpenAI's model list, each entry with what it serves (extra fields the
OpenAI ``Model`` object allows): voices, languages, formats, speed range, streaming."""

from __future__ import annotations

from rkspeech.serve.engines import SPEECH, TRANSCRIBE, ServePool
from rkspeech.serve.options import ServeOptions


def models_list(pool: ServePool, options: ServeOptions) -> dict:
    data = []
    if pool.has(TRANSCRIBE):
        from rkspeech.serve.transcription import RESPONSE_FORMATS, model_languages

        data.append({"id": options.model_name, "object": "model", "created": 0, "owned_by": "rkspeech",
                     "task": "transcription", "languages": model_languages(pool.first_model(TRANSCRIBE)),
                     "response_formats": list(RESPONSE_FORMATS), "stream": True,
                     "biasing": ["prompt", "hotwords"]})
    if pool.has(SPEECH):
        from rkspeech.serve.speech_formats import SPEECH_FORMATS, SPEED_RANGE, STREAM_FORMATS

        engine = pool.first_model(SPEECH)
        data.append({"id": options.speech_model_name, "object": "model", "created": 0, "owned_by": "rkspeech",
                     "task": "speech", "voices": list(engine.speakers or ["default"]),
                     "languages": list(engine.languages or []), "sample_rate": engine.sample_rate,
                     "response_formats": list(SPEECH_FORMATS), "stream_formats": list(STREAM_FORMATS),
                     "speed": list(SPEED_RANGE)})
    return {"object": "list", "data": data}
