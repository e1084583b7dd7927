"""``rkspeech build qwen3-tts-vocoder``: flags -> ``VocoderBuildOptions``, summary table."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ACCURACY_MAP, ADVANCED, INPUT, NPU, OUTPUT, SIM_CHECK, Flags
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.contracts.formulations import CHOICES, DEFAULT_FORMULATION
from rkspeech.core.thresholds import SIM_MIN_SNR_DB

HELP = "Qwen3-TTS 12 Hz vocoder step graph -> .rknn"


def add_arguments(p: argparse.ArgumentParser) -> None:
    f = Flags(p, "build qwen3-tts-vocoder")
    f.add(INPUT, "--model-dir", default=None, metavar="DIR", help="checkpoint (default $QWEN3_TTS_MODEL)")
    f.add(OUTPUT, "--out-dir", writes="folder", required=True, metavar="DIR", help="output folder")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS)
    f.add(NPU, "--codes-length", "-B", type=int, default=64, help="tokens per main step (default 64)")
    f.add(NPU, "--first-length", type=int, default=16,
          help="tokens of the first step (small B: earlier first audio); 0 = main only")
    f.add(NPU, "--formulation", choices=CHOICES, default=DEFAULT_FORMULATION,
          help="step graph formulation (npu: no CPU fallback, no REGTASK overflow; reference "
               "(alias seed): the model's own ops; see docs)")
    f.add(NPU, "--timeout", type=float, default=None, help="per-conversion timeout, seconds")
    f.add(NPU, "--fail-on-cpu", action="store_true", help="fail when compute ops land on the CPU")
    f.add(SIM_CHECK, "--skip-sim", action="store_true",
          help="no simulator verification (it costs a rebuild)")
    f.add(SIM_CHECK, "--pieces", type=int, default=1, metavar="N",
          help="verify on the simulator in N graph pieces, one at a time (bounded memory, N builds per step)")
    f.add(SIM_CHECK, "--verify-steps", type=int, default=3, help="main steps run on the simulator (default 3)")
    f.add(ACCURACY_MAP, "--accuracy-pieces", type=int, default=0, metavar="N",
          help="also map the main step's accuracy in N blocks (fp16 simulator vs fp32, step "
               "3 of a stepwise decode): headline in build-report.json, the map in "
               "accuracy-report.json (rkspeech verify --plot draws it); about one more "
               "conversion of cost (default 0: off)")
    f.add(ACCURACY_MAP, "--accuracy-skip-sim", action="store_true",
          help="the accuracy map without the simulator (fp32 and the fp16 storage model only)")
    f.add(ADVANCED, "--force", action="store_true", help="re-run every stage")


def options_from(args: argparse.Namespace):
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions

    return VocoderBuildOptions(
        out_dir=args.out_dir, model_dir=args.model_dir, target=args.target, codes_length=args.codes_length,
        first_length=args.first_length, verify_steps=args.verify_steps, skip_sim=args.skip_sim,
        pieces=args.pieces, timeout=args.timeout, fail_on_cpu=args.fail_on_cpu,
        formulation=args.formulation, force=args.force, accuracy_pieces=args.accuracy_pieces,
        accuracy_sim=not args.accuracy_skip_sim)


def summary_rows(summary: dict) -> list[tuple]:
    from rkspeech.core.compare import db_text

    rows = [("target", summary["target"]), ("B main / first", f"{summary['B']} / {summary['first_B'] or '-'}")]
    e = summary["export"]
    rows.append(("SNR torch step / onnxruntime step",
                 f"{db_text(e['snr_db']['torch_step'])} / {db_text(e['snr_db']['onnxruntime_step'])} dB"))
    rows.append(("ONNX nodes (main)", e["onnx"]["nodes"]))
    h = summary.get("export_host") or {}
    if h.get("snr_db"):  # the exact graphs the host backends run (plan.json host_onnx)
        rows.append(("host graphs (reference): torch / onnxruntime step",
                     f"{db_text(h['snr_db']['torch_step'])} / {db_text(h['snr_db']['onnxruntime_step'])} dB "
                     "(what --backend ort runs)"))
    for role, c in summary["convert"].items():
        pl, b = c["placement"], c["build"]
        types = ", ".join(f"{k} x{v}" for k, v in sorted(pl.get("cpu_op_types", {}).items(), key=lambda kv: -kv[1])[:6])
        rows.append((f"{role}: NPU / CPU ops", f"{pl.get('npu_ops')} / {pl.get('cpu_ops')}" + (f"  ({types})" if types else "")))
        rows.append((f"{role}: build", f"{b['seconds']:.0f} s, peak {b['peak_rss_mb']} MB, "
                                       f"REGTASK lines {b['regtask_overflow_lines']:,}"))
        rows.append((f"{role}: .rknn", f"{c['rknn']['bytes'] / 1e6:.1f} MB"))
        est = (summary.get("estimate") or {}).get(role)
        if est and est.get("audio_s"):
            rtf = est["rtf_by_cores"]
            rows.append((f"{role}: est. board step (rkspeech estimate)",
                         f"{est['est_step_ms']:.1f} ms per {est['audio_s']:g} s of audio, {est['traffic_mb']:,.0f} MB "
                         f"traffic; RTF 1 core {float(rtf.get(1, rtf.get('1'))):.3g}, "
                         f"3 cores {float(rtf.get(3, rtf.get('3', 'nan'))):.3g} "
                         "(compiler cycles at 1 GHz, 17 GB/s: docs/estimate.md)"))
        elif est and est.get("error"):
            rows.append((f"{role}: est. board step", est["error"][:120]))
    v = summary.get("verify")
    if v:
        s = v["snr_db"]
        rows.append(("simulator step vs full decode",
                     f"{db_text(s['rknn_sim_step'])} dB (onnxruntime {db_text(s['onnxruntime_step'])} dB)"))
        rows.append(("simulator vs onnxruntime", f"{db_text(v['sim_vs_onnxruntime_db'])} dB"))
    rows.extend(accuracy_rows(summary.get("accuracy")))
    skipped = [k for k, st in summary["stages"].items() if st.get("skipped")]
    if skipped:
        rows.append(("skipped (unchanged)", ", ".join(skipped)))
    rows.append(("plan", summary["plan"]))
    rows.append(("total", f"{summary['seconds']:.0f} s"))
    return rows


def accuracy_rows(acc: dict | None) -> list[tuple]:
    """The accuracy stage's headline (``rkspeech.accuracy.report.headline``) as table rows."""
    if not acc:
        return []

    def db(x):
        return "-" if x is None else f"{x:.1f}"

    how = "simulator, blocks chained" if acc["simulated"] else "fp16 storage model"
    rows = []
    for name, d in acc["final_snr_db"].items():
        rows.append((f"accuracy map: {name} vs fp32",
                     f"{db(d.get('sim_pieces') if acc['simulated'] else d.get('fp16_model'))} dB ({how}, "
                     f"{acc['pieces']} blocks; fp16 storage model {db(d.get('fp16_model'))} dB)"))
    key = "sim_local" if acc["simulated"] else "fp16_model_local"
    rows.append(("accuracy map: worst blocks (local dB)",
                 "; ".join(f"{b['index']} {b['label'][:28]} {db(b.get(key))}" for b in acc["worst_blocks"])))
    rows.append(("accuracy map: worst layers (fp16 model)",
                 "; ".join(f"{e['node'][:28]} {db(e['fp16_model_snr_db'])}" for e in acc["worst_layers"][:3])))
    if acc["overflow"]:
        rows.append(("accuracy map: fp16 overflow", ", ".join(acc["overflow"][:4])))
    rows.append(("accuracy map", acc["report"]))
    return rows


def print_summary(summary: dict) -> None:
    from rkspeech.core import progress
    from rkspeech.core.compare import db_value
    from rkspeech.core.reporting import print_table

    print_table("qwen3-tts-vocoder build (NPU numerics from the x86 simulator; no board here)", summary_rows(summary))
    v = summary.get("verify")
    if v and db_value(v["snr_db"]["rknn_sim_step"]) < SIM_MIN_SNR_DB:
        progress.info(f"warning: simulator SNR {v['snr_db']['rknn_sim_step']:.1f} dB is below {SIM_MIN_SNR_DB:.0f} dB")


def run(args: argparse.Namespace) -> int:
    from rkspeech.pipelines.vocoder_build import build_vocoder

    print_summary(build_vocoder(options_from(args)))
    return 0
