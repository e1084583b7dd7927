"""A per-layer board time model from rknn-toolkit2's "Network Layer Information Table".

There is no board here.  What the compiler does say, per compiled layer, is in the build log's
layer table (parsed once, by ``rkspeech.convert.placement``): ``Cycles(DDR/NPU/Total)`` and
``RW(KB)``.  Read from our own rk3588 fp16 logs (rknn-toolkit2 2.5.0):

* ``NPU`` cycles are the MAC array's cycles; only conv-family layers (Conv, ConvAdd, Conv+act,
  ConvTranspose, and the MatMuls the compiler turns into convs) get any.  Elementwise, reshape,
  attention (``exSDPAttention``), norm and CPU layers print ``0/0/0``.
* ``DDR`` cycles are the same layer's memory time at the compiler's bandwidth; ``Total`` is
  ``max(DDR, NPU)`` in every one of the 91 conv rows of the reduced npu step (checked here), so
  the compiler itself assumes compute and traffic overlap.
* Attention fused into ``exSDPAttention`` prints 0 cycles although it holds two matmuls: its
  compute is added from its shapes (``attention_cycles``; reported as ``cycles_from_shapes``).
* ``RW(KB)`` is filled for every layer, and it is the layer's **reads** only (inputs + weights +
  bias): a Clip over a 1440 KB fp16 activation shows 1440, a Sub of two such 2880, the codebook
  conv 1152 = 1024 KB weights + 128 KB fp32 bias + its input.  The writes (the output tensor) are
  not in it: the DDR cycles of every conv row of the reduced npu step are (RW + output bytes) /
  23.6 bytes (checked here on all 91 rows but two), i.e. the compiler's DDR model moves 23.6 bytes
  per NPU cycle and counts reads and writes.  So ``traffic`` below = RW + the output's bytes, and
  the docs' "4,360 MB" (the RW column summed) is the read half.
* On a board, ``eval_perf``'s ``perf_debug`` table adds ``Time(us)`` and ``MacUsage`` beside the
  same cycles: a public RK3588 int8 table (THU-MIG/yolov10 issue #115) shows conv layers taking
  5-12x their ``Total`` cycles at 1 GHz (MacUsage 9-18 %), elementwise layers ~1.2 GB/s
  (262 KB Sub: 17,046 cycles, 199 us) and a CPU Gather 0.11 GB/s (295 KB, 2,574 us).  So the
  cycles are an ideal lower bound; ``npu_efficiency`` takes the board's share of it.

The model, per compute layer (I/O rows excluded)::

    NPU layer:  compute = NPU cycles / (npu_mhz * npu_efficiency) / cores
                traffic = (RW + output bytes) / ddr_gbps  (DDR is shared: cores do not divide it)
                time    = max(compute, traffic)  (overlap="max")  or  compute + traffic ("sum")
                          + layer_us
    CPU layer:  time    = (RW + output bytes) / cpu_gbps + layer_us   (the NPU waits for it)

and the step is the sum of its layers (the runtime runs one layer after another).  ``cores > 1``
assumes the runtime splits every layer over the cores (``RKNN_NPU_CORE_0_1_2``), which is the
best case; a stateful step cannot run its successive steps on different cores at once, but
independent streams can each have a core.

Default figures and their sources (overridable; each one is an assumption about a board we do
not have):

* ``npu_mhz`` = 1000: RK3588 NPU at 1 GHz, 3 cores, 6 TOPS int8 (Rockchip RK3588 brief
  datasheet; ``scaling_frequency.sh`` in rknn_model_zoo pins rk3588's NPU at its top rate; the
  yolov10 #115 table's ideal conv cycles = MACs / 1024 at int8 fit 2 TOPS per core at 1 GHz).
* ``ddr_gbps`` = 17: RK3588 has LPDDR4/4x/LPDDR5 on four 16-bit channels (brief datasheet); at
  LPDDR4x-4266 that is 34 GB/s peak (Radxa forum "Rock 5A lpddr4x memory bandwidth"); measured
  sequential bandwidth on RK3588 modules is 17-22 GB/s (Turing Pi RK1 benchmarks).  The low end
  is taken as what the NPU gets (it shares the controller with the CPU).
* ``overlap`` = "max": what the compiler's own Total column does.
* ``npu_efficiency`` = 1.0: the compiler's cycles as they are (ideal).  Calibration
  (``docs/estimate.md``): our Whisper base encoder graph (rk3588 fp16, 30 s window) estimates at
  104.9 ms with these defaults; a public whisper.cpp + RKNN run of a base encoder on a loaded
  RK3588 took 703 ms (6.7x), in line with the 5-12x of the yolov10 #115 board table.  So the
  defaults give a lower bound; ``--npu-efficiency 0.15 --ddr-gbps 2.5`` reproduces the 703 ms.
* ``cpu_gbps`` = 1.0, ``layer_us`` = 0: assumptions (the one public CPU-fallback row above ran
  at 0.11 GB/s).
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rkspeech.convert.conversion import BUILD_LOG_SUFFIX
from rkspeech.core.errors import RkspeechError
from rkspeech.estimate.layers import (  # noqa: F401 - attention_cycles, block_of: re-exported
    CLASSES,
    _write_kb,
    attention_cycles,
    block_of,
    classify,
)

LOG_SUFFIX = BUILD_LOG_SUFFIX
OVERLAPS = ("max", "sum")
@dataclass(frozen=True)
class Assumptions:
    """Everything the estimate assumes about the board (see the module docstring for sources)."""

    npu_mhz: float = 1000.0
    ddr_gbps: float = 17.0
    overlap: str = "max"
    cores: int = 3
    npu_efficiency: float = 1.0
    cpu_gbps: float = 1.0
    layer_us: float = 0.0

    def check(self) -> Assumptions:
        for name in ("npu_mhz", "ddr_gbps", "npu_efficiency", "cpu_gbps"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise RkspeechError(f"--{name.replace('_', '-')} must be a positive number, got {v!r}")
        if self.overlap not in OVERLAPS:
            raise RkspeechError(f"--overlap must be one of {', '.join(OVERLAPS)}, got {self.overlap!r}")
        if not (isinstance(self.cores, int) and 1 <= self.cores <= 16):
            raise RkspeechError(f"--cores must be a whole number from 1 to 16, got {self.cores!r}")
        if not (math.isfinite(self.layer_us) and self.layer_us >= 0):
            raise RkspeechError(f"--layer-us must be >= 0, got {self.layer_us!r}")
        return self

    def describe(self) -> list[tuple[str, str]]:
        return [
            ("NPU clock", f"{self.npu_mhz:g} MHz (RK3588: 1 GHz)"),
            ("NPU efficiency", f"{self.npu_efficiency:g} x the compiler's NPU cycles (1 = ideal)"),
            ("usable DDR bandwidth", (f"{self.ddr_gbps:g} GB/s, shared by all cores (RK3588 LPDDR4x: 34 peak, "
                                     "17-22 measured)")),
            ("compute / traffic overlap", f"{self.overlap} (max: as the compiler's Total column)"),
            ("CPU layers", f"{self.cpu_gbps:g} GB/s of their reads + writes, NPU idle meanwhile (assumption)"),
            ("fixed cost per layer", f"{self.layer_us:g} us"),
            ("cores", f"1..{self.cores}, each layer split evenly over them (best case)"),
        ]


@dataclass
class Estimate:
    source: str
    rknn: str | None
    assumptions: Assumptions
    layers: list[dict[str, Any]] = field(default_factory=list)
    regtask_lines: int = 0
    model: str = "unknown"
    audio_s: float | None = None
    audio_note: str = ""
    notes: list[str] = field(default_factory=list)

    # ---- sums ---------------------------------------------------------------------------
    def _sum(self, key: str, rows=None) -> float:
        return sum(r[key] for r in (self.layers if rows is None else rows))

    def _groups(self, key: str) -> list[dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for r in self.layers:
            g = out.setdefault(r[key], {"name": r[key], "layers": 0, "npu_cycles": 0, "ddr_cycles": 0,
                                        "traffic_mb": 0.0, "rw_mb": 0.0, "compute_ms": 0.0, "traffic_ms": 0.0,
                                        "est_ms": 0.0, "cpu_ops": 0, "classes": {}})
            g["layers"] += 1
            g["npu_cycles"] += r["npu_cycles"]
            g["ddr_cycles"] += r["ddr_cycles"]
            g["traffic_mb"] += (r["rw_kb"] + r["write_kb"]) / 1024
            g["rw_mb"] += r["rw_kb"] / 1024
            g["compute_ms"] += r["compute_ms"]
            g["traffic_ms"] += r["traffic_ms"]
            g["est_ms"] += r["est_ms"]
            g["cpu_ops"] += r["class"] == "cpu"
            g["classes"][r["class"]] = g["classes"].get(r["class"], 0) + 1
        total = self.est_step_ms or 1.0
        for g in out.values():
            for k in ("traffic_mb", "rw_mb", "compute_ms", "traffic_ms", "est_ms"):
                g[k] = round(g[k], 2 if k.endswith("_mb") else 4)
            g["share"] = round(g["est_ms"] / total, 4)
        return list(out.values())

    @property
    def est_step_ms(self) -> float:
        return self._sum("est_ms")

    def est_ms_cores(self, n: int) -> float:
        a = self.assumptions
        return sum(_layer_ms(r, a, n)[2] for r in self.layers)

    @property
    def traffic_mb(self) -> float:
        """Reads + writes (what the time model moves)."""
        return (self._sum("rw_kb") + self._sum("write_kb")) / 1024

    @property
    def rw_mb(self) -> float:
        """The RW(KB) column summed (reads only): the figure docs/npu-formulation.md quotes."""
        return self._sum("rw_kb") / 1024

    def compiler_ddr_gbps(self) -> float | None:
        """The bandwidth the compiler's own DDR cycles imply (conv rows: reads + writes / DDR
        cycles), at ``npu_mhz``."""
        rows = [r for r in self.layers if r["ddr_cycles"] > 0]
        cyc = sum(r["ddr_cycles"] for r in rows)
        moved = sum((r["rw_kb"] + r["write_kb"]) * 1024 for r in rows)
        return round(moved / cyc * self.assumptions.npu_mhz / 1e3, 2) if cyc else None

    def to_report(self) -> dict[str, Any]:
        a = self.assumptions
        by_cores = {n: round(self.est_ms_cores(n), 3) for n in range(1, a.cores + 1)}
        rep: dict[str, Any] = {
            "source": self.source, "rknn": self.rknn, "model": self.model,
            "assumptions": {**asdict(a), "compiler_ddr_gbps": self.compiler_ddr_gbps(),
                            "notes": [f"{k}: {v}" for k, v in a.describe()]},
            "layers_compute": len(self.layers),
            "cpu_ops": sum(r["class"] == "cpu" for r in self.layers),
            "regtask_lines": self.regtask_lines,
            "npu_cycles": int(self._sum("npu_cycles")),
            "cycles_from_shapes": int(sum(r.get("cycles_from_shapes", 0) for r in self.layers)),
            "ddr_cycles": int(self._sum("ddr_cycles")),
            "total_cycles": int(self._sum("total_cycles")),
            "traffic_mb": round(self.traffic_mb, 1),
            "rw_mb": round(self.rw_mb, 1),
            "write_mb": round(self.traffic_mb - self.rw_mb, 1),
            "compute_ms": round(self._sum("compute_ms"), 3),
            "traffic_ms": round(self._sum("traffic_ms"), 3),
            "est_step_ms": round(self.est_step_ms, 3),
            "est_step_ms_by_cores": by_cores,
            "audio_s": self.audio_s,
            "audio_note": self.audio_note,
            "classes": self._groups("class"),
            "blocks": self._groups("block"),
            "op_types": sorted(self._groups("op_type"), key=lambda g: -g["est_ms"]),
            "layers": self.layers,
            "notes": self.notes,
        }
        if self.audio_s:
            audio_ms = self.audio_s * 1000
            rep["traffic_mb_per_audio_s"] = round(self.traffic_mb / self.audio_s, 1)
            rep["rw_mb_per_audio_s"] = round(self.rw_mb / self.audio_s, 1)
            rep["rtf_by_cores"] = {n: float(f"{ms / audio_ms:.4g}") for n, ms in by_cores.items()}
            rep["rtf_one_core"] = rep["rtf_by_cores"][1]
            need = next((n for n, ms in by_cores.items() if ms <= audio_ms), None)
            rep["cores_for_realtime"] = need
            if need is None:
                floor = self._sum("traffic_ms") if a.overlap == "max" else None
                rep["cores_note"] = (f"not real time on {a.cores} core(s)"
                                     + (f"; traffic alone takes {floor:.1f} ms of {audio_ms:.0f} ms"
                                        if floor is not None else ""))
        return rep


def _layer_ms(r: dict[str, Any], a: Assumptions, cores: int = 1) -> tuple[float, float, float]:
    """(compute ms, traffic ms, time ms) of one layer."""
    rw = (r["rw_kb"] + r.get("write_kb", 0.0)) * 1024
    fixed = a.layer_us / 1e3
    if r["class"] == "cpu":
        t = rw / (a.cpu_gbps * 1e9) * 1e3
        return 0.0, t, t + fixed
    cycles = r["npu_cycles"] or (r["total_cycles"] if not r["ddr_cycles"] else 0) or r.get("cycles_from_shapes", 0)
    compute = cycles / (a.npu_mhz * 1e6 * a.npu_efficiency) * 1e3 / cores
    traffic = rw / (a.ddr_gbps * 1e9) * 1e3
    t = max(compute, traffic) if a.overlap == "max" else compute + traffic
    return compute, traffic, t + fixed


def estimate_layers(layers, assumptions: Assumptions | None = None, *, step_B: int | None = None,
                    vocoder: bool = False, source: str = "", rknn: str | None = None,
                    regtask_lines: int = 0) -> Estimate:
    """Price ``placement.Layer`` rows (I/O rows skipped) under ``assumptions``."""
    a = (assumptions or Assumptions()).check()
    est = Estimate(source=source, rknn=rknn, assumptions=a, regtask_lines=regtask_lines)
    for la in layers:
        cls = classify(la.op_type, la.target, la.full_name)
        if cls == "io":
            continue
        r = {"id": la.id, "op_type": la.op_type, "target": la.target, "class": cls,
             "output_shape": la.output_shapes, "full_name": la.full_name,
             "block": block_of(la.full_name, la.output_shapes, step_B, vocoder),
             "ddr_cycles": la.ddr_cycles, "npu_cycles": la.npu_cycles, "total_cycles": la.cycles,
             "cycles_from_shapes": attention_cycles(la.op_type, la.input_shapes, la.dtype) if not la.cycles else 0,
             "rw_kb": la.rw_kb, "write_kb": round(_write_kb(la.output_shapes, la.dtype, la.rw_kb), 3)}
        c, t, total = _layer_ms(r, a)
        r.update(compute_ms=round(c, 5), traffic_ms=round(t, 5), est_ms=round(total, 5),
                 bound="cpu" if cls == "cpu" else ("compute" if c > t else "traffic"))
        est.layers.append(r)
    return est


def find_build_log(rknn_path: str | os.PathLike) -> Path:
    """``FILE.rknn.build.log`` beside ``FILE.rknn`` (what ``rkspeech convert`` writes)."""
    p = Path(rknn_path)
    log = Path(str(p) + LOG_SUFFIX)
    if log.is_file():
        return log
    raise RkspeechError(
        f"{p}: no build log beside it ({log.name}); the layer table exists only in the converter's build "
        f"log: rebuild with `rkspeech convert MODEL.onnx --target CHIP -o {p}` (it writes {log.name}) "
        f"or pass the log itself")


def _is_rknn(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"RKNN"
    except OSError:
        return False


def _audio_from_container(est: Estimate, rknn: Path) -> int | None:
    """Fill model / audio per step from the .rknn's custom string; return the step's B."""
    from rkspeech.contracts.rknn_file import read_container

    try:
        c = read_container(rknn)
    except RkspeechError as exc:
        est.notes.append(f"container not read: {exc}")
        return None
    from rkspeech.contracts.vocoder import VocoderContract

    if c.contract is not None and not isinstance(c.contract, VocoderContract):
        est.model = f"{c.contract.model} ({c.contract.KIND} graph)"
        return None
    if c.contract is not None:
        k = c.contract
        est.model = f"{k.model} step ({k.formulation}, B={k.codes_length})"
        est.audio_s = k.samples_per_step / k.sample_rate
        est.audio_note = f"{k.samples_per_step} samples at {k.sample_rate} Hz per step"
        return int(k.codes_length)
    cj = c.custom_json if isinstance(c.custom_json, dict) else None
    if cj and str(cj.get("rkspeech", "")).startswith("whisper-encoder"):
        from rkspeech.models.whisper.window import FRAMES_PER_SECOND

        frames = int(cj.get("n_frames", 0))
        est.model = f"whisper encoder (d={cj.get('d')})"
        if frames > 0:
            est.audio_s = frames / FRAMES_PER_SECOND
            est.audio_note = f"{frames} mel frames = one {est.audio_s:g} s window per run"
        return None
    if c.contract_error:
        est.notes.append(f"step contract not read: {c.contract_error}")
    return None


def estimate_path(path: str | os.PathLike, assumptions: Assumptions | None = None) -> Estimate:
    """Estimate from ``FILE.rknn`` (its build log beside it) or from a build log."""
    from rkspeech.convert.placement import analyze

    p = Path(path)
    if not p.exists():
        raise RkspeechError(f"{p}: no such file")
    if p.is_dir():
        raise RkspeechError(f"{p}: is a folder; pass FILE.rknn or its build log")
    if _is_rknn(p):
        rknn, log = p, find_build_log(p)
    else:
        log = p
        guess = Path(str(p)[: -len(LOG_SUFFIX)]) if str(p).endswith(LOG_SUFFIX) else None
        rknn = guess if guess is not None and guess.is_file() and _is_rknn(guess) else None
    placement = analyze(log)
    if not placement.layers:
        raise RkspeechError(
            f"{log}: no 'Network Layer Information Table' in it; rknn-toolkit2 prints one during build() "
            f"with RKNN(verbose=True) (`rkspeech convert` writes it to FILE.rknn.build.log)")
    a = (assumptions or Assumptions()).check()
    probe = Estimate(source=str(log), rknn=str(rknn) if rknn else None, assumptions=a)
    step_B = _audio_from_container(probe, rknn) if rknn is not None else None
    if rknn is None:
        probe.notes.append("no .rknn beside the log: audio per step unknown (pass FILE.rknn for step graphs)")
    est = estimate_layers(placement.layers, a, step_B=step_B, vocoder="qwen3-tts-vocoder" in probe.model,
                          source=str(log), rknn=probe.rknn, regtask_lines=placement.regtask_overflow_lines)
    est.model, est.audio_s, est.audio_note, est.notes = probe.model, probe.audio_s, probe.audio_note, probe.notes
    if placement.tables_found > 1:
        est.notes.append(f"{placement.tables_found} layer tables in the log; the last one is used")
    return est


def with_assumptions(est: Estimate, **changes) -> Estimate:
    """The same layers priced under other assumptions (benchmarks, calibration)."""
    a = replace(est.assumptions, **changes).check()
    out = replace(est, assumptions=a, layers=[dict(r) for r in est.layers], notes=list(est.notes))
    for r in out.layers:
        c, t, total = _layer_ms(r, a)
        r.update(compute_ms=round(c, 5), traffic_ms=round(t, 5), est_ms=round(total, 5),
                 bound="cpu" if r["class"] == "cpu" else ("compute" if c > t else "traffic"))
    return out


def dumps(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=1)
