"""The text-to-speech stages of a plan: the talker and the code predictor, beside the vocoder.

A ``rkspeech build qwen3-tts`` plan holds, next to ``speech_decoder`` (the vocoder), one section
per stage that runs as a graph::

    "code_predictor": {"impl": "rknn", "target": "rk3588",
                       "artifacts": {"step": {"onnx": "code_predictor/...onnx", "rknn": "...rknn"}},
                       "contract": {"format": "rkspeech-talker/1", "model": "qwen3-tts-code-predictor-step", ...}},

The code predictor holds one role: ``step`` (its stack as a one-position step graph, the talker's
contract format with its own model name) or ``frame`` (the unrolled greedy frame graph, format
``rkspeech-code-predictor/1``).  A step-form code predictor on the CPU may also name ``heads``
(its 15 heads as graphs, ``pipelines.cpu_heads``) and ``start`` (the same stack at B = 2, a
frame's first two positions in one call, ``pipelines.cpu_start``).
    "talker": {"impl": "onnx", "artifacts": {"prefill": {"onnx": ...}, "decode": {"onnx": ...}},
               "contract": {"format": "rkspeech-talker/1", ...}}

A code predictor built as an int16 + fp16 hybrid also holds ``"quantization": {"dtype":
"int16-hybrid", "dataset": "code_predictor/calib/dataset.txt", "hybrid": {...}}``: what the
simulator needs to build it as the .rknn was built (a board loads the .rknn as it is).

``impl`` says where the stage is meant to run: ``rknn`` (the NPU: the simulator here, rknnlite on
a board) or ``onnx`` (onnxruntime on the host's CPU).  ``placement`` (``core.placement``:
``npu``, ``cpu-fp32``, ``cpu-int8``, ``cpu-int4``) says which weights: a plan without it is
``npu`` for ``rknn`` and ``cpu-fp32`` for ``onnx`` (plans before 2026-12-01; ``--skip-talker-rknn``).
A ``cpu-int8`` / ``cpu-int4`` stage's ``onnx`` artifacts are the quantized variants
(``convert.cpu_quant``) and its ``quantization`` is their record, no dataset::

    "talker": {"impl": "onnx", "placement": "cpu-int4", "threads": 2,
               "artifacts": {"prefill": {"onnx": "talker/cpu/..int4.onnx"}, "decode": {...}},
               "quantization": {"variant": "int4", "quantizer": "onnxruntime...MatMul4BitsQuantizer",
                                "bits": 4, "block_size": 32, "symmetric": false, "accuracy_level": 4,
                                "onnxruntime": "1.19.2",
                                "graphs": {"decode": {"source": "talker/onnx/...onnx", "bytes_before": ..,
                                                      "bytes_after": .., "quantized_ops": {..}}, ...}}}

``threads`` (optional, CPU stages): onnxruntime intra-op threads for that stage's graphs; a
caller's explicit thread count wins (``runtime.tts.open_stages.open_stage_backends``).
A stage absent from the plan runs in torch on the host.  Paths are relative to the plan's folder.
Validation: the files the chosen backend needs exist, and each ONNX artifact's contract has the
section's format (the stage loaders check the rest against the model).  Standard library only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.core.placement import CPU_VARIANTS, PLACEMENTS
from rkspeech.core.targets import CORE_MASKS
from rkspeech.plan.paths import plan_file

#: stage name -> the artifact role sets its section may hold (exactly one of them)
STAGE_ROLES = {"talker": (("prefill", "decode"),), "code_predictor": (("step",), ("frame",))}
STAGE_IMPLS = ("rknn", "onnx")
#: ``quantization.dtype`` values a stage may record (fp16: no section)
STAGE_DTYPES = ("fp16", "int16-hybrid")


@dataclass
class StagePlan:
    name: str
    impl: str
    target: str | None
    artifacts: dict[str, dict[str, Path]]  # role -> {"onnx": path, "rknn": path}
    contract: dict = field(default_factory=dict)
    #: ``{"dtype", "dataset" (Path), "hybrid"}`` for a quantized NPU build; a CPU variant's record
    #: (``{"variant", "quantizer", "bits", ...}``, see the module docstring); else empty
    quantization: dict = field(default_factory=dict)
    #: ``core.placement.PLACEMENTS``: where and with which weights the stage runs
    placement: str = "npu"
    #: onnxruntime intra-op threads of a CPU stage (None: the caller's, else ``core.threads``)
    threads: int | None = None
    #: rknn-lite NPU core mask of an NPU stage (``core.targets.CORE_MASKS``; None: the caller's,
    #: e.g. ``rkspeech serve --tts-core-mask``, else the runtime's "auto"); other backends ignore it
    core_mask: str | None = None
    #: a CPU step-form code predictor's quantized heads: codebook j -> its head graph (ONNX, run by
    #: onnxruntime whatever the backend; ``pipelines.cpu_heads``); empty: fp32 heads on the host
    heads: dict[int, Path] = field(default_factory=dict)
    #: a CPU step-form code predictor's start graph (B = 2: a frame's first two positions in one
    #: call, ``pipelines.cpu_start``); None: those positions take two step calls
    start: Path | None = None

    def simulator_build(self) -> dict:
        """The ``GraphCodePredictor`` / ``open_runner`` build keywords (``dtype``, ``dataset``,
        ``hybrid``) that make the simulator build this stage as its .rknn was built."""
        q = self.quantization
        if not q or "dtype" not in q:  # none, or a CPU variant's record (onnxruntime runs it)
            return {}
        return {"dtype": q["dtype"], "dataset": str(q["dataset"]), "hybrid": q.get("hybrid")}

    def backend_for(self, backend: str) -> str:
        """The backend this stage runs on when the vocoder runs on ``backend``: an ``onnx`` stage
        always on onnxruntime; an ``rknn`` stage on the same backend as the vocoder (``sim``
        builds it from the ONNX, ``rknnlite`` loads the .rknn, ``ort`` runs the ONNX)."""
        return "ort" if self.impl == "onnx" else backend

    def paths(self, backend: str) -> dict[str, Path]:
        """role -> the file ``backend`` loads (.rknn for rknnlite, else the ONNX)."""
        kind = "rknn" if self.backend_for(backend) == "rknnlite" else "onnx"
        return {role: files[kind] for role, files in self.artifacts.items()}


def stage_section(*, impl: str, target: str | None, artifacts: dict[str, dict[str, Path | None]],
                  contract: dict, base: Path, quantization: dict | None = None, placement: str | None = None,
                  threads: int | None = None, heads: dict[str, Path] | None = None,
                  start: Path | None = None) -> dict:
    """A stage's JSON section, paths made relative to ``base`` (the plan's folder);
    ``quantization``: ``{"dtype", "dataset", "hybrid"}`` of a quantized NPU build, or a CPU
    variant's record (``{"variant", ..., "graphs": {role: {"source": path, ...}}}``; None: fp16 /
    fp32); ``placement``: ``core.placement.PLACEMENTS`` (None: from ``impl``); ``threads``: a CPU
    stage's onnxruntime threads (None: not recorded); ``heads``: a code predictor's quantized head
    graphs, codebook (``"1"`` ...) -> ONNX (``pipelines.cpu_heads``); ``start``: its start graph
    (``pipelines.cpu_start``)."""
    from rkspeech.plan.linking import plan_name

    def rel(x) -> str:  # inside the plan's folder (a file outside is linked in: plan.bundle)
        return plan_name(x, base)

    sec = {"impl": impl, "target": target, "placement": placement or ("npu" if impl == "rknn" else "cpu-fp32"),
           "contract": contract,
           "artifacts": {role: {kind: rel(p) for kind, p in files.items() if p is not None}
                         for role, files in artifacts.items()}}
    if threads is not None:
        sec["threads"] = int(threads)
    if heads:
        sec["heads"] = {str(j): rel(p) for j, p in heads.items()}
    if start is not None:
        sec["start"] = rel(start)
    if quantization and "variant" in quantization:
        graphs = {role: {**g, **({"source": rel(g["source"])} if g.get("source") else {})}
                  for role, g in (quantization.get("graphs") or {}).items()}
        sec["quantization"] = {**quantization, "graphs": graphs}
    elif quantization:
        sec["quantization"] = {**quantization, "dataset": rel(quantization["dataset"])}
    return sec


#: what a CPU variant's record must hold: key -> accepted types
_CPU_RECORD = {"variant": (str,), "quantizer": (str,), "bits": (int,), "onnxruntime": (str,)}


def _cpu_record(q: dict, where: str, placement: str, roles) -> dict:
    """A CPU variant's ``quantization`` record, checked (one line naming the first fault)."""
    def bad(why: str):
        return RkspeechError(f"{where}.quantization is not a valid CPU weight record ({why}); rebuild the plan")

    for key, types in _CPU_RECORD.items():
        v = q.get(key)
        if not isinstance(v, types) or isinstance(v, bool):
            raise bad(f"{key} is {v!r}")
    want = CPU_VARIANTS.get(placement)
    if want == "fp32":
        raise bad("a cpu-fp32 stage runs its exported graphs as they are and carries no record")
    if q["variant"] != want:
        raise bad(f"variant {q['variant']!r} for placement {placement!r}")
    if q["bits"] != {"int8": 8, "int4": 4}[want]:
        raise bad(f"bits {q['bits']!r} for variant {want}")
    bs = q.get("block_size")
    if want == "int4" and (not isinstance(bs, int) or isinstance(bs, bool) or bs < 16 or bs & (bs - 1)):
        raise bad(f"block_size {bs!r}: int4 needs a power of two >= 16")
    graphs = q.get("graphs")
    if not isinstance(graphs, dict) or set(graphs) != set(roles) or not all(isinstance(g, dict) for g in graphs.values()):
        raise bad(f"graphs must hold one entry per role {sorted(roles)}, got "
                  f"{sorted(graphs) if isinstance(graphs, dict) else graphs!r}")
    return q


