"""The talker's and code predictor's stage records (``plan.record``), beside the vocoder's.

A ``rkspeech build qwen3-tts`` plan holds, next to ``vocoder``, one record per stage that runs
as a graph::

    "code_predictor": {"placement": "npu", "target": "rk3588",
                       "artifacts": {"step": {"onnx": "code_predictor/...onnx", "rknn": "...rknn"}},
                       "contract": {"format": "rkspeech-talker/1", "model": "qwen3-tts-code-predictor-step", ...}},

The code predictor holds one main role: ``step`` (its stack as a one-position step graph, the
talker's contract format with its own model name) or ``frame`` (the unrolled greedy frame graph,
format ``rkspeech-code-predictor/1``).  A step-form code predictor on the CPU may also hold the
roles ``head1`` ... (its heads as graphs, ``pipelines.cpu_heads``) and ``start`` (the same stack
at B = 2, a frame's first two positions in one call, ``pipelines.cpu_start``), each an ``onnx`` file.
A CPU-placed talker or step-form code predictor may also hold ``lanes``: its step graph for N
streams at once (``pipelines.lane_graphs``; ``B`` = N, capacity N x a lane's positions; the
batched generation of ``runtime.tts.batch``).
    "talker": {"placement": "cpu-fp32", "artifacts": {"prefill": {"onnx": ...}, "decode": {"onnx": ...}},
               "contract": {"format": "rkspeech-talker/1", ...}}

A code predictor built as an int16 + fp16 hybrid also holds ``"quantization": {"dtype":
"int16-hybrid", "dataset": "code_predictor/calib/dataset.txt", "hybrid": {...}}``: what the
simulator needs to build it as the .rknn was built (a board loads the .rknn as it is).

``placement`` (``core.placement``: ``npu``, ``cpu-fp32``, ``cpu-int8``, ``cpu-int4``) says where
and with which weights: ``npu`` is the .rknn (the simulator here, rknnlite on a board), ``cpu-*``
onnxruntime on the host's CPU.  A ``cpu-int8`` / ``cpu-int4`` stage's ``onnx`` artifacts are the
quantized variants (``convert.cpu_quant``) and its ``quantization`` is their record, no dataset::

    "talker": {"placement": "cpu-int4", "threads": 2,
               "artifacts": {"prefill": {"onnx": "talker/cpu/..int4.onnx"}, "decode": {...}},
               "quantization": {"variant": "int4", "quantizer": "onnxruntime...MatMul4BitsQuantizer",
                                "bits": 4, "block_size": 32, "symmetric": false, "accuracy_level": 4,
                                "onnxruntime": "1.19.2",
                                "graphs": {"decode": {"source": "talker/onnx/...onnx", "bytes_before": ..,
                                                      "bytes_after": .., "quantized_ops": {..}}, ...}}}

A plan built for a Base root also holds voice cloning's two encoders (``CLONE_ROLES``; read into
``Plan.encoders``, not ``Plan.stages``: they run once per request, not per frame), each one CPU graph::

    "speaker_encoder": {"placement": "cpu-fp32", "target": null,
                        "artifacts": {"encoder": {"onnx": "clone/speaker_encoder.onnx"}},
                        "contract": {"format": "rkspeech-speaker-encoder/1", ...}},
    "speech_encoder": {... "contract": {"format": "rkspeech-speech-encoder/1", ...}}

``threads`` (optional, CPU stages): onnxruntime intra-op threads for that stage's graphs; a
caller's explicit thread count wins (``runtime.tts.open_stages.open_stage_backends``).
A stage absent from the plan runs in torch on the host.  Paths are relative to the plan's folder.
Validation: the files the chosen backend needs exist, and each ONNX artifact's contract has the
record's format (the stage loaders check the rest against the model).  Standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.errors import RkspeechError
from rkspeech.core.placement import CPU_VARIANTS, PLACEMENTS
from rkspeech.core.targets import CORE_MASKS
from rkspeech.plan.paths import plan_file
from rkspeech.plan.record import GOLDENS, LANES_ROLE, START_ROLE, head_codebook, head_role, record_goldens, record_placement

#: stage name -> the main role sets its record may hold (exactly one of them)
STAGE_ROLES = {"talker": (("prefill", "decode"),), "code_predictor": (("step",), ("frame",))}
#: voice cloning's encoders (Base models; ``contracts.clone``): one graph each, run once per request
#: on the CPU (``Plan.encoders``; a plan without them still clones where torch is installed)
CLONE_ROLES = {"speaker_encoder": (("encoder",),), "speech_encoder": (("encoder",),)}
#: ``quantization.dtype`` values a stage may record (fp16: no section)
STAGE_DTYPES = ("fp16", "int16-hybrid")


@dataclass
class StagePlan:
    name: str
    #: ``core.placement.PLACEMENTS``: where and with which weights the stage runs
    placement: str
    target: str | None
    artifacts: dict[str, dict[str, Path]]  # main role -> {"onnx": path, "rknn": path}
    contract: dict = field(default_factory=dict)
    #: ``{"dtype", "dataset" (Path), "hybrid"}`` for a quantized NPU build; a CPU variant's record
    #: (``{"variant", "quantizer", "bits", ...}``, see the module docstring); else empty
    quantization: dict = field(default_factory=dict)
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
    #: a CPU stage's golden replays, role -> file (``pipelines.cpu_goldens``; replayed by
    #: ``rkspeech check-board``); empty: none recorded (an NPU stage, or an older plan)
    goldens: dict[str, Path] = field(default_factory=dict)
    #: a CPU stage's step graph for several streams (``LANES_ROLE``); None: one stream at a time
    lanes: Path | None = None

    @property
    def on_npu(self) -> bool:
        return self.placement == "npu"

    def simulator_build(self) -> dict:
        """The ``GraphCodePredictor`` / ``open_runner`` build keywords (``dtype``, ``dataset``,
        ``hybrid``) that make the simulator build this stage as its .rknn was built."""
        q = self.quantization
        if not q or "dtype" not in q:  # none, or a CPU variant's record (onnxruntime runs it)
            return {}
        return {"dtype": q["dtype"], "dataset": str(q["dataset"]), "hybrid": q.get("hybrid")}

    def backend_for(self, backend: str) -> str:
        """The backend this stage runs on when the vocoder runs on ``backend``: a CPU stage
        always on onnxruntime; an NPU stage on the same backend as the vocoder (``sim``
        builds it from the ONNX, ``rknnlite`` loads the .rknn, ``ort`` runs the ONNX)."""
        return backend if self.on_npu else "ort"

    def paths(self, backend: str) -> dict[str, Path]:
        """main role -> the file ``backend`` loads (.rknn for rknnlite, else the ONNX)."""
        kind = "rknn" if self.backend_for(backend) == "rknnlite" else "onnx"
        return {role: files[kind] for role, files in self.artifacts.items()}


def plan_streams(plan) -> int:
    """The streams a plan's lanes graphs serve at once (their contracts' B; 1: the talker and the
    code predictor do not both have one)."""
    from rkspeech.contracts.read import read_contract

    stages = [plan.stages.get(k) for k in ("talker", "code_predictor")]
    if not all(s is not None and s.lanes is not None for s in stages):
        return 1
    return min(read_contract(s.lanes).B for s in stages)


def stage_section(*, placement: str, target: str | None, artifacts: dict[str, dict[str, Path | None]],
                  contract: dict, base: Path, quantization: dict | None = None,
                  threads: int | None = None, heads: dict[str, Path] | None = None,
                  start: Path | None = None, goldens: dict[str, Path] | None = None,
                  lanes: Path | None = None) -> dict:
    """A stage's record (``plan.record``), paths made relative to ``base`` (the plan's folder);
    ``placement``: ``core.placement.PLACEMENTS``; ``quantization``: ``{"dtype", "dataset",
    "hybrid"}`` of a quantized NPU build, or a CPU variant's record (``{"variant", ..., "graphs":
    {role: {"source": path, ...}}}``; None: fp16 / fp32); ``threads``: a CPU stage's onnxruntime
    threads (None: not recorded); ``heads``: a code predictor's quantized head graphs, codebook
    (``"1"`` ...) -> ONNX (``pipelines.cpu_heads``); ``start``: its start graph
    (``pipelines.cpu_start``); ``lanes``: the stage's step graph for several streams
    (``pipelines.lane_graphs``); all three written as roles of ``artifacts``; ``goldens``: role -> the
    golden replay of a CPU stage's graph (``pipelines.cpu_goldens``), written as ``goldens``."""
    from rkspeech.plan.linking import plan_name

    if placement not in PLACEMENTS:
        raise ValueError(f"stage_section: placement {placement!r} is not one of {PLACEMENTS}")

    def rel(x) -> str:  # inside the plan's folder (a file outside is linked in: plan.bundle)
        return plan_name(x, base)

    arts = {role: {kind: rel(p) for kind, p in files.items() if p is not None} for role, files in artifacts.items()}
    if start is not None:
        arts[START_ROLE] = {"onnx": rel(start)}
    if lanes is not None:
        arts[LANES_ROLE] = {"onnx": rel(lanes)}
    for j, p in (heads or {}).items():
        arts[head_role(int(j))] = {"onnx": rel(p)}
    sec = {"placement": placement, "target": target, "contract": contract, "artifacts": arts}
    if threads is not None:
        sec["threads"] = int(threads)
    add_goldens(sec, goldens, base)
    if quantization and "variant" in quantization:
        graphs = {role: {**g, **({"source": rel(g["source"])} if g.get("source") else {})}
                  for role, g in (quantization.get("graphs") or {}).items()}
        sec["quantization"] = {**quantization, "graphs": graphs}
    elif quantization:
        sec["quantization"] = {**quantization, "dataset": rel(quantization["dataset"])}
    return sec


