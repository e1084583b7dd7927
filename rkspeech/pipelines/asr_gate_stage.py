"""The accuracy gate of ``build qwen3-asr`` as a build stage: which stages it judges, the resumable
run over scratch plan files, and the report's section (``accuracy.asr_gate`` measures;
``pipelines.stage_gate`` judges and words it as for text-to-speech)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path


#: bump when what the gate measures changes (its resumable stage then runs again)
GATE_VERSION = 1


def _gate_stages(options) -> dict:
    """The stages the gate judges, by name -> placement: the encoder when NPU-placed (on the
    simulator; not with ``skip_sim``), the decoder when quantized, and the plan (both) when both."""
    out = {}
    if options.decoder != "cpu-fp32":
        out["decoder"] = options.decoder
    if options.encoder == "npu" and not options.skip_sim:
        out["encoder"] = "npu"
    if len(out) == 2:
        out["plan"] = f"npu + {options.decoder}"
    return out


def asr_gate_section(options, stages, out: Path, records_of: Callable[[bool], dict]) -> dict:
    """The accuracy gate's section of the report (``pipelines.stage_gate.gate_section``): the
    figures of ``accuracy.asr_gate.run_asr_gate`` (a resumable stage over the graphs it runs),
    judged against the current marks.  ``records_of(fp32)``: the plan records of the build's
    graphs, fp32 or as placed."""
    from rkspeech.accuracy.asr_gate import GATE_CLIPS, GATE_MAX_TOKENS, asr_thresholds
    from rkspeech.pipelines.stage_gate import gate_section

    judged = _gate_stages(options)
    check = None
    if options.gate != "off" and judged:
        records = {"fp32": records_of(True), "plan": records_of(False)}
        inputs = sorted({Path(p) for r in records.values() for rec in r.values() for a in rec["artifacts"].values()
                         for p in a.values()})
        args = {"stages": judged, "clips": GATE_CLIPS, "max_tokens": GATE_MAX_TOKENS, "target": options.target,
                "gate_version": GATE_VERSION}
        check = stages.run("asr_accuracy_gate", args, [out / p for p in inputs], list,
                           lambda: _run_gate(out, records, judged))
    gate = gate_section(check, options.gate, thresholds=asr_thresholds())
    if gate.get("stages") and len(gate["not_judged"]) == len(gate["stages"]):
        gate["passed"] = None  # nothing judged (a root the gate cannot vouch for): not a pass
    if options.skip_sim and options.encoder == "npu" and options.gate != "off":  # recorded: --skip-sim says it
        gate["npu_not_measured"] = {"stages": ["encoder"], "why": "--skip-sim (the NPU encoder is judged on the "
                                                                   "simulator)"}
    return gate


def _run_gate(out: Path, records: dict, judged: dict) -> dict:
    """``run_asr_gate`` over two openings of the graphs (``ASRTranscriber`` on scratch plan files in
    ``out``, removed afterwards: the plan itself is written only once the gate let it through)."""
    from rkspeech.accuracy.asr_gate import run_asr_gate
    from rkspeech.core.atomic import write_json
    from rkspeech.core.threads import default_threads
    from rkspeech.plan.record import PLAN_FORMAT
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    scratch = {name: out / f".asr-gate-{name}.plan.json" for name in records}
    opened = []
    try:
        for name, recs in records.items():
            write_json(scratch[name], {"format": PLAN_FORMAT, **recs})
        threads = default_threads()
        reference = ASRTranscriber(scratch["fp32"], backend="ort", threads=threads)
        opened.append(reference)
        npu = "encoder" in judged
        plan = ASRTranscriber(scratch["plan"], backend="sim" if npu else "ort", threads=threads)
        opened.append(plan)
        return run_asr_gate(reference, plan, stages=judged)
    finally:
        for asr in opened:
            asr.close()
        for path in scratch.values():
            path.unlink(missing_ok=True)
