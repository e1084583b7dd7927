"""Execution plans: which artifacts run the speech decoder, written by ``build``, read by runtimes.

``plan.json`` keeps the seed project's runtime shape (``{"speech_decoder": {"impl": "rknn",
"artifacts": {"main": ..., "first": ...}}}``) and adds the ONNX artifacts and the contract.
Paths are stored relative to the plan's folder so the folder can be copied to a board.

Validation turns every inconsistency into one clear error: a missing file, a value of the wrong
type, first/main caches of different sizes, a contract that disagrees with an artifact (the
message names the fields that differ), an ONNX artifact whose graph I/O disagrees with its own
contract, an artifact built for another chip.  Standard library only (+ the .rknn reader and
the stdlib ONNX walker), so a board can load plans.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from rkspeech.core.atomic import write_json
from rkspeech.core.errors import RkspeechError
from rkspeech.stepgraph.contract import StepContract

PLAN_FORMAT = "rkspeech-plan/1"
IMPLS = ("rknn", "onnx")


@dataclass
class Plan:
    path: Path
    impl: str
    target: str | None
    contract: StepContract
    artifacts: dict[str, Path]  # rknn: main/first
    onnx: dict[str, Path] = field(default_factory=dict)  # main/first
    contracts: dict[str, StepContract] = field(default_factory=dict)  # per role (B differs)
    raw: dict = field(default_factory=dict)
    #: text-to-speech stages placed by the plan (``plan.stages``): talker, code_predictor
    stages: dict = field(default_factory=dict)

    def roles(self) -> list[str]:
        return [r for r in ("first", "main") if r in self.contracts]


def write_plan(path, *, impl: str, target: str | None, contracts: dict[str, StepContract],
               rknn: dict[str, Path] | None = None, onnx: dict[str, Path] | None = None,
               extra: dict | None = None, stages: dict[str, dict] | None = None) -> Path:
    """``stages``: stage name -> section (``plan.stages.stage_section``), written beside
    ``speech_decoder``."""
    p = Path(path)
    base = p.parent.resolve()

    def rel(x: Path) -> str:
        return os.path.relpath(Path(x).resolve(), base)

    data = {
        "format": PLAN_FORMAT,
        "speech_decoder": {
            "impl": impl,
            "target": target,
            "artifacts": {role: rel(a) for role, a in (rknn or {}).items()},
            "onnx": {role: rel(a) for role, a in (onnx or {}).items()},
            "contract": contracts["main"].to_dict(),
            "codes_length": {role: c.codes_length for role, c in contracts.items()},
        },
    }
    for name, section in (stages or {}).items():
        data[name] = section
    if extra:
        data["build"] = extra
    return write_json(p, data)


def contract_differences(a: StepContract, b: StepContract) -> list[str]:
    """``["sample_rate 24000 vs 16000", ...]``: the contract fields in which ``a`` and ``b``
    differ (``extra`` is not compared, as in ``StepContract.__eq__``)."""
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


def _artifact_contract(path: Path, role: str, expect_target: str | None) -> StepContract:
    if path.suffix == ".rknn":
        from rkspeech.inspect.container import read_container

        info = read_container(path, expect_target=expect_target)
        if info.contract is None:
            raise RkspeechError(f"plan: {role} artifact {path} carries no rkspeech contract (custom string)")
        return info.contract
    from rkspeech.export.onnx_contract import read_onnx_contract

    return read_onnx_contract(path)


def load_plan(path, *, backend: str | None = None, expect_target: str | None = None) -> Plan:
    """Read and validate ``plan.json``.  ``backend`` 'ort' validates the ONNX artifacts,
    'sim' needs the ONNX too (the simulator builds from ONNX), 'rknnlite' the .rknn ones."""
    p = Path(path)
    if p.is_dir():
        raise RkspeechError(f"plan {p} is a directory; pass its plan.json")
    if not p.is_file():
        raise RkspeechError(f"plan {p} does not exist")
    try:
        raw = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RkspeechError(f"plan {p}: not valid JSON ({exc})") from None
    sd = raw.get("speech_decoder") if isinstance(raw, dict) else None
    if not isinstance(sd, dict):
        raise RkspeechError(f"plan {p}: no speech_decoder section")
    impl = sd.get("impl")
    if impl not in IMPLS:
        raise RkspeechError(f"plan {p}: speech_decoder.impl is {impl!r}, expected one of {IMPLS}")
    base = p.parent

    def paths(section: str) -> dict[str, Path]:
        entries = sd.get(section) or {}
        if not isinstance(entries, dict):
            raise RkspeechError(f"plan {p}: speech_decoder.{section} must be an object")
        unknown = set(entries) - {"main", "first"}
        if unknown:
            raise RkspeechError(f"plan {p}: unknown artifact role(s) {sorted(unknown)} in {section}")
        for role, v in entries.items():
            if not isinstance(v, str) or not v:
                raise RkspeechError(f"plan {p}: speech_decoder.{section}.{role} must be a file path "
                                    f"(a string), got {v!r}")
        return {role: (base / v if not os.path.isabs(v) else Path(v)) for role, v in entries.items()}

    rknn, onnx = paths("artifacts"), paths("onnx")
    target = sd.get("target")
    if target is not None and not isinstance(target, str):
        raise RkspeechError(f"plan {p}: speech_decoder.target must be a chip name, got {target!r}")
    if expect_target and target and target != expect_target:
        raise RkspeechError(f"plan {p} was built for {target}, this machine is {expect_target}")
    use = rknn if backend == "rknnlite" or (backend is None and impl == "rknn" and not onnx) else onnx
    if backend in ("ort", "sim") and not onnx:
        raise RkspeechError(f"plan {p}: backend {backend} needs ONNX artifacts (speech_decoder.onnx), the plan has none")
    if "main" not in use:
        raise RkspeechError(f"plan {p}: no main artifact for this backend")
    for role, a in use.items():
        if a.is_dir():
            raise RkspeechError(f"plan {p}: {role} artifact {a} is a directory, not a model file")
        if not a.is_file():
            raise RkspeechError(f"plan {p}: {role} artifact {a} is missing")
    try:
        declared = StepContract.from_dict(sd["contract"]) if "contract" in sd else None
    except RkspeechError as exc:
        raise RkspeechError(f"plan {p}: {exc}") from None
    contracts = {}
    for role, a in use.items():
        try:
            contracts[role] = _artifact_contract(a, role, expect_target if a.suffix == ".rknn" else None)
        except RkspeechError as exc:
            raise RkspeechError(f"plan {p}: {role} artifact: {exc}") from None
    main = contracts["main"]
    if declared is not None and declared != main:
        raise RkspeechError(
            f"plan {p}: the contract in the plan disagrees with the main artifact {use['main'].name} "
            f"(plan vs artifact: {'; '.join(contract_differences(declared, main))}); rebuild, or fix the plan"
        )
    if "first" in contracts and not main.compatible_cache(contracts["first"]):
        first = contracts["first"]
        diff = [d for d in contract_differences(first, main) if not d.startswith(("B ", "formulation ", "codes_dtype "))]
        raise RkspeechError(
            f"plan {p}: first and main artifacts have different caches or signals "
            f"(first vs main: {'; '.join(diff)}); rebuild them from one checkpoint"
        )
    from rkspeech.plan.stages import load_stages

    return Plan(p, impl, target, main, rknn, onnx, contracts, raw, load_stages(raw, p, backend))


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