def _quantization(sec: dict, base: Path, where: str, need_files: bool, placement: str = "npu",
                  roles=()) -> dict:
    q = sec.get("quantization")
    if q is None:
        if CPU_VARIANTS.get(placement) in ("int8", "int4"):
            raise RkspeechError(f"{where} is placed {placement} but has no quantization record; rebuild the plan")
        return {}
    if placement != "npu":
        if not isinstance(q, dict):
            raise RkspeechError(f"{where}.quantization is not a valid CPU weight record (not an object); "
                                "rebuild the plan")
        return _cpu_record(q, where, placement, roles)
    if isinstance(q, dict) and "variant" in q:
        raise RkspeechError(f"{where}.quantization is a CPU weight record ({q.get('variant')!r}) but the stage "
                            "is placed npu; rebuild the plan")
    if not isinstance(q, dict) or q.get("dtype") not in STAGE_DTYPES or not isinstance(q.get("dataset"), str):
        raise RkspeechError(f"{where}.quantization must hold dtype (one of {STAGE_DTYPES}) and its dataset")
    dataset = plan_file(base, q["dataset"], f"{where}.quantization.dataset")
    if need_files and not dataset.is_file():
        raise RkspeechError(f"{where}: calibration list {dataset} is missing (the simulator needs it to build "
                            f"the {q['dtype']} graph)")
    return {**q, "dataset": dataset}


