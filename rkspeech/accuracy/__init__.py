"""Where fp16 loses accuracy: a per-block and per-layer accuracy map of an ONNX graph on the NPU
(``rkspeech accuracy``; measured maps in docs/accuracy-map.md).

One job per module:

* ``options``: the typed options (:class:`~rkspeech.accuracy.options.AccuracyOptions`).
* ``inputs``: the model and input checks (missing file, not an ONNX, an npz that does not match
  the graph inputs) and the default inputs; ``step_feed``: a vocoder step's feed taken from a
  stepwise onnxruntime decode (cache threaded).
* ``pieces``: where to cut the graph (on narrow cuts: a transformer's residual stream) and the
  cut pieces, over ``export.split``.
* ``fp16_model``: graph rewrites run with onnxruntime: intermediates exposed as outputs, and the
  fp16 storage model (weights and every activation rounded to fp16 after each op).
* ``metrics``: per-tensor figures (SNR, cosine, largest |activation| against fp16's range).
* ``blocks``: each piece run in fp32, in the fp16 model and on the simulator, fed exact inputs
  (local) and the previous pieces' outputs (cumulative).
* ``analyse``: the whole map of one graph, checked against the whole graph on the simulator.
* ``report``: the summary, the tables of the worst blocks, the JSON, the headline a build
  report records; ``plot``: the PNG.
* ``stage``: the map as an optional build stage (``build qwen3-tts-vocoder --accuracy-pieces``)
  and for ``verify --plot``: checks, the mapped step, reading a report back.

Standard library only at import time.
"""
