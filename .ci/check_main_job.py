"""What the main job (``scripts/demo.sh``) must leave, checked after it ran: ``check_main_job.py OUT``.

OUT is the demo's output folder (``out/demo``).  Checked: one build folder with plan.json (loaded and
validated by the runtime's own loader), the plan placing the talker and the code predictor on the
CPU and the vocoder on the NPU, every vocoder graph with 0 CPU ops and 0 REGTASK lines, the
simulator SNR against the full decode above its pass mark, and speech.wav (24 kHz, as many samples
as the frames it was asked for, not silent).  Exit 1 with one line per failed check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(out: Path, speech_frames: int = 25) -> list[str]:
    import numpy as np
    import soundfile as sf

    from rkspeech.plan.plan import load_plan
    from rkspeech.core.thresholds import SIM_MIN_SNR_DB

    failed: list[str] = []
    builds = sorted(out.glob("build-*/build-report.json"))
    if len(builds) != 1:
        return [f"expected one build report under {out}, found {len(builds)}"]
    whole = json.loads(builds[0].read_text())
    report = whole.get("vocoder") or {}
    plan_path = builds[0].parent / "plan.json"
    try:
        load_plan(plan_path, backend="ort")
    except Exception as exc:  # noqa: BLE001 - reported as a failed check
        failed.append(f"plan {plan_path}: {exc}")
    places = whole.get("placements") or {}
    if not (str(places.get("talker", "")).startswith("cpu-") and str(places.get("code_predictor", "")).startswith("cpu-")
            and places.get("vocoder") == "npu"):
        failed.append(f"placements {places}: expected the talker and the code predictor on the CPU, the vocoder on the NPU")
    for role, conv in report.get("convert", {}).items():
        cpu, regtask = conv["placement"]["cpu_ops"], conv["build"]["regtask_overflow_lines"]
        if cpu:
            failed.append(f"{role} graph: {cpu} CPU ops {conv['placement'].get('cpu_op_types')}")
        if regtask:
            failed.append(f"{role} graph: {regtask} REGTASK lines in its build log")
    if set(report.get("convert", {})) != {"main", "first"}:
        failed.append(f"graphs converted: {sorted(report.get('convert', {}))}, expected first and main")
    sim = (report.get("verify") or {}).get("snr_db", {}).get("rknn_sim_step")
    if not isinstance(sim, (int, float)) or sim < SIM_MIN_SNR_DB:  # null: not measured; "NaN": overflow
        failed.append(f"simulator step vs full decode: {sim} dB, pass mark {SIM_MIN_SNR_DB} dB")
    wav = out / "speech.wav"
    if not wav.is_file():
        failed.append(f"{wav} missing")
    else:
        pcm, rate = sf.read(wav, dtype="int16")
        want = speech_frames * report["export"]["samples_per_token"]
        if rate != report["export"]["sample_rate"] or len(pcm) != want or not np.abs(pcm).max():
            failed.append(f"{wav}: {len(pcm)} samples at {rate} Hz (want {want}), peak {np.abs(pcm).max()}")
    print(f"main job: {builds[0].parent.name}: {places}; vocoder "
          + ", ".join(f"{r} {c['placement']['npu_ops']} NPU / {c['placement']['cpu_ops']} CPU ops"
                      for r, c in report.get("convert", {}).items())
          + f"; simulator {sim} dB; {wav.name} {'ok' if wav.is_file() else 'missing'}")
    return failed


if __name__ == "__main__":
    problems = main(Path(sys.argv[1]))
    for p in problems:
        print(f"main job check failed: {p}", file=sys.stderr)
    sys.exit(1 if problems else 0)