def _heads(sec: dict, base: Path, where: str, roles) -> dict[int, Path]:
    """A stage's ``heads`` (codebook -> head graph), checked: only a step-form code predictor
    has them, one ONNX file per codebook that exists and carries a head contract."""
    raw = sec.get("heads")
    if raw is None:
        return {}
    if not isinstance(raw, dict) or tuple(roles) != ("step",) or not raw:
        raise RkspeechError(f"{where}.heads must map codebooks to head graphs, and only a step-form code "
                            "predictor has them; rebuild the plan")
    out: dict[int, Path] = {}
    for key, v in raw.items():
        if not (isinstance(key, str) and key.isdigit() and int(key) >= 1 and isinstance(v, str)):
            raise RkspeechError(f"{where}.heads has entry {key!r}: {v!r}; rebuild the plan")
        path = plan_file(base, v, f"{where}.heads.{key}")
        if not path.is_file():
            raise RkspeechError(f"{where}: head {key} graph {path} is missing")
        from rkspeech.contracts.head import CONTRACT_FORMAT as HEAD_FORMAT
        from rkspeech.contracts.read import contract_format

        if contract_format(path) != HEAD_FORMAT:
            raise RkspeechError(f"{where}: head {key} graph {path.name} does not carry a head contract; "
                                "rebuild the plan")
        out[int(key)] = path
    return dict(sorted(out.items()))


