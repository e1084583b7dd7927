"""A realistic feed for a vocoder step graph: the k-th step of a stepwise decode on onnxruntime.

A step's accuracy depends on its cache: a zero cache (step 1) leaves the KV history and the conv
tails empty, random values are not a state the model reaches.  So the feed is taken from the
graph itself, run stepwise on onnxruntime (fp32) over seeded random codes with the cache
threaded (``runtime.tts.streaming.StreamingVocoder``), as ``rkspeech verify`` runs it.
"""

from __future__ import annotations

import numpy as np

from rkspeech.core.errors import RkspeechError


def stepwise_feed(onnx_path, step: int, specs: dict, seed: int = 0, threads: int = 2) -> dict[str, np.ndarray]:
    """The feed of step ``step`` (1-based) of a stepwise decode of ``onnx_path``, cast to the
    graph's input dtypes ``specs``."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.contracts.vocoder import VocoderContract
    from rkspeech.core.capture import RecordingRunner
    from rkspeech.runtime.runners import open_runner
    from rkspeech.runtime.tts.streaming import Engine, StreamingVocoder
    from rkspeech.verify.stepwise import random_codes

    if step < 1:
        raise RkspeechError(f"--stepwise takes a step number >= 1, got {step}")
    try:
        contract = read_contract(onnx_path, VocoderContract)
    except RkspeechError as exc:
        raise RkspeechError(f"--stepwise needs a vocoder step graph with its contract ({exc})") from None
    with open_runner("ort", onnx_path, threads=threads) as runner:
        rec = RecordingRunner(runner)
        codes = random_codes(step * contract.codes_length, contract.num_quantizers, contract.codebook_size, seed)
        StreamingVocoder(Engine(rec, contract)).decode(codes)
    feed = rec.feeds[step - 1]
    return {n: np.asarray(feed[n]).astype(dtype) for n, (_, dtype) in specs.items()}