def add_goldens(section: dict, goldens: dict[str, Path] | None, base: Path) -> dict:
    """``section`` (a stage record) with ``goldens`` (role -> golden replay of its graph) listed,
    relative to ``base``; nothing when there are none."""
    from rkspeech.plan.linking import plan_name

    if goldens:
        section[GOLDENS] = {role: plan_name(p, base) for role, p in goldens.items()}
    return section


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


def _extra_roles(arts: dict, base: Path, where: str, roles, placement: str, contract: dict
                 ) -> tuple[dict[int, Path], Path | None, Path | None]:
    """``(heads, start, lanes)``: a code predictor's ``head{j}`` and ``start`` roles and a stage's
    ``lanes``, checked: only a CPU step-form code predictor has heads and a start graph, only a
    CPU-placed talker or step-form code predictor a lanes graph; each one ONNX file that exists
    and carries its contract (a head's, or the stage's format for the others, whose B and model
    are checked when they are opened)."""
    from rkspeech.contracts.head import CONTRACT_FORMAT as HEAD_FORMAT
    from rkspeech.contracts.read import contract_format

    heads: dict[int, Path] = {}
    start = lanes = None
    for role, files in arts.items():
        if role in roles:
            continue
        j = head_codebook(role)
        if j is None and role not in (START_ROLE, LANES_ROLE):
            continue  # refused by the caller's role check
        what = f"head {j}" if j is not None else role
        if role == LANES_ROLE:
            if placement == "npu" or tuple(roles) == ("frame",):
                raise RkspeechError(f"{where}.artifacts.lanes: only a CPU-placed talker or step-form code predictor "
                                    "has a lanes graph; rebuild the plan")
        elif tuple(roles) != ("step",) or (role == START_ROLE and placement == "npu"):
            raise RkspeechError(f"{where}.artifacts.{role}: only a code predictor placed "
                                f"{'on the CPU ' if role == START_ROLE else ''}in step form has a {what} graph; "
                                "rebuild the plan")
        if not isinstance(files, dict) or set(files) != {"onnx"} or not isinstance(files["onnx"], str):
            raise RkspeechError(f"{where}.artifacts.{role} must name one onnx file; rebuild the plan")
        path = plan_file(base, files["onnx"], f"{where}.artifacts.{role}.onnx")
        if not path.is_file():
            raise RkspeechError(f"{where}: {what} graph {path} is missing")
        want = HEAD_FORMAT if j is not None else contract.get("format")
        if contract_format(path) != want:
            raise RkspeechError(f"{where}: {what} graph {path.name} does not carry "
                                f"{'a head contract' if j is not None else f'the stage' + chr(39) + f's contract ({want})'}; "
                                "rebuild the plan")
        if j is not None:
            heads[j] = path
        elif role == START_ROLE:
            start = path
        else:
            lanes = path
    return dict(sorted(heads.items())), start, lanes