def _start(sec: dict, base: Path, where: str, roles, impl: str) -> Path | None:
    """A stage's ``start`` graph, checked: only a CPU step-form code predictor has one, an ONNX
    file that exists and carries the stage's contract format (its B and model are checked when
    it is opened, against the step graph's)."""
    raw = sec.get("start")
    if raw is None:
        return None
    if not isinstance(raw, str) or tuple(roles) != ("step",) or impl != "onnx":
        raise RkspeechError(f"{where}.start must name one ONNX graph, and only a code predictor placed on the CPU "
                            "in step form has one; rebuild the plan")
    path = plan_file(base, raw, f"{where}.start")
    if not path.is_file():
        raise RkspeechError(f"{where}: start graph {path} is missing")
    from rkspeech.contracts.read import contract_format

    want = (sec.get("contract") or {}).get("format")
    if contract_format(path) != want:
        raise RkspeechError(f"{where}: start graph {path.name} does not carry the stage's contract ({want}); "
                            "rebuild the plan")
    return path


def load_stages(raw: dict, plan_path: Path, backend: str | None) -> dict[str, StagePlan]:
    """Parse and check every stage section of a plan (``raw``: its JSON)."""
    out: dict[str, StagePlan] = {}
    base = plan_path.parent
    for name, role_sets in STAGE_ROLES.items():
        sec = raw.get(name)
        if sec is None:
            continue
        where = f"plan {plan_path}: {name}"
        if not isinstance(sec, dict):
            raise RkspeechError(f"{where} must be an object")
        impl = sec.get("impl")
        if impl not in STAGE_IMPLS:
            raise RkspeechError(f"{where}.impl is {impl!r}, expected one of {STAGE_IMPLS}")
        arts = sec.get("artifacts")
        roles = next((r for r in role_sets if isinstance(arts, dict) and set(arts) == set(r)), None)
        if roles is None:
            got = sorted(arts) if isinstance(arts, dict) else arts
            want = " or ".join(", ".join(r) for r in role_sets)
            raise RkspeechError(f"{where}.artifacts must hold {want}; got {got!r}")
        contract = sec.get("contract")
        if not isinstance(contract, dict) or not isinstance(contract.get("format"), str):
            raise RkspeechError(f"{where}.contract must be an object with a format")
        artifacts: dict[str, dict[str, Path]] = {}
        for role in roles:
            files = arts[role]
            if not isinstance(files, dict) or not isinstance(files.get("onnx"), str):
                raise RkspeechError(f"{where}.artifacts.{role} must name its onnx file (and rknn when built)")
            if impl == "rknn" and not isinstance(files.get("rknn"), str):
                raise RkspeechError(f"{where} is placed on the NPU but {role} has no rknn file")
            artifacts[role] = {k: plan_file(base, v, f"{where}.artifacts.{role}.{k}")
                               for k, v in files.items() if k in ("onnx", "rknn") and isinstance(v, str)}
        placement = sec.get("placement", "npu" if impl == "rknn" else "cpu-fp32")
        if placement not in PLACEMENTS:
            raise RkspeechError(f"{where}.placement is {placement!r}, expected one of {', '.join(PLACEMENTS)}")
        if (placement == "npu") != (impl == "rknn"):
            raise RkspeechError(f"{where} is placed {placement} but its impl is {impl!r}; rebuild the plan")
        threads = sec.get("threads")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise RkspeechError(f"{where}.threads must be a whole number >= 1, got {threads!r}")
        core_mask = sec.get("core_mask")
        if core_mask is not None and core_mask not in CORE_MASKS:
            raise RkspeechError(f"{where}.core_mask is {core_mask!r}, expected one of {', '.join(CORE_MASKS)}")
        quant = _quantization(sec, base, where, need_files=backend == "sim", placement=placement, roles=roles)
        heads = _heads(sec, base, where, roles)
        start = _start(sec, base, where, roles, impl)
        stage = StagePlan(name, impl, sec.get("target"), artifacts, contract, quant, placement, threads, core_mask,
                          heads, start)
        for role, path in stage.paths(backend or "ort").items():
            if not path.is_file():
                raise RkspeechError(f"{where}: {role} artifact {path} is missing")
            if path.suffix == ".onnx":
                from rkspeech.contracts.read import contract_format

                fmt = contract_format(path)
                if fmt != contract["format"]:
                    raise RkspeechError(f"{where}: {role} artifact {path.name} carries contract format {fmt!r}, "
                                        f"the plan says {contract['format']!r}; rebuild the plan")
        out[name] = stage
    return out
