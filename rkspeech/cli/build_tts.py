"""``rkspeech build qwen3-tts``: flags -> ``TTSBuildOptions``, one summary table per graph."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import ADVANCED, INPUT, NPU, OUTPUT, SIM_CHECK, Flags
from rkspeech.core.placement import PLACEMENTS
from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.core.thresholds import GATE_MODES
from rkspeech.pipelines.code_predictor_forms import DEFAULT_FORM, FORMS
from rkspeech.pipelines.cpu_stages import DEFAULT_CHECK_FRAMES
from rkspeech.contracts.formulations import CHOICES, DEFAULT_FORMULATION

HELP = "Qwen3-TTS talker + code predictor + vocoder -> one plan (.rknn step graphs)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    f = Flags(p, "build qwen3-tts")
    f.add(INPUT, "--model-dir", default=None, metavar="DIR", help="full Qwen3-TTS model root (default $QWEN3_TTS_MODEL)")
    f.add(INPUT, "--vocoder-plan", default=None,
          help="reuse this built qwen3-tts-vocoder plan.json (checked against the model) instead of "
               "building the vocoder; the vocoder flags below are then ignored")
    f.add(OUTPUT, "--out-dir", writes="folder", required=True, metavar="DIR",
          help="output folder (plan.json, build-report.json, graphs)")
    f.add(NPU, "--target", default=DEFAULT_TARGET, choices=TARGETS)
    f.add(NPU, "--codes-length", "-B", type=int, default=64, help="vocoder tokens per main step (default 64)")
    f.add(NPU, "--first-length", type=int, default=16, help="vocoder tokens of the first step; 0 = main only")
    f.add(NPU, "--formulation", choices=CHOICES, default=DEFAULT_FORMULATION, help="vocoder step formulation")
    f.add(NPU, "--code-predictor-dtype", choices=("fp16", "int16-hybrid"), default="fp16",
          help="code predictor conversion: fp16 (default) or int16-hybrid (w16a16i_dfp with fp16 layers, "
               "calibrated on --code-predictor-calibration-frames greedy frames)")
    f.add(NPU, "--code-predictor-form", choices=FORMS, default=DEFAULT_FORM,
          help="step (default): one NPU call per codebook position, the host picks each code (greedy "
               "or sampled); frame: the greedy frame unrolled into one call (needs ~19 GB to convert "
               "at the published size)")
    f.add(NPU, "--talker-capacity", type=int, default=512,
          help="talker KV positions (prompt + frames of the longest utterance; default 512)")
    f.add(NPU, "--talker-prefill", type=int, default=32, help="talker positions per prefill call")
    f.add(NPU, "--timeout", type=float, default=None, help="per-conversion timeout, seconds")
    f.add(NPU, "--fail-on-cpu", action="store_true", help="fail when compute ops land on the CPU")
    f.add(SIM_CHECK, "--skip-sim", action="store_true",
          help="no simulator verification (the talker's onnxruntime check is skipped with it)")
    f.add(SIM_CHECK, "--pieces", type=int, default=1, metavar="N",
          help="simulate the vocoder in N graph pieces (default 1)")
    f.add(SIM_CHECK, "--verify-steps", type=int, default=3, help="vocoder main steps run on the simulator")
    f.add(SIM_CHECK, "--verify-frames", type=int, default=50,
          help="code predictor frames replayed on the simulator (greedy agreement, logit SNR)")
    f.add("placement", "--talker", choices=PLACEMENTS, default=None,
          help="where the talker runs: npu (default; .rknn), or cpu-fp32 / cpu-int8 / cpu-int4 (its ONNX "
               "graphs on onnxruntime, weights fp32, int8 dynamic or 4-bit MatMulNBits); "
               "--skip-talker-rknn = cpu-fp32")
    f.add("placement", "--code-predictor", choices=PLACEMENTS, default=None,
          help="where the code predictor runs: npu (default) or cpu-fp32 / cpu-int8 / cpu-int4")
    f.add("placement", "--vocoder", choices=PLACEMENTS, default="npu",
          help="where the vocoder runs: npu (only npu for now)")
    f.add("placement", "--int4-block", type=int, default=32, metavar="N",
          help="cpu-int4: weights quantized in blocks of N along K (a power of two >= 16; default 32: the "
               "most accurate; 128 reads ~16 %% fewer bytes, docs/cpu-stages.md)")
    f.add("placement", "--int4-symmetric", action="store_true",
          help="cpu-int4: symmetric blocks (no zero points)")
    f.add("placement", "--cpu-threads", type=int, default=None, metavar="N",
          help="onnxruntime threads recorded in the plan for the CPU stages (default: the runtime's)")
    f.add("placement", "--streams", type=int, default=4, metavar="N",
          help="streams generated at once: the CPU-placed fp32 / int4 talker and code predictor also get a "
               "step graph for N streams, one weight read per step for all (default 4; 1: none)")
    f.add("placement", "--gate", choices=GATE_MODES, default="refuse",
          help="accuracy gate of the quantized CPU stages against fp32 (20 utterances, teacher forced and "
               "free running; marks in core.thresholds): refuse (default: no plan when a stage fails), "
               "warn (write the plan, record the failures as a warning), off (not measured)")
    f.add("placement", "--cpu-check-frames", type=int, default=DEFAULT_CHECK_FRAMES, metavar="N",
          help=f"frames per utterance at most of the accuracy gate (default {DEFAULT_CHECK_FRAMES})")
    f.add(ADVANCED, "--code-predictor-calibration-frames", type=int, default=240,
          help="int16-hybrid calibration frames (default 240)")
    f.add(ADVANCED, "--skip-talker", action="store_true", help="no talker graph: the talker runs in torch")
    f.add(ADVANCED, "--skip-talker-rknn", action="store_true",
          help="talker as ONNX only (onnxruntime on the host; RKLLM is the board route)")
    f.add(ADVANCED, "--skip-code-predictor", action="store_true", help="no code predictor graph (torch)")
    f.add(ADVANCED, "--skip-fp16-headroom", action="store_true",
          help="no fp16 headroom stage: the NPU graphs are exported without measuring their fp32 peaks "
               "(no exact rescale of a channel past fp16's 65504, no refusal; docs/fp16-headroom.md)")
    f.add(ADVANCED, "--force", action="store_true", help="re-run every stage")


def options_from(args: argparse.Namespace):
    from rkspeech.pipelines.tts_options import TTSBuildOptions

    return TTSBuildOptions(
        out_dir=args.out_dir, model_dir=args.model_dir, target=args.target, vocoder_plan=args.vocoder_plan,
        codes_length=args.codes_length,
        first_length=args.first_length, formulation=args.formulation, verify_steps=args.verify_steps,
        pieces=args.pieces, verify_frames=args.verify_frames, skip_code_predictor=args.skip_code_predictor,
        code_predictor_dtype=args.code_predictor_dtype, code_predictor_form=args.code_predictor_form,
        code_predictor_calibration_frames=args.code_predictor_calibration_frames,
        talker_capacity=args.talker_capacity, talker_prefill=args.talker_prefill, skip_talker=args.skip_talker,
        skip_talker_rknn=args.skip_talker_rknn, skip_sim=args.skip_sim, timeout=args.timeout,
        fail_on_cpu=args.fail_on_cpu, force=args.force, talker=args.talker, code_predictor=args.code_predictor,
        vocoder=args.vocoder, cpu_threads=args.cpu_threads, streams=args.streams, int4_block=args.int4_block,
        int4_symmetric=args.int4_symmetric, cpu_check_frames=args.cpu_check_frames,
        gate=args.gate, skip_fp16_headroom=args.skip_fp16_headroom)


def _ops(row: dict) -> str:
    pl = row.get("placement")
    if not pl:
        cpu = row.get("cpu")
        return f"{cpu['placement']} (onnxruntime, not converted)" if cpu else "not converted (host)"
    types = ", ".join(f"{k} x{v}" for k, v in sorted((pl.get("cpu_op_types") or {}).items(), key=lambda kv: -kv[1])[:4])
    return f"{pl.get('npu_ops')} / {pl.get('cpu_ops')}" + (f"  ({types})" if types else "")


def _cpu_rows(name: str, cpu: dict | None) -> list[tuple]:
    """A CPU stage: its weights (record, sizes) and its agreement with the fp32 graph."""
    if not cpu:
        return []
    q = cpu.get("quantization")
    files = cpu.get("files") or {}
    before = sum(f["fp32_bytes"] for f in files.values())
    after = sum(f["variant_bytes"] for f in files.values())
    if q:
        how = f"{q['variant']} ({q['quantizer'].rsplit('.', 1)[-1]}, onnxruntime {q['onnxruntime']}"
        how += (f", block {q['block_size']}{', symmetric' if q.get('symmetric') else ''}, accuracy level "
                f"{q.get('accuracy_level')})" if q["bits"] == 4
                else f", per channel {q.get('per_channel')})")
    else:
        how = "fp32 (the exported graphs as they are)"
    rows = [(f"{name}: CPU weights", f"{how}; {after / 1e6:.2f} MB ({after / before:.2f} x fp32 {before / 1e6:.2f} MB)"
             if before else how)]
    kept = (q or {}).get("kept_fp32") or []
    if kept:  # one row: the outlier inputs themselves are in the fp16 headroom rows
        rows.append((f"{name}: kept fp32", "; ".join(f"{k['graph']} {k['module']} (MatMul {k['node']})" for k in kept)
                     + f": +{sum(k['bytes'] for k in kept) / 1e3:.1f} kB"))
    return rows + _check_rows(name, cpu.get("check"))


def code_predictor_sim_rows(cp_row: dict) -> list[tuple]:
    """The NPU code predictor's simulator figures (``compare_frames``), if it was simulated."""
    from rkspeech.core.compare import db_text

    sim = cp_row.get("sim")
    if not sim:
        return []
    return [(f"code predictor on the simulator ({cp_row.get('dtype') or 'fp16'})",
             f"greedy agreement {100 * sim['code_agreement']:.1f} % over {sim.get('frames')} frames"
             + (f" ({100 * sim['decision_agreement']:.1f} % of the {sim['decisions']} decisions made on "
                "torch's inputs)" if sim.get("decisions") else "") + _misses_text(sim.get("misses"))
             + f", logit SNR {db_text(sim['logit_snr_db'])} dB")]


