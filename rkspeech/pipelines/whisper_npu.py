"""Steps 4-5 of ``rkspeech build whisper-encoder`` for one exported window (``pipelines.whisper_encoder``
holds steps 1-3, the plan and the report): the shared lint / convert / inspect sequence
(``pipelines.sequence``), then the simulator on the build's check window, whose outputs become
the graphs' golden replays; for ``pieces > 1`` the graph is first cut at encoder-block
boundaries and the pieces are chained on the simulator, each in its own child.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
import time
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.models.whisper.window import WINDOW_SECONDS
from rkspeech.plan.integrity import golden_path


@dataclass(frozen=True)
class Window:
    """One window's graph in the build: its files, its plan role and its stages' names."""

    seconds: int
    frames: int | None  # None: the model's full window (``--frames``, default 3000)
    role: str  # the plan's artifact role: "encoder" (30 s, as before buckets) or "10s"
    onnx: Path
    check: dict[str, Path]
    stage: str  # stage names: "whisper_" + stage + "export", ...

    @property
    def rknn(self) -> Path:
        return self.onnx.with_suffix(".rknn")

    @property
    def bucket(self) -> bool:
        return self.seconds != WINDOW_SECONDS


def load_check(check: dict[str, Path]):
    import numpy as np

    return np.load(check["mel"]), np.load(check["reference"])


def build_whole(args, stages, w: Window, report: dict) -> dict:
    """Steps 4-5 for one graph: the shared sequence, then the simulator on the check window."""
    from rkspeech.pipelines.sequence import Graph, run_sequence
    from rkspeech.core.compare import report_tensors as compare

    onnx_path, rknn_path, check, role = w.onnx, w.rknn, w.check, w.role
    graph = Graph(role, onnx_path, rknn_path, report["custom_string"])
    seq = run_sequence(stages, [graph], target=args.target, timeout=args.timeout, prefix=f"whisper_{w.stage}",
                       convert=not args.skip_convert, **_golden(args, report, check))
    report["golden"] = seq["golden"]
    report["lint"] = seq["lint"][role]
    if args.skip_convert:
        return report
    report["conversion"], report["inspect"] = seq["convert"][role], seq["inspect"][role]
    if not args.skip_sim:
        def work():
            mel, ref = load_check(check)
            sim_out, sim_cost = _simulate(onnx_path, mel, args.target)
            _save_golden(rknn_path, role, {report["onnx"]["input"]["name"]: mel},
                         {report["onnx"]["output"]["name"]: sim_out}, args.target)
            return {**compare(ref, sim_out), **sim_cost}

        report["simulator"] = stages.run(f"whisper_{w.stage}simulate", {"target": args.target, "golden": 1},
                                         [onnx_path, rknn_path, *check.values()], lambda: [golden_path(rknn_path)],
                                         work)
    return report


def build_pieces(args, stages, onnx_path: Path, out_dir: Path, check: dict[str, Path], report: dict) -> dict:
    """Steps 4-5 for ``pieces > 1``: split, the shared sequence per piece, the pieces chained on
    the simulator."""
    from rkspeech.pipelines.sequence import Graph, run_sequence
    from rkspeech.core.compare import report_tensors as compare

    def do_split():
        import gc

        from rkspeech.core import progress
        from rkspeech.export.split import split_onnx
        from rkspeech.runtime.whisper.pieces import write_manifest

        with progress.stage(f"cut the graph into {args.pieces} pieces at block boundaries"):
            cuts = block_cuts(onnx_path, args.pieces)
            paths = []
            for k, p in enumerate(split_onnx(onnx_path, args.pieces, out_dir / "pieces", cuts=cuts)):
                paths.append(p.rename(out_dir / f"encoder.part{k}.onnx"))
                data = p.with_name(p.name + ".data")
                if data.is_file():  # the piece names its data file by this name: keep it beside it
                    data.rename(out_dir / data.name)
            (out_dir / "pieces").rmdir()
            gc.collect()
        # the handle transcription takes (rkspeech transcribe --encoder OUT/encoder-pieces.json)
        manifest = write_manifest(out_dir, paths, input_name=report["onnx"]["input"]["name"],
                                  output_name=report["onnx"]["output"]["name"],
                                  custom_string=report["custom_string"], target=args.target)
        return {"cuts": cuts, "pieces": [str(p) for p in paths], "manifest": str(manifest)}

    def split_outputs() -> list[Path]:
        found = sorted(out_dir.glob("encoder.part*.onnx*"))
        return found + [out_dir / "encoder-pieces.json"]

    # the fingerprint keeps its key ("parts", the flag's old name): a folder built before resumes
    report["split"] = stages.run("whisper_split", {"parts": args.pieces, "target": args.target}, [onnx_path],
                                 split_outputs, do_split)
    paths = [Path(p) for p in report["split"]["pieces"]]
    graphs = [Graph(f"part{k}", p, p.with_suffix(".rknn"), report["custom_string"] if k == 0 else None)
              for k, p in enumerate(paths)]
    seq = run_sequence(stages, graphs, target=args.target, timeout=args.timeout, prefix="whisper_",
                       convert=not args.skip_convert, **_golden(args, report, check))
    report["golden"] = seq["golden"]
    report["lint"] = seq["lint"]
    if args.skip_convert:
        return report
    report["conversion_pieces"] = [seq["convert"][g.role] for g in graphs]
    report["inspect"] = seq["inspect"]
    if not args.skip_sim:
        def work():
            from rkspeech.core import progress
            from rkspeech.runtime.runners.sim_process import SimulatorProcess

            mel, ref = load_check(check)
            env = {report["onnx"]["input"]["name"]: mel}
            sims = []
            for k, path in enumerate(paths):
                with progress.stage(f"simulator, piece {k + 1}/{len(paths)}: build and run"):
                    t0 = time.perf_counter()
                    with SimulatorProcess(path, target=args.target, dtype="fp16") as sim:
                        t1 = time.perf_counter()
                        feed = {n: env[n] for n in sim.input_specs()}
                        outs = sim.infer(feed)
                        env.update(outs)
                        t2 = time.perf_counter()
                        peak = sim.peak_rss_mb
                    _save_golden(graphs[k].rknn, graphs[k].role, feed, outs, args.target)
                sims.append({"build_s": round(t1 - t0, 3), "seconds": round(t2 - t1, 3),
                             "peak_rss_mb": round(peak, 1)})
            out = env[report["onnx"]["output"]["name"]]
            return {**compare(ref, out), "pieces": sims, "build_s": round(sum(s["build_s"] for s in sims), 3),
                    "seconds": round(sum(s["seconds"] for s in sims), 3),
                    "peak_rss_mb": max(s["peak_rss_mb"] for s in sims)}

        report["simulator"] = stages.run("whisper_simulate", {"target": args.target, "golden": 1},
                                         [*paths, *(g.rknn for g in graphs), *check.values()],
                                         lambda: [golden_path(g.rknn) for g in graphs], work)
    return report


def block_cuts(onnx_path, pieces: int) -> list[int]:
    """Where pieces 2..``pieces`` start (indices into ``split.work_nodes``, as ``split_onnx``
    takes them): the first node of encoder block ``round(k * n_layers / pieces)``, so only the
    residual stream ``[1, 1500, d]`` crosses each cut.  Reads the graph without its weights."""
    import re

    import onnx

    from rkspeech.export.split import work_nodes

    proto = onnx.load(os.fspath(onnx_path), load_external_data=False)
    first: dict[int, int] = {}
    work = work_nodes(proto.graph)
    for i, node in enumerate(work):
        m = re.match(r"/blocks\.(\d+)/", node.name)
        if m:
            first.setdefault(int(m.group(1)), i)
    layers = len(first)
    if not 2 <= pieces <= layers:
        raise RkspeechError(f"cannot cut an encoder of {layers} blocks into {pieces} pieces at block boundaries")
    return [first[round(k * layers / pieces)] for k in range(1, pieces)]


def _golden(args, report: dict, check: dict[str, Path]) -> dict:
    """``run_sequence``'s golden keywords when the build skips the simulator: the check window
    replayed on onnxruntime.  Otherwise the simulator stage writes the goldens from its own runs
    (``_save_golden``), so no graph is built on the simulator twice."""
    if not (args.skip_convert or args.skip_sim):
        return {}
    return {"golden": "ort", "golden_given": {report["onnx"]["input"]["name"]: check["mel"]}}


def _save_golden(rknn_path: Path, role: str, inputs: dict, outputs: dict, target: str) -> None:
    """The golden replay of one encoder call the simulator stage just ran (``runtime.golden``)."""
    from rkspeech.runtime.golden import Golden, save_golden

    save_golden(golden_path(rknn_path), Golden(role, [dict(inputs)], outputs=[dict(outputs)],
                                               meta={"inputs": "the build's check window", "source": "sim",
                                                     "target": target, "dtype": "fp16"}))


def _simulate(onnx_path: Path, mel, target: str):
    """The simulator's output on ``mel`` and its cost: ``build_s`` (graph build in the child),
    ``seconds`` (one call), ``peak_rss_mb`` (the child's largest RSS: the simulator keeps every
    intermediate tensor, so this, not the conversion, is what grows fastest with model size)."""
    import time

    from rkspeech.runtime.whisper.encoder import open_encoder

    start = time.perf_counter()
    with open_encoder("sim", onnx_path, target=target) as enc:
        built = time.perf_counter()
        out = enc(mel)
        done = time.perf_counter()
        peak = getattr(enc.runner, "peak_rss_mb", None)
    return out, {"seconds": round(done - built, 3), "build_s": round(built - start, 3),
                 "peak_rss_mb": None if peak is None else round(peak, 1)}
