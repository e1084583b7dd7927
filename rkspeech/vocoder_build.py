"""``rkspeech build qwen3-tts-vocoder``: checkpoint -> verified, deployable .rknn step graphs + plan.

Stages: export (main + first ONNX, torch and onnxruntime stepwise checks) -> lint -> convert
(main, first; child process, contract in the custom string) -> inspect (container invariant,
target, contract) -> verify (simulator stepwise vs onnxruntime vs full decode) -> plan.json.

A re-run skips a stage whose inputs (checkpoint files, arguments, upstream artifacts: path,
size, mtime) are unchanged and whose outputs are still there; ``build-state.json`` in the
output folder records the fingerprints.  Each stage writes its outputs atomically, so an
interrupted build resumes from the last finished stage.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import time
from pathlib import Path

from . import progress
from .errors import RkspeechError
from .reporting import print_table, write_json
from .streaming.formulations import DEFAULT_FORMULATION, FORMULATIONS, SEED

TARGETS = ("rk3588", "rk3576", "rk3562", "rk3566", "rk3568")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model-dir", default=None, help="checkpoint (default $QWEN3_TTS_MODEL)")
    p.add_argument("--target", default="rk3588", choices=TARGETS)
    p.add_argument("--codes-length", "-B", type=int, default=64, help="tokens per main step (default 64)")
    p.add_argument("--first-length", type=int, default=16,
                   help="tokens of the first step (small B: earlier first audio); 0 = main only")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--verify-steps", type=int, default=3, help="main steps run on the simulator (default 3)")
    p.add_argument("--skip-verify", action="store_true", help="no simulator verification (it costs a rebuild)")
    p.add_argument("--sim-pieces", type=int, default=1,
                   help="verify on the simulator in N graph pieces, one at a time (bounded memory, N builds per step)")
    p.add_argument("--timeout", type=float, default=None, help="per-conversion timeout, seconds")
    p.add_argument("--fail-on-cpu", action="store_true", help="fail when compute ops land on the CPU")
    p.add_argument("--formulation", choices=FORMULATIONS, default=DEFAULT_FORMULATION,
                   help="step graph formulation (npu: no CPU fallback, no REGTASK overflow; see docs)")
    p.add_argument("--force", action="store_true", help="re-run every stage")


# ---- stage bookkeeping ---------------------------------------------------------------------
def _stat(path: Path) -> list:
    st = path.stat()
    return [str(path), st.st_size, st.st_mtime_ns]


def _fingerprint(stage: str, args: dict, inputs: list[Path]) -> str:
    data = json.dumps({"stage": stage, "args": args, "inputs": [_stat(p) for p in inputs]}, sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()


class StageState:
    def __init__(self, out: Path, force: bool):
        self.path = out / "build-state.json"
        self.force = force
        try:
            self.data = json.loads(self.path.read_text()) if self.path.is_file() else {}
        except (OSError, json.JSONDecodeError):
            self.data = {}

    def fresh(self, stage: str, fp: str) -> dict | None:
        entry = self.data.get(stage)
        if self.force or not entry or entry.get("fingerprint") != fp:
            return None
        for out in entry.get("outputs", []):
            p = Path(out[0])
            if not p.is_file() or _stat(p) != out:
                return None
        return entry

    def record(self, stage: str, fp: str, outputs: list[Path], report: dict) -> None:
        self.data[stage] = {"fingerprint": fp, "outputs": [_stat(p) for p in outputs], "report": report}
        write_json(self.path, self.data)


# ---- the build -----------------------------------------------------------------------------
def build_vocoder(args: argparse.Namespace) -> dict:
    from .models.qwen3_checkpoint import resolve_checkpoint

    if args.codes_length < 1:
        raise RkspeechError(f"--codes-length must be >= 1, got {args.codes_length}")
    first_B = args.first_length or None
    if first_B is not None and first_B < 1:
        raise RkspeechError(f"--first-length must be >= 0, got {args.first_length}")
    files = resolve_checkpoint(args.model_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    state = StageState(out, args.force)
    summary: dict = {"formulation": getattr(args, "formulation", DEFAULT_FORMULATION), "target": args.target, "B": args.codes_length, "first_B": first_B, "stages": {}}
    started = time.perf_counter()

    def stage(name: str, arg_dict: dict, inputs: list[Path], outputs_fn, run_fn) -> dict:
        fp = _fingerprint(name, arg_dict, inputs)
        entry = state.fresh(name, fp)
        if entry is not None:
            progress.info(f"skip: {name} (inputs unchanged)")
            summary["stages"][name] = {"skipped": True}
            return entry["report"]
        progress.info(f"== {name}")
        t0 = time.perf_counter()
        report = run_fn()
        state.record(name, fp, outputs_fn(), report)
        summary["stages"][name] = {"seconds": round(time.perf_counter() - t0, 1)}
        return report

    ckpt_inputs = [files.config, files.weights]
    onnx_dir, rknn_dir = out / "onnx", out / "rknn"
    formulation = getattr(args, "formulation", DEFAULT_FORMULATION)
    tag = "" if formulation == SEED else f"_{formulation}"
    main_onnx = onnx_dir / f"vocoder{tag}_step_B{args.codes_length}.onnx"
    first_onnx = onnx_dir / f"vocoder{tag}_step_B{args.codes_length}_first_B{first_B}.onnx" if first_B else None

    def do_export():
        from .vocoder_export import export_vocoder

        res = export_vocoder(files.folder, args.codes_length, output=main_onnx, first_length=first_B,
                             formulation=formulation)
        return res.report

    export_report = stage("export", {"B": args.codes_length, "first": first_B, "formulation": formulation}, ckpt_inputs,
                          lambda: [main_onnx] + ([first_onnx] if first_onnx else []), do_export)

    roles = {"main": main_onnx} | ({"first": first_onnx} if first_onnx else {})

    def do_lint():
        from .export.lint import lint_model

        rep = {}
        for role, path in roles.items():
            lr = lint_model(path, args.target)
            rep[role] = lr.to_dict()
            if lr.errors:
                raise RkspeechError(f"lint: {path} has {len(lr.errors)} error(s): "
                                    + "; ".join(f.message for f in lr.errors[:3]))
        return rep

    lint_report = stage("lint", {"target": args.target}, list(roles.values()), lambda: [], do_lint)

    rknn_paths = {role: rknn_dir / f"{p.stem}_{args.target}.rknn" for role, p in roles.items()}
    convert_reports = {}
    for role, onnx_path in roles.items():
        def do_convert(role=role, onnx_path=onnx_path):
            from .export.onnx_contract import read_onnx_contract
            from .rknn.convert import convert

            rknn_dir.mkdir(parents=True, exist_ok=True)
            contract = read_onnx_contract(onnx_path)
            res = convert(onnx_path, rknn_paths[role], target=args.target, dtype="fp16",
                          timeout=args.timeout, custom_string=contract.to_json())
            return res.to_report()

        convert_reports[role] = stage(f"convert_{role}", {"target": args.target, "timeout": args.timeout},
                                      [onnx_path], lambda role=role: [rknn_paths[role]], do_convert)

    def do_inspect():
        from .rknn.container import read_container

        rep = {}
        for role, path in rknn_paths.items():
            info = read_container(path, expect_target=args.target)
            if info.contract is None:
                raise RkspeechError(f"{path}: the contract did not survive conversion")
            rep[role] = {"bytes": info.file_size, "format": info.format, "target": info.target,
                         "toolkit_version": info.toolkit_version, "B": info.contract.codes_length,
                         "cache_numel": info.contract.cache_numel, "node_counts": info.node_counts()}
        return rep

    inspect_report = stage("inspect", {"target": args.target}, list(rknn_paths.values()), lambda: [], do_inspect)

    verify_report = None
    if not args.skip_verify:
        def do_verify():
            from .vocoder_verify import load_artifact, verify_vocoder

            main_a = load_artifact(main_onnx, rknn_paths["main"], args.target)
            first_a = load_artifact(first_onnx, rknn_paths["first"], args.target) if first_onnx else None
            res = verify_vocoder(files.folder, main_a, first_a, steps=args.verify_steps, target=args.target,
                                 sim_pieces=getattr(args, "sim_pieces", 1),
                                 sim_log=str(out / "simulator.log"))
            return res.to_report()

        verify_report = stage("verify", {"steps": args.verify_steps, "target": args.target,
                                         "sim_pieces": getattr(args, "sim_pieces", 1)},
                              ckpt_inputs + list(roles.values()) + list(rknn_paths.values()), lambda: [], do_verify)

    from .export.onnx_contract import read_onnx_contract
    from .plan import write_plan

    contracts = {role: read_onnx_contract(p) for role, p in roles.items()}
    plan_path = write_plan(out / "plan.json", impl="rknn", target=args.target, contracts=contracts,
                           rknn=rknn_paths, onnx=roles,
                           extra={"checkpoint": str(files.folder), "formulation": contracts["main"].formulation,
                                  "dtype": "fp16"})
    summary.update({
        "plan": str(plan_path),
        "seconds": round(time.perf_counter() - started, 1),
        "export": export_report,
        "lint": {r: {"errors": v["errors"], "warnings": v["warnings"]} for r, v in lint_report.items()},
        "convert": convert_reports,
        "inspect": inspect_report,
        "verify": verify_report,
    })
    write_json(out / "build-report.json", summary)
    if args.fail_on_cpu:
        bad = {r: c["placement"].get("cpu_ops", 0) for r, c in convert_reports.items() if c["placement"].get("cpu_ops")}
        if bad:
            raise RkspeechError(f"compute ops on the CPU: {bad} (see {out / 'build-report.json'})")
    return summary


def _table(summary: dict) -> list[tuple]:
    rows = [("target", summary["target"]), ("B main / first", f"{summary['B']} / {summary['first_B'] or '-'}")]
    e = summary["export"]
    rows.append(("SNR torch step / onnxruntime step", f"{e['snr_db']['torch_step']:.1f} / {e['snr_db']['onnxruntime_step']:.1f} dB"))
    rows.append(("ONNX nodes (main)", e["onnx"]["nodes"]))
    for role, c in summary["convert"].items():
        pl, b = c["placement"], c["build"]
        types = ", ".join(f"{k} x{v}" for k, v in sorted(pl.get("cpu_op_types", {}).items(), key=lambda kv: -kv[1])[:6])
        rows.append((f"{role}: NPU / CPU ops", f"{pl.get('npu_ops')} / {pl.get('cpu_ops')}" + (f"  ({types})" if types else "")))
        rows.append((f"{role}: build", f"{b['seconds']:.0f} s, peak {b['peak_rss_mb']} MB, REGTASK lines {b['regtask_overflow_lines']:,}"))
        rows.append((f"{role}: .rknn", f"{c['rknn']['bytes'] / 1e6:.1f} MB"))
    v = summary.get("verify")
    if v:
        s = v["snr_db"]
        rows.append(("simulator step vs full decode", f"{s['rknn_sim_step']:.1f} dB (onnxruntime {s['onnxruntime_step']:.1f} dB)"))
        rows.append(("simulator vs onnxruntime", f"{v['sim_vs_onnxruntime_db']:.1f} dB"))
    skipped = [k for k, st in summary["stages"].items() if st.get("skipped")]
    if skipped:
        rows.append(("skipped (unchanged)", ", ".join(skipped)))
    rows.append(("plan", summary["plan"]))
    rows.append(("total", f"{summary['seconds']:.0f} s"))
    return rows


def run(args: argparse.Namespace) -> int:
    summary = build_vocoder(args)
    print_table("qwen3-tts-vocoder build (NPU numerics from the x86 simulator; no board here)", _table(summary))
    v = summary.get("verify")
    if v and v["snr_db"]["rknn_sim_step"] < 40.0:
        progress.info(f"warning: simulator SNR {v['snr_db']['rknn_sim_step']:.1f} dB is below 40 dB")
    return 0
