"""The accuracy gate as a stage of ``rkspeech build qwen3-tts`` (issues 27, 39).

:func:`check_cpu_stages`: one resumable stage (``accuracy_gate``) measuring each quantized stage
(``pipelines.cpu_stages``), and each NPU-placed stage on the rknn-toolkit2 simulator (built from
its exported graph as it was converted: target, dtype), against its fp32 graph with
``accuracy.gate`` through the loop ``speak`` runs (``runtime.tts.numpy_loop.NumpyTTSModel``: the
numpy host, its RoPE recipe and heads): greedy generation of the gate's 20 utterances with the
fp32 graphs on onnxruntime (torch for a stage that has no graph), then each quantized stage
teacher forced (top-1 agreement, logit SNR, the fp32 top-1 margin) and free running (first
diverging frame, stop frame per utterance); in lanes (``pipelines.gate_lanes``) where the
variants allow.  :func:`gate_section` judges the figures (``accuracy.gate.apply_thresholds``) for
the report and the plan; ``pipelines.tts_build`` refuses an unsafe placement.
"""

from __future__ import annotations

from pathlib import Path

from rkspeech.core.placement import cpu_variant
from rkspeech.pipelines.cpu_stages import DEFAULT_CHECK_FRAMES


def check_cpu_stages(stages, model, *, talker: dict | None, code_predictor: dict | None,
                     ckpt: list[Path], frames: int = DEFAULT_CHECK_FRAMES, texts=None,
                     threads: int | None = None, lanes: bool | None = None, int4: dict | None = None) -> dict:
    """The accuracy gate's figures (``accuracy.gate.run_gate``) of each quantized stage against its
    fp32 graph: teacher forced and free running over the gate's utterances, at most ``frames``
    frames each, in the checkpoint's recorded prompt form.

    ``talker``: None (not quantized) or ``{"placement", "fp32": {role: onnx}, "variant": {role:
    onnx}}`` (roles prefill, decode); ``code_predictor``: None or ``{"placement", "role": step|frame,
    "fp32": onnx, "variant": onnx, "heads": {codebook: onnx} | None, "start": onnx | None}`` (the
    variant runs with its quantized heads and its start graph, as ``speak`` runs it; the reference
    with the fp32 heads, one position a call); ``fp32`` may also be given for a stage that is not quantized
    (its fp32 graph then serves as the reference), else the reference is torch.  ``model``: a
    ``LazyTTSModel``.  Returns ``run_gate``'s report (judged against the default thresholds; the
    build judges it again, so a changed threshold needs no new measurement) with each stage's
    ``placement``, or ``{}`` when no stage is quantized or simulated.

    ``lanes``: run every utterance at once (``pipelines.gate_lanes``: each stage's step graph
    exported for one lane per utterance, the variant quantized with ``int4``'s options as placed)
    when both stages are CPU-placed with their step forms; otherwise, and with ``lanes=False``, one
    utterance at a time over the placed graphs.  None (the build's default) is True: lanes were
    2.0x faster already at the reduced size, their export included (docs/accuracy-gate.md, Cost).

    An NPU-placed stage: ``{"placement": "npu", "role", "fp32": its exported ONNX (onnx for the
    talker's roles), "sim": {"target", "dtype"[, "dataset", "hybrid"]}}``: the reference runs the
    ONNX on onnxruntime, the variant the same ONNX on the simulator (``open_runner("sim")``, built
    on first use); it is measured only where the gate can vouch (``run_gate``'s ``vouched_only``)."""
    from rkspeech.accuracy.gate import GATE_TEXTS

    texts = tuple(texts or GATE_TEXTS)
    quantized = {k: v for k, v in (("talker", talker), ("code_predictor", code_predictor))
                 if v is not None and (v.get("variant") is not None or v.get("sim") is not None)}
    if not quantized:
        return {}
    inputs = list(ckpt)
    for v in (talker, code_predictor):
        if v is None:
            continue
        for key in ("fp32", "variant", "heads", "start"):
            x = v.get(key)
            inputs += list(x.values()) if isinstance(x, dict) else ([x] if x else [])
        if (v.get("sim") or {}).get("dataset"):
            inputs.append(Path(v["sim"]["dataset"]))
    lanes = lanes is not False and lanes_apply(talker, code_predictor)
    args = {"frames": frames, "texts": list(texts), "stages": {k: v["placement"] for k, v in quantized.items()},
            "gate_version": GATE_VERSION, "lanes": lanes, **({"int4": int4} if lanes and int4 else {})}
    npu = {k: {a: b for a, b in v["sim"].items() if a != "dataset"} for k, v in quantized.items() if v.get("sim")}
    if npu:  # absent without NPU stages: CPU-only builds keep their stage's fingerprint
        args["npu"] = npu

    def work():
        return _check(model, talker, code_predictor, frames=frames, texts=texts, threads=threads,
                      lanes_folder=stages.path.parent if lanes else None, int4=int4)

    return stages.run("accuracy_gate", args, [Path(p) for p in inputs], lambda: [], work)