def _misses_text(misses: list | None) -> str:
    """Each frame's first miss as torch's gap for its code against the graph's logit error there."""
    if not misses:
        return ""
    shown = ", ".join(f"{m['fp32_gap']:.2g} vs {m['error_rms']:.2g}" for m in misses[:4])
    return f"; first misses at fp32 top-two gap vs logit error rms: {shown}{' ...' if len(misses) > 4 else ''}"


def _check_rows(name: str, c: dict | None, unit: str = "frame") -> list[tuple]:
    """A stage's gate figures against its fp32 graph (a CPU variant, or an NPU stage on the simulator);
    ``unit``: what a generation step makes (frame; token in the Qwen3-ASR gate)."""
    from rkspeech.core.compare import db_text

    rows: list[tuple] = []
    if c and c.get("not_judged"):
        rows.append((f"{name}: accuracy gate", f"not judged: {c['not_judged']}"))
    elif c:
        tf, free = c["teacher_forced"], c["free_running"]
        snr = db_text(tf.get("logit_snr_db")) + ("" if tf.get("logit_snr_db") is None else " dB")
        rows.append((f"{name} vs fp32 (teacher forced)",
                     f"agreement {100 * tf['agreement']:.2f} % of {tf['decisions']} decisions, logit SNR {snr}, "
                     f"fp32 margin median {tf['margin'].get('median', 0):.2f}"))
        div = free.get("first_diverging_frame")
        rows.append((f"{name} vs fp32 (free running)", f"not measured: {free['not_measured']}"
                     if free.get("not_measured") else
                     f"same stop {free['same_stop']}/{free['utterances']} utterances, "
                     f"{'codes' if unit == 'frame' else unit + 's'} equal {100 * free['codes_equal']:.1f} %, "
                     f"identical {free['identical_utterances']}, first diverging {unit} {'-' if div is None else div}"))
        rows.append((f"{name}: accuracy gate", "FAIL: " + "; ".join(c["failures"]) if c.get("failures") else "pass"))
    return rows