def load_stages(raw: dict, plan_path: Path, backend: str | None, roles_of: dict | None = None) -> dict[str, StagePlan]:
    """Parse and check the talker's and code predictor's records of a plan (``raw``: its JSON,
    format 2); ``roles_of``: another stage table (:data:`CLONE_ROLES`: the cloning encoders')."""
    out: dict[str, StagePlan] = {}
    base = plan_path.parent
    for name, role_sets in (roles_of or STAGE_ROLES).items():
        sec = raw.get(name)
        if sec is None:
            continue
        where = f"plan {plan_path}: {name}"
        placement = record_placement(sec, where, PLACEMENTS)
        arts = sec.get("artifacts")
        extra = {START_ROLE, LANES_ROLE} | {r for r in (arts or {}) if head_codebook(r) is not None} if isinstance(arts, dict) else set()
        roles = next((r for r in role_sets if isinstance(arts, dict) and set(arts) - extra == set(r)), None)
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
            if placement == "npu" and not isinstance(files.get("rknn"), str):
                raise RkspeechError(f"{where} is placed on the NPU but {role} has no rknn file")
            artifacts[role] = {k: plan_file(base, v, f"{where}.artifacts.{role}.{k}")
                               for k, v in files.items() if k in ("onnx", "rknn") and isinstance(v, str)}
        threads = sec.get("threads")
        if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
            raise RkspeechError(f"{where}.threads must be a whole number >= 1, got {threads!r}")
        core_mask = sec.get("core_mask")
        if core_mask is not None and core_mask not in CORE_MASKS:
            raise RkspeechError(f"{where}.core_mask is {core_mask!r}, expected one of {', '.join(CORE_MASKS)}")
        quant = _quantization(sec, base, where, need_files=backend == "sim", placement=placement, roles=roles)
        heads, start, lanes = _extra_roles(arts, base, where, roles, placement, contract)
        listed = record_goldens(sec, where) or {}
        goldens = {role: plan_file(base, v, f"{where}.{GOLDENS}.{role}") for role, v in listed.items()}
        stage = StagePlan(name, placement, sec.get("target"), artifacts, contract, quant, threads, core_mask,
                          heads, start, goldens, lanes)
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
