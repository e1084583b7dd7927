"""``rkspeech serve``: Wyoming (Home Assistant) and OpenAI-compatible HTTP front ends over one pool
of engines, in one asyncio loop.

* :mod:`.options` -- :class:`ServeOptions`, the typed settings (limits, queue, addresses).
* :mod:`.engines` -- :class:`ServePool`: N transcription engines and an optional speech engine,
  a bounded queue with immediate refusal when full, time limits, graceful shutdown; blocking
  model calls run in worker threads so the loop keeps serving.
* :mod:`.transcription` -- request options -> the same faster-whisper call as ``rkspeech
  transcribe``; response bodies (json, text, srt, vtt, verbose_json).
* :mod:`.lane` -- the engines of one kind and the wait line, shared fairly between clients.
* :mod:`.transcript_stream` -- streamed transcripts (HTTP server-sent events, Wyoming chunks).
* :mod:`.biasing` -- hotwords and prompt (``--asr-hotwords-file``, request fields).
* :mod:`.speech_formats` -- speech as mp3 / opus / aac / flac / wav / pcm (PyAV), ``speed``, SSE.
* :mod:`.models_list` -- ``GET /v1/models``.
* :mod:`.audio` -- uploaded bytes / Wyoming PCM -> 16 kHz mono float32, in memory.
* :mod:`.wyoming_server` (per connection) with :mod:`.wyoming_listener`, :mod:`.http_server` -- the two
  front ends.
* :mod:`.metrics` -- Prometheus counters, gauges and histograms (one registry per server).
* :mod:`.server` -- both front ends started and stopped together.

Heavy packages (faster-whisper, starlette, uvicorn, wyoming, prometheus-client) are imported by
the modules that use them; importing this package is cheap.
"""
