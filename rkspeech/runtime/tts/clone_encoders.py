"""Voice cloning's two graphs on a runner (``runtime.runners.open_runner``), without torch.

* :class:`GraphSpeakerEncoder`: reference audio -> its x-vector: the log-mel in numpy
  (``models.qwen3_tts.clone_inputs.log_mel``), then the speaker encoder's graph;
* :class:`GraphSpeechEncoder`: reference audio -> its ``[T, 16]`` codes for in-context cloning:
  the audio padded to whole codes, the speech tokenizer's encoder graph, the first
  ``ceil(samples / 1920)`` codes kept (``clone_inputs.reference_feed`` / ``reference_codes``).

Each checks its graph's contract against the model root it serves (dimensions, sample rate and
the weights' fingerprint: :func:`speaker_fingerprint`, :func:`speech_fingerprint`), so a plan built
from another checkpoint is one line before anything runs.  The plan names them as the records
``speaker_encoder`` and ``speech_encoder`` (``plan.sections``, built by ``build qwen3-tts`` for Base
roots: ``pipelines.clone_encoders``); ``open_stages.open_clone_encoders`` opens them for the numpy
host loop (``runtime.tts.numpy_loop``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError

#: the tensors each graph's fingerprint hashes (``host_weights.fingerprint``: fp32 bytes)
SPEAKER_FINGERPRINT_KEYS = ("speaker_encoder.fc.bias", "speaker_encoder.fc.weight")
SPEECH_FINGERPRINT_KEYS = ("encoder.encoder.layers.0.conv.weight",
                           "encoder.quantizer.semantic_residual_vector_quantizer.layers.0.codebook.embed_sum")


def speaker_fingerprint(weights_file) -> str:
    """The speaker encoder's fingerprint in a Base root's ``model.safetensors`` (a ``SafetensorsFile``)."""
    from rkspeech.runtime.tts.host_weights import fingerprint

    return fingerprint(*(weights_file.get(k) for k in SPEAKER_FINGERPRINT_KEYS))


def speech_fingerprint(weights_path) -> str:
    """The speech tokenizer encoder's fingerprint in ``speech_tokenizer/model.safetensors``."""
    from rkspeech.runtime.tts.host_weights import SafetensorsFile, fingerprint

    f = SafetensorsFile(weights_path)
    return fingerprint(*(f.get(k) for k in SPEECH_FINGERPRINT_KEYS))


def _mismatch(what: str, path: Path, diffs: list[str]) -> RkspeechError:
    return RkspeechError(f"the {what} graph {path.name} does not match this model ({'; '.join(diffs)}); rebuild "
                         "the plan for this model root (rkspeech build qwen3-tts)")


class _Graph:
    what = "graph"

    def __init__(self, path, backend: str, contract_kind, **runner_kw):
        from rkspeech.contracts.read import read_contract
        from rkspeech.runtime.runners import open_runner

        self.path = Path(path)
        self.contract = read_contract(self.path, contract_kind)
        self.runner = open_runner(backend, self.path, **runner_kw)
        self.name = f"{self.what} graph ({backend}: {self.path.name})"

    def _refuse_mismatch(self, diffs: list[str], fingerprint: str | None) -> None:
        """Closed and one line when ``diffs`` (or a ``fingerprint`` other than the contract's) say
        the graph was built for another model."""
        if fingerprint is not None and self.contract.fingerprint != fingerprint:
            diffs = diffs + [f"weights fingerprint {self.contract.fingerprint or None} vs {fingerprint}"]
        if diffs:
            self.close()
            raise _mismatch(self.what, self.path, diffs)

    def close(self) -> None:
        self.runner.close()


class GraphSpeakerEncoder(_Graph):
    """``__call__(audio) -> xvector [D] float32`` for mono float32 audio at the contract's rate."""

    what = "speaker encoder"

    def __init__(self, path, backend: str = "ort", *, config=None, fingerprint: str | None = None, **runner_kw):
        from rkspeech.contracts.clone import SpeakerEncoderContract

        super().__init__(path, backend, SpeakerEncoderContract, **runner_kw)
        c = self.contract
        self._refuse_mismatch([f"{k} {getattr(c, k)} vs {getattr(config, k)}" for k in ("mel_dim", "enc_dim", "sample_rate")
                               if config is not None and getattr(c, k) != getattr(config, k)], fingerprint)

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        from rkspeech.models.qwen3_tts.clone_inputs import log_mel

        mel = log_mel(audio, self.contract.sample_rate)
        if self.contract.frames is not None and mel.shape[1] != self.contract.frames:
            raise RkspeechError(f"the {self.name} takes exactly {self.contract.frames} mel frames; this reference "
                                f"gives {mel.shape[1]}")
        return np.asarray(self.runner.infer({"mel": mel})["xvector"], dtype=np.float32).reshape(-1)


class GraphSpeechEncoder(_Graph):
    """``__call__(audio) -> codes [T, G] int64`` for mono float32 audio at the contract's rate."""

    what = "speech encoder"

    def __init__(self, path, backend: str = "ort", *, num_code_groups: int | None = None,
                 fingerprint: str | None = None, **runner_kw):
        from rkspeech.contracts.clone import SpeechEncoderContract

        super().__init__(path, backend, SpeechEncoderContract, **runner_kw)
        g = self.contract.num_code_groups
        self._refuse_mismatch([f"codebooks {g} vs {num_code_groups}"] if num_code_groups not in (None, g) else [],
                              fingerprint)

    def __call__(self, audio: np.ndarray) -> np.ndarray:
        from rkspeech.models.qwen3_tts.clone_inputs import reference_codes, reference_feed

        a = np.asarray(audio, dtype=np.float32).reshape(-1)
        out = self.runner.infer(reference_feed(a, self.contract.samples_per_code))["codes"]
        return reference_codes(out, a.size, self.contract.samples_per_code)