#: bump when what the gate measures changes (the resumable stage then runs again)
GATE_VERSION = 7  # 2: a step-form code predictor's variant measured with its quantized heads; 3: and its start
# graph; 4: through the numpy host loop (the one speak runs), not the torch one; 5: its timing recorded, lanes;
# 6: NPU-placed stages judged on the simulator (they add "npu" to the key); 7: no free run after NaN logits


#: CPU variants whose rows do not see each other, so that a lane graph computes each lane's row as
#: the placed graph computes it alone: fp32, and int4 (MatMulNBits quantizes its input per row and
#: block).  Not int8: its dynamic quantization takes one activation scale over the whole call, so
#: 20 lanes' rows change each other's rounding (the trained reduced root's int8 talker: 41.71 dB in
#: lanes against 44.83 dB alone, decisions the same; docs/accuracy-gate.md, Cost), and its placed
#: prefill graph takes one scale over its 32 rows where a lanes graph quantized per row
#: (``convert.int8_rows``) would take one per row
LANE_VARIANTS = ("fp32", "int4")


def lanes_apply(talker: dict | None, code_predictor: dict | None) -> bool:
    """Whether the gate can run in lanes: both stages CPU-placed in ``LANE_VARIANTS`` (their fp32
    graphs in the CPU export, whose weights the lane graphs must match), the code predictor in its
    step form."""
    return bool(talker and code_predictor and cpu_variant(talker.get("placement") or "npu") in LANE_VARIANTS
                and cpu_variant(code_predictor.get("placement") or "npu") in LANE_VARIANTS and talker.get("fp32")
                and code_predictor.get("fp32") and code_predictor.get("role") == "step")


def _check(model, talker, code_predictor, *, frames, texts, threads, lanes_folder=None, int4=None) -> dict:
    """The gate through ``NumpyTTSModel`` (the loop ``speak`` runs on a stage plan); ``model``
    (``LazyTTSModel``) is loaded only for a stage whose reference is torch (no fp32 graph), or to
    export the lane graphs (``lanes_folder``: where, ``pipelines.gate_lanes``)."""
    from rkspeech.accuracy.gate import run_gate
    from rkspeech.runtime.tts.numpy_loop import NumpyTTSModel
    from rkspeech.runtime.tts.open_stages import open_code_predictor, open_talker_for

    tts = NumpyTTSModel.load(model.files.root)
    opened = []
    if lanes_folder is not None:
        return _check_lanes(model, tts, talker, code_predictor, frames=frames, texts=texts, threads=threads,
                            folder=lanes_folder, int4=int4)

    def keep(backend):
        opened.append(backend)
        return backend

    def talker_graph(paths):
        return keep(open_talker_for(tts, {r: {"onnx": p} for r, p in paths.items()}, "ort", threads=threads))

    def cp_graph(role, path, heads=None, start=None):
        return keep(open_code_predictor(role, path, "ort", model=tts, threads=threads, heads=heads, start=start))

    def sim_kw(sim):
        """open_runner's simulator options of an NPU stage (its target, dtype, calibration)."""
        return {"target": sim["target"], "dtype": sim.get("dtype", "fp16"),
                **({"dataset": str(sim["dataset"])} if sim.get("dataset") else {}),
                **({"hybrid": sim["hybrid"]} if sim.get("hybrid") else {})}

    try:
        ref = {"talker": (talker_graph(talker["fp32"]) if talker and talker.get("fp32")
                          else model.get().talker_backend),
               "code_predictor": (cp_graph(code_predictor["role"], code_predictor["fp32"])
                                  if code_predictor and code_predictor.get("fp32")
                                  else model.get().code_predictor_backend)}
        variants, placements = {}, {}
        if talker and talker.get("variant"):
            variants["talker"], placements["talker"] = talker_graph(talker["variant"]), talker["placement"]
        elif talker and talker.get("sim"):  # NPU-placed: its graphs on the simulator, built as converted
            variants["talker"] = _Deferred(lambda: keep(open_talker_for(
                tts, {r: {"onnx": p} for r, p in talker["fp32"].items()}, "sim", **sim_kw(talker["sim"]))),
                f"talker graph (sim: {Path(talker['fp32']['decode']).name})")
            placements["talker"] = talker["placement"]
        if code_predictor and code_predictor.get("variant"):
            variants["code_predictor"] = cp_graph(code_predictor["role"], code_predictor["variant"],
                                                  code_predictor.get("heads"), code_predictor.get("start"))
            placements["code_predictor"] = code_predictor["placement"]
        elif code_predictor and code_predictor.get("sim"):
            variants["code_predictor"] = _Deferred(lambda: keep(open_code_predictor(
                code_predictor["role"], code_predictor["fp32"], "sim", model=tts, **sim_kw(code_predictor["sim"]))),
                f"code predictor {code_predictor['role']} graph (sim: {Path(code_predictor['fp32']).name})")
            placements["code_predictor"] = code_predictor["placement"]
        npu = [k for k, v in (("talker", talker), ("code_predictor", code_predictor))
               if v and v.get("sim") and not v.get("variant")]
        out = run_gate(tts, reference=ref, variants=variants, texts=texts, frames=frames, vouched_only=npu)
    finally:
        for b in opened:
            b.close()
    for name, placement in placements.items():
        out["stages"][name] = {"placement": placement, **out["stages"][name]}
    return out


