"""Execution plans: which graphs run each stage, written by ``build``, read by runtimes.

``plan.json`` holds one stage record per stage (``plan.record``: one shape for the vocoder, the
talker, the code predictor and the Whisper encoder); this module reads and writes the vocoder's
(``vocoder``), ``plan.sections`` the talker's and code predictor's.  Paths are stored relative to
the plan's folder so the folder can be copied to a board; a name that leaves the folder is
refused (``plan.paths``).

The vocoder's step graphs, role (``main``, ``first``) -> kind -> file, come in up to three kinds:

* ``rknn``: the .rknn graphs (rknn-toolkit-lite2 on a board);
* ``onnx``: the ONNX those were converted from (the build's formulation, ``npu`` by default;
  the simulator builds from it);
* ``host_onnx``: exact step graphs for the host (the ``reference`` formulation: the model's own
  ops, 108-115 dB stepwise against the full decode, where the npu graph's phase Snake stops at
  ~72 dB in fp32), with their own ``host_contract`` (int64 codes, channel-major cache tails;
  same B per role, signal and cache size as the NPU graphs).

``backends`` says which kind each backend runs (``{"ort": "host_onnx", "sim": "onnx",
"rknnlite": "rknn"}`` from ``build``); :meth:`Plan.graphs` is the one place that answers.
A plan without it runs as earlier ones did: ``ort`` and ``sim`` the ``onnx`` graphs,
``rknnlite`` the ``rknn``.

Validation turns every inconsistency into one clear error: a missing file, a value of the wrong
type, first/main caches of different sizes, a contract that disagrees with an artifact (the
message names the fields that differ), an ONNX artifact whose graph I/O disagrees with its own
contract, an artifact built for another chip.  Standard library only (+ the .rknn reader and
the stdlib ONNX walker), so a board can load plans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.atomic import read_json_object, write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.contracts.vocoder import VocoderContract
from rkspeech.plan.paths import plan_file
from rkspeech.plan.record import KINDS, PLAN_FORMAT, upgrade

#: the vocoder's placements: its .rknn on the NPU, or (a build that did not convert) its ONNX on the CPU
VOCODER_PLACEMENTS = ("npu", "cpu-fp32")
#: the kinds each backend can run (runtime.runners.BACKENDS; a .rknn only on a board)
BACKEND_KINDS = {"ort": ("host_onnx", "onnx"), "sim": ("onnx", "host_onnx"), "rknnlite": ("rknn",)}
#: what ``build`` writes as ``backends`` when it exports host graphs
BUILD_BACKENDS = {"ort": "host_onnx", "sim": "onnx", "rknnlite": "rknn"}


def default_backends(has_host: bool) -> dict[str, str]:
    """``backends`` of a plan that does not name them: a plan with ``host_onnx`` runs it on
    onnxruntime; older plans run their ``onnx`` graphs on onnxruntime and the simulator."""
    return {"ort": "host_onnx" if has_host else "onnx", "sim": "onnx", "rknnlite": "rknn"}


@dataclass
class Plan:
    path: Path
    placement: str  # VOCODER_PLACEMENTS
    target: str | None
    contract: VocoderContract
    rknn: dict[str, Path]  # main/first: the .rknn graphs
    onnx: dict[str, Path] = field(default_factory=dict)  # main/first, the graphs the .rknn came from
    #: the graphs of the backend the plan was loaded for (``backend``), per role (B differs)
    contracts: dict[str, VocoderContract] = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    #: text-to-speech stages placed by the plan (``plan.sections``): talker, code_predictor
    stages: dict = field(default_factory=dict)
    host_onnx: dict[str, Path] = field(default_factory=dict)  # main/first: exact host graphs
    #: backend -> the kind it runs (``default_backends`` for plans that do not say)
    backends: dict[str, str] = field(default_factory=lambda: default_backends(False))
    backend: str | None = None  # the backend ``load_plan`` validated the graphs for
    #: voice cloning's encoders the plan holds (``plan.sections.CLONE_ROLES``): speaker_encoder, speech_encoder
    encoders: dict = field(default_factory=dict)

    def roles(self) -> list[str]:
        return [r for r in ("first", "main") if r in self.contracts]

    def kind(self, backend: str) -> str:
        """The kind of vocoder graph ``backend`` runs."""
        if backend not in self.backends:
            raise RkspeechError(f"unknown backend {backend!r}; choose one of {', '.join(self.backends)}")
        return self.backends[backend]

    def graphs(self, backend: str) -> dict[str, Path]:
        """role -> the step graph ``backend`` runs: the one place that picks it (``ort``: the
        exact host graphs when the plan has them, ``sim``: the ONNX the .rknn was converted
        from, ``rknnlite``: the .rknn)."""
        return dict(getattr(self, self.kind(backend)))


def write_plan(path, *, placement: str, target: str | None, contracts: dict[str, VocoderContract],
               rknn: dict[str, Path] | None = None, onnx: dict[str, Path] | None = None,
               host_onnx: dict[str, Path] | None = None, host_contracts: dict[str, VocoderContract] | None = None,
               backends: dict[str, str] | None = None, extra: dict | None = None,
               stages: dict[str, dict] | None = None) -> Path:
    """The plan with the vocoder's record (``placement``: :data:`VOCODER_PLACEMENTS`;
    ``contracts``: of the ``onnx`` / ``rknn`` graphs; ``host_onnx`` (with ``host_contracts``):
    the exact host graphs, written with ``backends`` (default :data:`BUILD_BACKENDS`));
    ``stages``: stage name -> record (``plan.sections.stage_section``); ``extra``: ``build``."""
    from rkspeech.plan.linking import plan_name

    p = Path(path)
    base = p.parent.resolve()
    base.mkdir(parents=True, exist_ok=True)
    if placement not in VOCODER_PLACEMENTS:
        raise ValueError(f"write_plan: placement {placement!r} is not one of {VOCODER_PLACEMENTS}")

    arts: dict[str, dict[str, str]] = {}
    for kind, files in (("rknn", rknn), ("onnx", onnx), ("host_onnx", host_onnx)):
        for role, a in (files or {}).items():
            arts.setdefault(role, {})[kind] = plan_name(a, base)  # a file outside is linked in: plan.bundle
    rec = {"placement": placement, "target": target, "artifacts": arts, "contract": contracts["main"].to_dict(),
           "codes_length": {role: c.codes_length for role, c in contracts.items()}}
    if host_onnx:
        if not host_contracts or "main" not in host_contracts:
            raise ValueError("write_plan: host_onnx needs host_contracts with a main contract")
        rec["host_contract"] = host_contracts["main"].to_dict()
        rec["backends"] = dict(backends or BUILD_BACKENDS)
    data = {"format": PLAN_FORMAT, **(stages or {}), "vocoder": rec}
    if extra:
        data["build"] = extra
    return write_plan_data(p, data)


def write_plan_data(path, data: dict) -> Path:
    """Write the plan ``data`` (format 2; a format-1 dict is upgraded: ``plan.record``) to ``path``
    with its ``integrity`` record (size and sha256 of every file it names and of their golden
    replays: ``plan.integrity``) and, unless ``build`` holds them, the runtime versions this
    process built it with (``plan.versions``: ``build.runtime_versions``)."""
    from rkspeech.plan.integrity import INTEGRITY_KEY, record

    from rkspeech.plan.versions import RUNTIME_KEY, build_versions

    p = Path(path)
    data = {k: v for k, v in upgrade(data, f"plan {p}").items() if k != INTEGRITY_KEY}
    build = data.get("build") if isinstance(data.get("build"), dict) else {}
    if RUNTIME_KEY not in build:  # what this build ran (a plan rewritten keeps its own)
        data["build"] = {**build, RUNTIME_KEY: build_versions(data)}
    data[INTEGRITY_KEY] = record(data, p.parent)
    return write_json(p, data)


def contract_differences(a: VocoderContract, b: VocoderContract) -> list[str]:
    """``["sample_rate 24000 vs 16000", ...]``: the contract fields in which ``a`` and ``b``
    differ (``extra`` is not compared, as in ``VocoderContract.__eq__``)."""
    da, db = a.to_dict(), b.to_dict()
    da.pop("extra", None)
    db.pop("extra", None)
    out = []
    for key in da.keys() | db.keys():
        if da.get(key) != db.get(key):
            va, vb = da.get(key), db.get(key)
            if key == "segments":
                names = [s[0] for s in va or []] + [s[0] for s in vb or []]
                sa, sb = {s[0]: s[1] for s in va or []}, {s[0]: s[1] for s in vb or []}
                diff = [n for n in dict.fromkeys(names) if sa.get(n) != sb.get(n)]
                out.append(f"cache segments {', '.join(f'{n} {sa.get(n)} vs {sb.get(n)}' for n in diff[:3])}"
                           if diff else "cache segment order")
            else:
                out.append(f"{key} {va} vs {vb}")
    order = list(da)
    return sorted(out, key=lambda s: order.index(s.split()[0]) if s.split()[0] in order else len(order))


def _artifact_contract(path: Path, role: str, expect_target: str | None) -> VocoderContract:
    if path.suffix == ".rknn":
        from rkspeech.contracts.rknn_file import read_container

        info = read_container(path, expect_target=expect_target)
        if not isinstance(info.contract, VocoderContract):
            raise RkspeechError(f"plan: {role} artifact {path} carries no rkspeech contract of a vocoder step (custom string)")
        return info.contract
    from rkspeech.contracts.read import read_contract

    return read_contract(path, VocoderContract)


def read_plan(path) -> dict:
    """``plan.json``'s JSON in format 2 (``plan.record.upgrade``: a format-1 plan gets its stage
    records), after its files passed the integrity check (``plan.integrity``: sizes, then hashes
    cached by mtime; a plan without the record is not checked).  The one place every command
    reads a plan through (``load_plan``: decode, speak, serve; ``rkspeech check-board``, doctor)."""
    p = Path(path)
    if p.is_dir():
        raise RkspeechError(f"plan {p} is a directory; pass its plan.json")
    raw = upgrade(read_json_object(p, "plan"), f"plan {p}")
    from rkspeech.plan.integrity import check

    check(raw, p)
    return raw


def load_plan(path, *, backend: str | None = None, expect_target: str | None = None) -> Plan:
    """Read and validate ``plan.json``.  ``backend`` 'ort' validates the ONNX artifacts,
    'sim' needs the ONNX too (the simulator builds from ONNX), 'rknnlite' the .rknn ones."""
    p = Path(path)
    raw = read_plan(p)
    sd = raw.get("vocoder")
    if not isinstance(sd, dict):
        raise RkspeechError(f"plan {p}: no vocoder record (the plan places no speech decoder)")
    placement = sd.get("placement")
    if placement not in VOCODER_PLACEMENTS:
        raise RkspeechError(f"plan {p}: vocoder.placement is {placement!r}, expected one of {VOCODER_PLACEMENTS}")
    base = p.parent
    arts = sd.get("artifacts") or {}
    if not isinstance(arts, dict):
        raise RkspeechError(f"plan {p}: vocoder.artifacts must be an object (role -> kind -> file)")
    unknown = set(arts) - {"main", "first"}
    if unknown:
        raise RkspeechError(f"plan {p}: unknown artifact role(s) {sorted(unknown)} in vocoder.artifacts")
    files: dict[str, dict[str, Path]] = {k: {} for k in KINDS}
    for role, kinds in arts.items():
        if not isinstance(kinds, dict):
            raise RkspeechError(f"plan {p}: vocoder.artifacts.{role} must map kinds ({', '.join(KINDS)}) to files")
        for kind, v in kinds.items():
            where = f"plan {p}: vocoder.artifacts.{role}.{kind}"
            if kind not in KINDS:
                raise RkspeechError(f"{where}: unknown kind; kinds: {', '.join(KINDS)}")
            if not isinstance(v, str) or not v:
                raise RkspeechError(f"{where} must be a file path (a string), got {v!r}")
            if kind == "host_onnx" and not v.lower().endswith(".onnx"):
                raise RkspeechError(f"{where} must be an .onnx file (onnxruntime runs it), got {v!r}")
            files[kind][role] = plan_file(base, v, where)
    rknn, onnx, host = files["rknn"], files["onnx"], files["host_onnx"]
    backends = _backends(sd, p, bool(host))
    target = sd.get("target")
    if target is not None and not isinstance(target, str):
        raise RkspeechError(f"plan {p}: vocoder.target must be a chip name, got {target!r}")
    if expect_target and target and target != expect_target:
        raise RkspeechError(f"plan {p} was built for {target}, this machine is {expect_target}")
    if backend is None:  # every kind's own checks, as before backends: the .rknn only without ONNX
        kind = "rknn" if placement == "npu" and not onnx else "onnx"
    elif backend not in backends:
        raise RkspeechError(f"plan {p}: unknown backend {backend!r}; choose one of {', '.join(backends)}")
    else:
        kind = backends[backend]
    use = files[kind]
    if backend in ("ort", "sim") and not use:
        if kind == "onnx":
            raise RkspeechError(f"plan {p}: backend {backend} needs ONNX artifacts (vocoder onnx graphs), "
                                "the plan has none")
        raise RkspeechError(f"plan {p}: backend {backend} runs the vocoder's {kind} graphs (vocoder.backends), "
                            "the plan has none")
    if "main" not in use:
        raise RkspeechError(f"plan {p}: no main artifact for this backend")
    for role, a in use.items():
        if a.is_dir():
            raise RkspeechError(f"plan {p}: {role} artifact {a} is a directory, not a model file")
        if not a.is_file():
            raise RkspeechError(f"plan {p}: {role} artifact {a} is missing")
    if "host_contract" in sd and not host:
        raise RkspeechError(f"plan {p}: vocoder.host_contract without host_onnx graphs; "
                            "rebuild, or fix the plan")
    if host and "host_contract" not in sd:
        raise RkspeechError(f"plan {p}: vocoder host_onnx graphs without their host_contract; rebuild, or fix the plan")
    try:
        npu_declared = VocoderContract.from_dict(sd["contract"]) if "contract" in sd else None
        host_declared = VocoderContract.from_dict(sd["host_contract"]) if host else None
    except RkspeechError as exc:
        raise RkspeechError(f"plan {p}: {exc}") from None
    declared, key = (host_declared, "host_contract") if kind == "host_onnx" else (npu_declared, "contract")
    contracts = {}
    for role, a in use.items():
        try:
            contracts[role] = _artifact_contract(a, role, expect_target if a.suffix == ".rknn" else None)
        except RkspeechError as exc:
            raise RkspeechError(f"plan {p}: {role} artifact: {exc}") from None
    main = contracts["main"]
    if declared is not None and declared != main:
        raise RkspeechError(
            f"plan {p}: the {key} in the plan disagrees with the main artifact {use['main'].name} "
            f"(plan vs artifact: {'; '.join(contract_differences(declared, main))}); rebuild, or fix the plan"
        )
    if "first" in contracts and not main.compatible_cache(contracts["first"]):
        first = contracts["first"]
        diff = [d for d in contract_differences(first, main) if not d.startswith(("B ", "formulation ", "codes_dtype "))]
        raise RkspeechError(
            f"plan {p}: first and main artifacts have different caches or signals "
            f"(first vs main: {'; '.join(diff)}); rebuild them from one checkpoint"
        )
    if kind == "host_onnx":
        _check_host_graphs(p, sd, contracts, npu_declared)
    from rkspeech.plan.sections import CLONE_ROLES, load_stages

    return Plan(p, placement, target, main, rknn, onnx, contracts, raw, load_stages(raw, p, backend),
                host_onnx=host, backends=backends, backend=backend,
                encoders=load_stages(raw, p, backend, CLONE_ROLES))


def _backends(sd: dict, p: Path, has_host: bool) -> dict[str, str]:
    """``vocoder.backends`` over :func:`default_backends`, each entry checked."""
    out = default_backends(has_host)
    given = sd.get("backends")
    if given is None:
        return out
    if not isinstance(given, dict):
        raise RkspeechError(f"plan {p}: vocoder.backends must be an object (backend -> kind), got {given!r}")
    for backend, kind in given.items():
        if backend not in BACKEND_KINDS:
            raise RkspeechError(f"plan {p}: vocoder.backends names unknown backend {backend!r}; "
                                f"backends: {', '.join(BACKEND_KINDS)}")
        if kind not in BACKEND_KINDS[backend]:
            raise RkspeechError(f"plan {p}: vocoder.backends.{backend} is {kind!r}; {backend} runs "
                                f"{' or '.join(BACKEND_KINDS[backend])}")
        out[backend] = kind
    return out


#: contract fields in which an exact host graph may differ from the NPU graph it stands for
_HOST_MAY_DIFFER = ("formulation ", "codes_dtype ", "cache segment")


def _check_host_graphs(p: Path, sd: dict, host: dict[str, VocoderContract], npu: VocoderContract | None) -> None:
    """The host graphs stand for the NPU graphs: the same roles and B per role
    (``codes_length``), the same signal and cache size (``contract``); the codes dtype, the
    formulation and the cache's internal layout may differ (the runner casts codes, and a cache
    never passes between the two)."""
    lengths = sd.get("codes_length")
    if lengths is not None:
        if not isinstance(lengths, dict) or not all(isinstance(v, int) and not isinstance(v, bool)
                                                    for v in lengths.values()):
            raise RkspeechError(f"plan {p}: vocoder.codes_length must map roles to integers, got {lengths!r}")
        if set(lengths) != set(host):
            raise RkspeechError(f"plan {p}: the host graphs hold roles {sorted(host)}, the NPU graphs "
                                f"{sorted(lengths)}; rebuild")
        diff = [f"{r} B {host[r].codes_length} vs {lengths[r]}" for r in sorted(host)
                if host[r].codes_length != lengths[r]]
        if diff:
            raise RkspeechError(f"plan {p}: the host graphs do not match the NPU graphs (host vs npu: "
                                f"{'; '.join(diff)}); rebuild")
    if npu is not None:
        diff = [d for d in contract_differences(host["main"], npu) if not d.startswith(_HOST_MAY_DIFFER)]
        if diff:
            raise RkspeechError(f"plan {p}: the host graphs do not match the NPU graphs (host vs npu: "
                                f"{'; '.join(diff)}); rebuild")


_CHECKED_FIELDS = ("num_quantizers", "codebook_size", "head_dim", "sliding_window", "rope_theta",
                   "samples_per_token", "sample_rate")


def check_plan_for_model(plan, vocoder_cfg) -> None:
    """Refuse a plan built for another speech tokenizer (names each differing field)."""
    c = plan.contract
    diffs = [f"{name} {getattr(c, name)} vs {getattr(vocoder_cfg, name)}" for name in _CHECKED_FIELDS
             if getattr(c, name) != getattr(vocoder_cfg, name)]
    if diffs:
        raise RkspeechError(f"plan {plan.path} was not built for this model's speech tokenizer (plan vs "
                            f"model: {', '.join(diffs)}); build it with rkspeech build qwen3-tts-vocoder "
                            "--model-dir MODEL")
