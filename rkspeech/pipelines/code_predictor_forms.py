"""The two graph forms of the code predictor a build can make (``build qwen3-tts --code-predictor-form``).

* ``step`` (default): the stack alone, one NPU call per position (16 per frame), the host doing
  projection, heads, choice and embeddings (``runtime.tts.code_predictor_codebook``); samples as
  well as greedy.  Published 0.6B, rk3588 fp16: 170 NPU / 0 CPU ops, 0 REGTASK lines, a
  176.8 MB .rknn converted in 15 s at 2.25 GB peak RSS.
* ``frame``: the 15-codebook loop unrolled into one greedy-only call per frame
  (``stepgraph.code_predictor_step.CodePredictorFrame``); the compiler stores the stack once per
  unrolled pass: 2,473 / 0 ops, a 2.88 GB .rknn, 7 min and 18.9 GB to convert at the published size.

Both estimate the same work per frame (published: 16 x 7.63 M = 122 M cycles and 16 x 174 MB of
reads for the step, 119.6 M cycles and ~2.7 GB for the frame; docs/code-predictor-step.md).

Each form knows its file stem, how to export and check its graph, its contract reader, how to open
its backend (both have ``infer(hidden, first_embed)["logits"]`` for the verify stage) and how to
write an int16-hybrid calibration list from captured frames.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.errors import RkspeechError

FORMS = ("step", "frame")
DEFAULT_FORM = "step"


class FrameForm:
    name = role = "frame"
    stem = "code_predictor_onehot"

    def export(self, tts, path: Path, i16: bool, **layout) -> str:
        """``layout`` is the step form's; the frame graph has no cache input (ignored)."""
        from rkspeech.export.code_predictor_onnx import export_code_predictor_onnx
        from rkspeech.stepgraph.code_predictor_step import CodePredictorFrame

        step = CodePredictorFrame(tts.net.talker.code_predictor, embed="onehot", int16_ready=i16).eval()
        export_code_predictor_onnx(step, path)
        return step.contract().to_json()

    def read_contract(self, path):
        from rkspeech.contracts.code_predictor import CodePredictorContract
        from rkspeech.contracts.read import read_contract

        return read_contract(path, CodePredictorContract)

    def open(self, path, backend: str, *, model, **kw):
        from rkspeech.runtime.tts.open_stages import open_code_predictor

        return open_code_predictor(self.name, path, backend, model=model, **kw)

    @staticmethod
    def runner(g):
        """The graph's runner inside ``open``'s backend."""
        return g.runner

    def write_calibration(self, tts, captured, folder: Path, onnx_path: Path) -> list[str]:
        """One line per frame: its two inputs (absolute paths: the converter reads them from its
        own work folder)."""
        import numpy as np

        folder = folder.resolve()
        lines = []
        for i, (h, f, _) in enumerate(captured):
            a, b = folder / f"h{i}.npy", folder / f"f{i}.npy"
            np.save(a, h.numpy().astype(np.float32))
            np.save(b, f.numpy().astype(np.float32))
            lines.append(f"{a} {b}")
        return lines


class StepForm:
    name = role = "step"
    stem = "code_predictor_step"

    def export(self, tts, path: Path, i16: bool, **layout) -> str:
        """``layout``: ``kv_layout`` / ``cache_io`` (``code_predictor_step``'s; default the NPU's)."""
        from rkspeech.export.talker_onnx import export_talker_onnx
        from rkspeech.stepgraph.code_predictor_codebook import code_predictor_step
        from rkspeech.stepgraph.code_predictor_step import INT16_MASK
        from rkspeech.contracts.talker import MASK_VALUE

        step = code_predictor_step(tts.net.talker.code_predictor, mask_value=INT16_MASK if i16 else MASK_VALUE,
                                   **layout)
        export_talker_onnx(step, path)
        return step.contract().to_json()

    def read_contract(self, path):
        from rkspeech.contracts.read import read_contract
        from rkspeech.contracts.talker import TalkerContract
        from rkspeech.runtime.tts.code_predictor_codebook import check_step_contract

        return check_step_contract(read_contract(path, TalkerContract), Path(path))

    def open(self, path, backend: str, *, model, **kw):
        from rkspeech.runtime.tts.open_stages import open_code_predictor

        return open_code_predictor(self.name, path, backend, model=model, **kw)

    @staticmethod
    def runner(g):
        """The step graph's runner inside ``open``'s backend."""
        return g.stack.decode[0]

    def write_calibration(self, tts, captured, folder: Path, onnx_path: Path) -> list[str]:
        """One line per NPU call of the captured frames (16 a frame): the call's graph inputs as
        the host fed them (``onnx_path`` on onnxruntime runs the calls: the cache it passes on
        equals torch's to ~1e-6)."""
        import numpy as np

        folder = folder.resolve()  # absolute: the converter reads the list from its own work folder
        lines: list[str] = []
        with self.open(onnx_path, "ort", model=tts, threads=1) as g:
            names = g.contract.input_names
            runner = g.stack.decode[0]
            infer = runner.infer

            def record(feed):
                paths = []
                for n in names:
                    p = folder / f"{len(lines)}_{n}.npy"
                    np.save(p, np.asarray(feed[n], dtype=np.float32))
                    paths.append(str(p))
                lines.append(" ".join(paths))
                return infer(feed)

            runner.infer = record
            for h, f, _ in captured:
                g.infer(h.numpy()[0], f.numpy()[0])
        return lines


def get_form(name: str):
    if name not in FORMS:
        raise RkspeechError(f"unknown code predictor form {name!r}; choose one of {', '.join(FORMS)}")
    return StepForm() if name == "step" else FrameForm()