def _clone_rows(name: str, clone: dict | None) -> list[tuple]:
    """A voice-cloning graph (``pipelines.clone_encoders``): its size and its check against torch."""
    if not clone:
        return []
    c = clone.get("check") or {}
    if "different_codes" in c:
        how = f"codes vs torch: {c['different_codes']} of {c['codes']} differ"
    else:
        how = f"x-vector vs torch: max-abs {c.get('max_abs_diff', 0):.2g}, 1 - cosine {1 - c.get('cosine_min', 0):.1g}"
    return [(f"{name}: graph", f"{clone.get('bytes', 0) / 1e6:.2f} MB; {how} over {len(c.get('clips') or [])} clips")]


def _gate_rows(gate: dict | None) -> list[tuple]:
    if not gate:
        return []
    if gate["mode"] == "off":
        return [("accuracy gate", "off: the quantized stages were not measured")]
    if not gate.get("stages"):
        return [("accuracy gate", "no stage to judge (no quantized stage; NPU stages are judged on the simulator, "
                                  "not with --skip-sim)")] + _unmeasured(gate)
    t = gate["thresholds"]
    unit = gate.get("unit", "frames")
    form = f"{gate['prompt_form']} prompt, " if gate.get("prompt_form") else ""
    how = (f"{gate['reference_frames']} fp32 {unit} of {gate['texts']} utterances ({form}"
           f"{gate['stopped_reference']} stopped); marks: agreement >= {100 * t['min_agreement']:.0f} %, same stop >= "
           f"{100 * t['min_same_stop']:.0f} %, logit SNR >= {t['min_logit_snr_db']:.0f} dB, {unit} >= {t['min_frames']}, "
           f"fp32 stopped >= {100 * t['min_stopped_reference']:.0f} %")
    verdict = "passed" if gate["passed"] else f"FAILED ({gate['mode']}): " + "; ".join(gate["failures"])
    if len(gate.get("not_judged") or ()) == len(gate["stages"]):  # no stage judged: neither passed nor failed
        verdict = "not judged"
    rows = [("accuracy gate", how), ("accuracy gate verdict", verdict)]
    if gate.get("not_judged"):
        rows.append(("accuracy gate: not judged", ", ".join(gate["not_judged"]) + " (the checkpoint does not let the "
                                                  "gate vouch: see each stage's row)"))
    return rows + _unmeasured(gate)


