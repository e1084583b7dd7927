"""The offloaded Whisper encoder: :func:`open_encoder`, any runner behind the decoder's interface.

``rkspeech transcribe`` and library users go through
:class:`rkspeech.runtime.whisper.model.WhisperModel` (faster-whisper's whole transcribe with the
encoder offloaded); the build's checks (``pipelines.whisper_encoder``) run one graph through
:func:`open_encoder`.  ``Whisper.generate`` takes an already-encoded ``[1, 1500, d]`` StorageView
in place of mel features, so the stock decoder runs unchanged behind the offloaded encoder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import ENCODER_FRAMES, output_frames

# --------------------------------------------------------------------------------------------
# The offloaded encoder: any runner (rkspeech.runtime.runners) behind the decoder's interface
# --------------------------------------------------------------------------------------------


class RunnerEncoder:
    """``mel [1, n_mels, 3000] -> encoder output [1, 1500, d] float32`` over a runner's ``infer``.

    The graph has one input and one output; their names are read from the runner."""

    def __init__(self, runner, backend: str):
        ins, outs = runner.input_specs(), runner.output_specs()
        if len(ins) != 1 or len(outs) != 1:
            runner.close()
            raise RkspeechError(f"a Whisper encoder graph has one input and one output; this one has "
                                f"inputs {list(ins)} and outputs {list(outs)}")
        self.runner = runner
        self.backend = backend
        (self.input_name,), (self.output_name,) = ins, outs

    def __call__(self, mel: np.ndarray) -> np.ndarray:
        out = self.runner.infer({self.input_name: mel})[self.output_name]
        return np.ascontiguousarray(out, dtype=np.float32)  # the decoder wants contiguous float32

    def close(self) -> None:
        self.runner.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_encoder(backend: str, encoder_path: str | Path, *, target: str | None = None,
                 threads: int | None = None, core_mask: str | None = None,
                 memory_limit_mb: float | None | str = "auto", log_path: str | None = None) -> RunnerEncoder:
    """The offloaded encoder on ``backend`` (ort | sim | rknnlite; see ``runners.open_runner``).

    ``sim`` runs the simulator in a child process: a crash or the memory limit there is an
    RkspeechError.  Given a .rknn, ``sim`` builds from the .onnx beside it (``rkspeech build
    whisper-encoder`` writes both; the x86 simulator cannot run a .rknn).  An ONNX encoder whose
    output is not the [1, 1500, d] the decoder attends to is refused before it is opened."""
    from rkspeech.runtime.runners import check_runner_file, open_runner

    path = Path(encoder_path)
    if backend == "sim" and path.suffix.lower() == ".rknn" and path.with_suffix(".onnx").is_file():
        path = path.with_suffix(".onnx")
    path = check_runner_file(backend, path)
    if path.suffix.lower() == ".onnx":
        _check_onnx_geometry(path)
    runner = open_runner(backend, path, threads=threads, target=target, core_mask=core_mask,
                         memory_limit_mb=memory_limit_mb, log_path=log_path)
    return RunnerEncoder(runner, backend)


def _check_onnx_geometry(path: Path) -> None:
    """Refuse an ONNX encoder whose window does not give the 1500 frames the decoder attends to,
    unless its metadata says it is a window bucket (``export.whisper_onnx``: ``[1, n_mels, n]
    -> [1, n / 2, d]``, run beside the 30 s graph)."""
    import json

    import onnx

    from rkspeech.export.whisper_onnx import METADATA_KEY

    proto = onnx.load(str(path), load_external_data=False)
    meta = next((json.loads(e.value) for e in proto.metadata_props if e.key == METADATA_KEY), {})
    ins = proto.graph.input[0].type.tensor_type.shape.dim
    out = proto.graph.output[0].type.tensor_type.shape.dim
    shape = [d.dim_value if d.HasField("dim_value") else None for d in out]
    frames = ins[-1].dim_value if len(ins) == 3 and ins[-1].HasField("dim_value") else None
    want = output_frames(frames) if meta.get("bucket") and frames else ENCODER_FRAMES
    if len(shape) != 3 or shape[1] != want:
        raise RkspeechError(
            f"{path}: encoder output shape {shape}; the Whisper decoder needs [1, 1500, d] "
            "(a 30 s window; re-export with `rkspeech build whisper-encoder`)"
        )
