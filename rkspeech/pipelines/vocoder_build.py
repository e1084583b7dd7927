"""Checkpoint -> verified, deployable .rknn step graphs + plan, for the Qwen3-TTS vocoder.

Stages: export (main + first ONNX, torch and onnxruntime stepwise checks) -> export_host (the
same B and first B in the ``reference`` formulation, checked the same way: the exact graphs the
host backends run; no lint or conversion, they never reach the NPU; skipped when the build's
formulation is already ``reference``) -> lint -> convert (main, first; child process, contract in
the custom string) -> inspect (container invariant, target, contract) -> verify (simulator
stepwise vs onnxruntime vs full decode) -> accuracy (optional, ``accuracy_pieces`` > 0: the main
step's per-block accuracy map, ``rkspeech.accuracy``; its headline in the build report, the full
map in ``accuracy-report.json``) -> plan.json (``host_onnx`` for ``ort``, ``onnx`` for ``sim``,
the .rknn for ``rknnlite``: ``plan.plan``).  Each stage is skipped when its inputs are unchanged
(``pipelines.resumable``).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rkspeech.contracts.read import read_contract
from rkspeech.contracts.vocoder import VocoderContract
from rkspeech.core.atomic import check_writable, folder_lock, write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.pipelines.sequence import Graph, run_sequence
from rkspeech.pipelines.resumable import StageRunner
from rkspeech.plan.paths import BUILD_REPORT, PLAN_FILE
from rkspeech.contracts.formulations import DEFAULT_FORMULATION, REFERENCE, canonical, file_tag



@dataclass(frozen=True)
class VocoderBuildOptions:
    out_dir: str | os.PathLike  # output folder
    model_dir: str | os.PathLike | None = None  # None: $QWEN3_TTS_MODEL
    target: str = DEFAULT_TARGET
    codes_length: int = 64  # B of the main step
    first_length: int | None = 16  # B of the first step (earlier first audio); None or 0: main only
    verify_steps: int = 3  # main steps run on the simulator
    skip_sim: bool = False
    pieces: int = 1  # simulate in N graph pieces, one child at a time (bounded memory)
    timeout: float | None = None  # per conversion, seconds
    fail_on_cpu: bool = False
    formulation: str = DEFAULT_FORMULATION
    force: bool = False  # re-run every stage
    # accuracy map of the main step in N blocks (0: off, the default); each block is one more
    # simulator build, so it costs about one more conversion (rkspeech.accuracy.stage)
    accuracy_pieces: int = 0
    accuracy_sim: bool = True  # False: the map's fp16 storage model only (no simulator builds)


def _validate(o: VocoderBuildOptions) -> None:
    if o.codes_length < 1:
        raise RkspeechError(f"--codes-length must be >= 1, got {o.codes_length}")
    if o.first_length is not None and o.first_length < 0:
        raise RkspeechError(f"--first-length must be >= 0, got {o.first_length}")
    if o.target not in TARGETS:
        raise RkspeechError(f"unknown target {o.target!r}; choose one of {', '.join(TARGETS)}")
    if o.verify_steps < 1:
        raise RkspeechError(f"--verify-steps must be >= 1, got {o.verify_steps}")
    if o.pieces < 1:
        raise RkspeechError(f"--pieces must be >= 1, got {o.pieces}")
    from rkspeech.accuracy.stage import check_pieces

    check_pieces(o.accuracy_pieces)
    if not o.accuracy_sim and not o.accuracy_pieces:
        raise RkspeechError("--accuracy-skip-sim applies to the accuracy map: give --accuracy-pieces N too")


def build_vocoder(options: VocoderBuildOptions) -> dict:
    """Run (or resume) the build; returns the summary that is also written to ``BUILD_REPORT``.

    The output folder is checked (a folder, writable) and the checkpoint's config validated
    before any work, and the folder is locked for the build (``core.atomic.folder_lock``): a
    second build into it stops at once with "another build is using this folder (pid N)"."""
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import read_config, resolve_checkpoint

    o = options
    _validate(o)
    files = resolve_checkpoint(o.model_dir)
    read_config(files)
    out = check_writable(o.out_dir, what="output", folder=True)
    with folder_lock(out):
        return _build(o, files, out)


def _build(o: VocoderBuildOptions, files, out: Path) -> dict:
    B, first_B, formulation = o.codes_length, o.first_length or None, canonical(o.formulation)
    stages = StageRunner(out, o.force)
    started = time.perf_counter()

    ckpt_inputs = [files.config, files.weights]
    onnx_dir, rknn_dir = out / "onnx", out / "rknn"
    tag = file_tag(formulation)
    main_onnx = onnx_dir / f"vocoder{tag}_step_B{B}.onnx"
    roles = {"main": main_onnx}
    if first_B:
        roles["first"] = onnx_dir / f"vocoder{tag}_step_B{B}_first_B{first_B}.onnx"

    def do_export():
        from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder

        return export_vocoder(ExportOptions(model_dir=files.folder, codes_length=B, output=main_onnx,
                                            first_length=first_B, formulation=formulation)).report

    export_report = stages.run("export", {"B": B, "first": first_B, "formulation": formulation}, ckpt_inputs,
                               lambda: list(roles.values()), do_export)
    host_roles, host_report = _export_host(stages, files, onnx_dir, B, first_B, formulation, roles)

    rknn_paths = {role: rknn_dir / f"{p.stem}_{o.target}.rknn" for role, p in roles.items()}
    graphs = [Graph(role, path, rknn_paths[role], read_contract(path, VocoderContract).to_json())
              for role, path in roles.items()]
    # goldens: recorded by the verify stage on its own simulator builds (onnxruntime's when skipped)
    seq = run_sequence(stages, graphs, target=o.target, timeout=o.timeout, golden="ort" if o.skip_sim else None)
    lint_report, convert_reports, inspect_report = seq["lint"], seq["convert"], seq["inspect"]

    verify_report = None
    from rkspeech.plan.integrity import golden_path

    if not o.skip_sim:
        def do_verify():
            from rkspeech.verify.simulator import load_artifact, verify_vocoder

            artifacts = {role: load_artifact(roles[role], rknn_paths[role], o.target) for role in roles}
            return verify_vocoder(files.folder, artifacts["main"], artifacts.get("first"), steps=o.verify_steps,
                                  target=o.target, pieces=o.pieces, sim_log=str(out / "simulator.log"),
                                  goldens=goldens).to_report()

        goldens = {role: golden_path(p) for role, p in rknn_paths.items()}
        # "sim_pieces": the fingerprint keeps the flag's old name, so a folder built before resumes
        verify_report = stages.run("verify", {"steps": o.verify_steps, "target": o.target, "sim_pieces": o.pieces,
                                              "golden": 1},
                                   ckpt_inputs + list(roles.values()) + list(rknn_paths.values()),
                                   lambda: list(goldens.values()), do_verify)

    accuracy_report = None
    if o.accuracy_pieces:
        from rkspeech.accuracy.stage import ACCURACY_REPORT, STEP

        def do_accuracy():
            from rkspeech.accuracy.stage import map_step

            return map_step(main_onnx, out / ACCURACY_REPORT, target=o.target, pieces=o.accuracy_pieces,
                            simulate=o.accuracy_sim, sim_log=str(out / "simulator.log"))

        accuracy_report = stages.run("accuracy", {"pieces": o.accuracy_pieces, "target": o.target,
                                                  "simulate": o.accuracy_sim, "step": STEP},
                                     [main_onnx], lambda: [out / ACCURACY_REPORT], do_accuracy)

    from rkspeech.plan.plan import write_plan

    contracts = {role: read_contract(p, VocoderContract) for role, p in roles.items()}
    plan_path = write_plan(out / PLAN_FILE, placement="npu", target=o.target, contracts=contracts,
                           rknn=rknn_paths, onnx=roles, host_onnx=host_roles,
                           host_contracts={role: read_contract(p, VocoderContract) for role, p in host_roles.items()},
                           extra={"checkpoint": str(files.folder.resolve()), "formulation": contracts["main"].formulation,
                                  "dtype": "fp16"})
    summary = {
        "formulation": formulation, "target": o.target, "B": B, "first_B": first_B,
        "estimate": {role: _board_estimate(path) for role, path in rknn_paths.items()},
        "stages": stages.timings,
        "plan": str(plan_path),
        "seconds": round(time.perf_counter() - started, 1),
        "export": export_report,
        "export_host": host_report,
        "lint": {r: {"errors": v["errors"], "warnings": v["warnings"]} for r, v in lint_report.items()},
        "convert": convert_reports,
        "inspect": inspect_report,
        "golden": seq["golden"] or (verify_report or {}).get("golden"),
        "verify": verify_report,
        "accuracy": accuracy_report,
        "options": {k: str(v) if isinstance(v, Path) else v for k, v in asdict(o).items()},
    }
    write_json(out / BUILD_REPORT, summary)
    if o.fail_on_cpu:
        bad = {r: c["placement"].get("cpu_ops", 0) for r, c in convert_reports.items() if c["placement"].get("cpu_ops")}
        if bad:
            raise RkspeechError(f"compute ops on the CPU: {bad} (see {out / BUILD_REPORT})")
    return summary


def _export_host(stages: StageRunner, files, onnx_dir: Path, B: int, first_B: int | None, formulation: str,
                 roles: dict[str, Path]) -> tuple[dict[str, Path], dict]:
    """The exact step graphs the host backends run (``plan.json`` ``host_onnx``): the build's B
    and first B in the ``reference`` formulation, exported and checked stepwise (torch and
    onnxruntime against the full decode, ``FP32_MIN_SNR_DB``) by the same export as the NPU
    graphs, and never linted or converted.  A ``reference`` build's own graphs are already
    exact: they are returned as they are.  Returns (role -> path, the export report)."""
    if formulation == REFERENCE:
        return dict(roles), {"same_as": "export"}
    main = onnx_dir / f"vocoder{file_tag(REFERENCE)}_step_B{B}.onnx"
    host = {"main": main} | ({"first": main.with_name(f"{main.stem}_first_B{first_B}.onnx")} if first_B else {})

    def work():
        from rkspeech.pipelines.vocoder_export import ExportOptions, export_vocoder

        return export_vocoder(ExportOptions(model_dir=files.folder, codes_length=B, output=main,
                                            first_length=first_B, formulation=REFERENCE)).report

    report = stages.run("export_host", {"B": B, "first": first_B, "formulation": REFERENCE},
                        [files.config, files.weights], lambda: list(host.values()), work)
    return host, report


def _board_estimate(rknn_path: Path) -> dict:
    """``rkspeech estimate``'s headline figures (default assumptions, docs/estimate.md); a
    missing or unreadable build log is reported, not fatal."""
    from rkspeech.estimate.steptime import estimate_path

    try:
        rep = estimate_path(rknn_path).to_report()
    except RkspeechError as exc:
        return {"error": str(exc)}
    keys = ("est_step_ms", "est_step_ms_by_cores", "audio_s", "rtf_by_cores", "cores_for_realtime",
            "traffic_mb", "compute_ms", "traffic_ms")
    return {k: rep.get(k) for k in keys}