def _unmeasured(gate: dict) -> list[tuple]:
    u = gate.get("npu_not_measured")
    return [("accuracy gate: NPU stages", f"{', '.join(u['stages'])} not measured: {u['why']}")] if u else []


def _headroom_rows(h: dict | None) -> list[tuple]:
    """The fp16 headroom stage: per graph its largest fp32 peak and the rescale folded in."""
    if not h:
        return []
    rows = []
    for g, row in h["graphs"].items():
        top = row["top"][0] if row["top"] else {"tensor": "-", "ratio": 0.0}
        fix = "; ".join(f"layer {e['layer']} channels {e['channels']} / 2^{e['shift']}" for e in row["rescale"] or [])
        if row.get("placement", "npu") == "npu":
            rows.append((f"{g}: fp16 headroom", f"peak {top['ratio']:.3g} x 65504 ({top['tensor']}) over "
                                                f"{h['frames']} frames of {h['texts']} texts; "
                                                + (f"exact rescale {fix}" if fix else "no rescale")))
        out = row.get("outliers") or []
        if out or row.get("placement") == "cpu":
            big = row.get("largest_outlier_ratio") or {}
            rows.append((f"{g}: outlier inputs", ", ".join(f"{o['module']} ({o['ratio']} x median channel)" for o in out)
                         if out else f"none over {h.get('outlier_ratio')} x median channel (largest "
                                     f"{big.get('ratio')} x, {big.get('module')})"))
    return rows


def summary_rows(summary: dict) -> list[tuple]:
    from rkspeech.core.compare import db_text

    rows: list[tuple] = [("target", summary["target"])]
    for name, row in summary["graphs"].items():
        rows.append((f"{name}: NPU / CPU ops", _ops(row)))
        b = row.get("build")
        if b:
            rows.append((f"{name}: build", f"{b.get('seconds') or 0:.0f} s, peak {b.get('peak_rss_mb')} MB, "
                                           f"REGTASK lines {b.get('regtask_overflow_lines')}"))
        if row.get("rknn") and row["rknn"].get("bytes"):
            rows.append((f"{name}: .rknn", f"{row['rknn']['bytes'] / 1e6:.1f} MB"))
        rows += _cpu_rows(name, row.get("cpu")) + _clone_rows(name, row.get("clone"))
        rows += _check_rows(f"{name} (NPU, simulator)", row.get("gate"))
    rows += code_predictor_sim_rows(summary["graphs"].get("code_predictor") or {})
    tv = (summary["graphs"].get("talker") or {}).get("verify")
    if tv:
        parts = []
        if tv.get("codes_identical_ort") is not None:
            parts.append(f"onnxruntime greedy codes {'identical' if tv['codes_identical_ort'] else 'DIFFER'}")
        if "logit_snr_db" in tv:  # null: identical (core.compare)
            parts.append(f"simulator logit SNR {db_text(tv['logit_snr_db'])} dB")
        rows.append(("talker checks", "; ".join(parts) or "-"))
    v = (summary["graphs"].get("vocoder") or {}).get("verify")
    if v:
        rows.append(("vocoder simulator step vs full decode", f"{db_text(v['snr_db']['rknn_sim_step'])} dB"))
    rows += _headroom_rows(summary.get("fp16_headroom"))
    rows += _gate_rows(summary.get("accuracy_gate"))
    rows.append(("plan", summary["plan"]))
    rows.append(("total", f"{summary['seconds']:.0f} s"))
    return rows


def run(args: argparse.Namespace) -> int:
    from rkspeech.core.reporting import print_table
    from rkspeech.pipelines.tts_build import build_tts

    summary = build_tts(options_from(args))
    print_table("qwen3-tts build (NPU numerics from the x86 simulator; no board here)", summary_rows(summary))
    return 0