def _check_lanes(model, tts, talker, code_predictor, *, frames, texts, threads, folder, int4) -> dict:
    """``_check`` with every utterance at once (``pipelines.gate_lanes``), its lane graphs in a
    scratch folder of ``folder`` removed afterwards."""
    import time

    from rkspeech.accuracy.gate import run_gate
    from rkspeech.core import progress
    from rkspeech.core.capture import cycled_requests
    from rkspeech.core.child import scratch
    from rkspeech.pipelines.gate_lanes import open_gate_lanes

    requests = cycled_requests(tts, len(texts), what="the accuracy gate")
    opened: list = []
    try:
        with scratch(folder, prefix=".gate-lanes.") as tmp:
            t0 = time.perf_counter()
            with progress.stage(f"accuracy gate: the stages' graphs for {len(texts)} lanes"):
                ref, variants = open_gate_lanes(model, tts, Path(tmp), talker=talker, code_predictor=code_predictor,
                                                texts=texts, requests=requests, frames=frames, threads=threads,
                                                int4=int4, opened=opened)
            lanes_s = time.perf_counter() - t0
            out = run_gate(tts, reference=ref, variants=variants, texts=texts, frames=frames)
    finally:
        for b in opened:
            b.close()
    out["timing"]["lane_graphs_s"] = round(lanes_s, 2)
    out["seconds"] = round(out["seconds"] + lanes_s, 2)
    placements = {"talker": talker["placement"], "code_predictor": code_predictor["placement"]}
    for name in out["stages"]:
        out["stages"][name] = {"placement": placements[name], **out["stages"][name]}
    return out


def gate_inputs(build_dir) -> dict:
    """What ``check_cpu_stages`` measures in a ``build qwen3-tts`` folder with CPU-placed talker
    and code predictor (its ``build-report.json`` and ``plan.json``: built with ``--gate off`` or
    ``warn``): ``{"talker", "code_predictor", "model_dir", "int4"}``, to run the gate again
    (``benchmarks/bench_gate_cost.py``)."""
    import json

    from rkspeech.core.errors import RkspeechError
    from rkspeech.plan.paths import BUILD_REPORT, PLAN_FILE
    from rkspeech.plan.plan import load_plan

    build_dir = Path(build_dir)
    try:
        report = json.loads((build_dir / BUILD_REPORT).read_text())
        plan_data = json.loads((build_dir / PLAN_FILE).read_text())
    except (OSError, ValueError) as exc:
        raise RkspeechError(f"{build_dir}: not a finished build qwen3-tts folder ({exc})") from None
    o = report["options"]

    def here(p) -> Path:  # the report names files as the build was told (--out-dir relative to its folder)
        p = Path(p)
        if p.is_absolute():
            return p
        try:
            return build_dir / p.relative_to(Path(o["out_dir"]))
        except ValueError:
            return build_dir / p

    g = report["graphs"]
    if "cpu" not in (g.get("talker") or {}) or "cpu" not in (g.get("code_predictor") or {}):
        raise RkspeechError(f"{build_dir}: its talker and code predictor are not both CPU-placed")
    tcpu, ccpu = g["talker"]["cpu"], g["code_predictor"]["cpu"]
    talker = {"placement": tcpu["placement"], "fp32": {r: here(f["fp32"]) for r, f in tcpu["files"].items()}}
    if tcpu.get("quantization"):
        talker["variant"] = {r: here(f["variant"]) for r, f in tcpu["files"].items()}
    (role, files), = ccpu["files"].items()
    cp = {"placement": ccpu["placement"], "role": role, "fp32": here(files["fp32"])}
    if ccpu.get("quantization"):
        stage = load_plan(build_dir / PLAN_FILE, backend="ort").stages["code_predictor"]
        cp.update(variant=here(files["variant"]), heads=stage.heads or None, start=stage.start)
    return {"talker": talker, "code_predictor": cp, "model_dir": Path(plan_data["build"]["checkpoint"]),
            "int4": {"block_size": o["int4_block"], "symmetric": o["int4_symmetric"]}}


class _Deferred:
    """A stage backend opened on its first use: an NPU-placed stage's simulator is built only when
    the gate measures it (``run_gate``'s ``vouched_only``)."""

    def __init__(self, opener, name: str):
        self._opener, self._backend, self.name = opener, None, name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        if self._backend is None:
            self._backend = self._opener()
        return getattr(self._backend, attr)


def gate_section(check: dict | None, mode: str, *, npu: dict | None = None, thresholds=None) -> dict:
    """The build report's ``accuracy_gate``: the figures of ``check_cpu_stages`` judged against the
    current thresholds, the mode (``core.thresholds.GATE_MODES``) and, when the gate fails or was
    not run, or an NPU-placed stage was not judged (a checkpoint the gate cannot vouch for), the
    ``warning`` the report keeps.  ``npu``: the NPU-placed stages' own simulator checks (verify
    replay, talker logit SNR), recorded beside; the gate's figures of those stages are in
    ``stages`` like the CPU stages' (docs/accuracy-gate.md).  ``thresholds``: the marks
    (``accuracy.gate.GateThresholds``; default ``core.thresholds``' GATE_*)."""
    from rkspeech.accuracy.gate import apply_thresholds

    out: dict = {"mode": mode}
    if npu:
        out["npu"] = npu
    if mode == "off":
        return {**out, "passed": None, "failures": [],
                "warning": "accuracy gate off (--gate off): the quantized stages were not measured"}
    if not check:
        return {**out, "passed": True, "failures": [], "stages": {}}
    judged = apply_thresholds(dict(check, stages={k: dict(v) for k, v in check["stages"].items()}), thresholds)
    out.update(judged)
    warnings = []
    if judged["failures"] and mode == "warn":
        warnings.append("accuracy gate failed, plan written anyway (--gate warn): " + "; ".join(judged["failures"]))
    for name in judged.get("not_judged") or []:
        placed = "NPU-placed " if judged["stages"][name].get("placement", "npu") == "npu" else ""
        warnings.append(f"accuracy gate: the {placed}{name.replace('_', ' ')} not judged: "
                        f"{judged['stages'][name]['not_judged']}")
    if warnings:
        out["warning"] = "; ".join(warnings)
    return out


def plan_gate(gate: dict) -> dict:
    """What a plan keeps of the gate: mode, verdict, failures (the figures are in the build report)."""
    return {k: gate[k] for k in ("mode", "passed", "failures", "not_judged", "warning", "reference_frames", "prompt_form",
                                 "unit") if k in gate}


def gate_refusal(gate: dict, report_path, *, overridable: bool = True):
    """The one-line ``RkspeechError`` of a build the gate refuses (its first failure, how many
    more, where the figures are, and that ``--gate warn`` writes the plan when ``overridable``)."""
    from rkspeech.core.errors import RkspeechError

    more = f" (+{len(gate['failures']) - 1} more)" if len(gate["failures"]) > 1 else ""
    return RkspeechError(f"accuracy gate: {gate['failures'][0]}{more}; no plan written (figures in "
                         f"{report_path}{'; --gate warn writes it anyway' if overridable else ''})")
