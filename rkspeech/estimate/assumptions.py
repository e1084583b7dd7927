"""The assumptions of the whole-plan board estimate (``rkspeech estimate --plan``), each with its
source and its command-line flag: :class:`PlanAssumptions`."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from rkspeech.core.errors import RkspeechError

KV_READS = ("capacity", "position")
#: docs/estimate.md "Calibration": our Whisper base encoder estimates at 104.9 ms (ideal), a public
#: RK3588 run took 703 ms: a board ~6.7x slower than the layer table's ideal, every NPU layer alike.
NPU_BOARD_FACTOR = 6.7
CHIPS = ("rk3588", "rk3576")
#: RK3588 memory bandwidth by the number of A76 threads that stream (STREAM, public): one core
#: ~12 GB/s, all four ~20 GB/s (eidolon-os HOST-RK3588.md, sbc-bench); 2 and 3 threads are
#: interpolated between them (no public figure), more than 4 get the 4-core figure (the A55
#: cluster's share is not modelled)
CPU_GBPS_BY_THREADS = ((1, 12.0), (4, 20.0))
#: the threads a CPU stage runs with when neither the caller nor the plan says: the runtime's
#: default (``core.threads.default_threads``: min(2, cores)) on an 8-core RK3588
BOARD_DEFAULT_THREADS = 2

#: Each assumption's source, printed beside its value.
SOURCES = {
    "chip": "the plan's target (the layer tables are the compiler's for that chip)",
    "layer_dispatch_us": ("public: ~19 us per compiled RKNN layer on RK3588 (driver 0.9.6, runtime 2.3.2), "
                          "nsbb/rknn-stt zipformer/rk3588/OPTIMIZATION_LOG.md"),
    "cpu_gbps": ("public RK3588 STREAM by A76 threads: ~12 GB/s for one core, ~20 GB/s for four "
                 "(eidolon-os HOST-RK3588.md, sbc-bench); 2-3 threads interpolated (no public figure); "
                 "each CPU stage at the threads it runs with (--a76-gbps: one figure for all)"),
    "cpu_threads": ("as speak runs them: --threads, else the plan stage's threads, else the runtime's 2 "
                    "(min(2, cores)); the talker prefill at least 2, the numpy host heads 1"),
    "ddr_shared_gbps": ("public: RK3588 sequential memory bandwidth 17-22 GB/s measured under sustained load "
                        "(Turing Pi RK1 benchmarks); the high end: what CPU and NPU together may stream "
                        "(LPDDR4x-4266 x 64 bit = 34 GB/s peak, Radxa forum)"),
    "cpu_fp32_gflops": ("peak: 4 A76 cores x 2.4 GHz x 2 NEON pipes x 4 fp32 FMA lanes x 2 "
                        "(Cortex-A76 software optimization guide); a floor, rarely reached; a stage gets "
                        "threads / 4 of it"),
    "cpu_int8_gops": ("peak: the same pipes with SDOT (16 int8 MACs per instruction): 4x fp32; "
                      "int8 dynamic and MatMulNBits accuracy_level 4 compute in int8"),
    "cache_passes_flat": ("a flat cache input is split into layers inside the graph (Split reads and "
                          "writes it) before attention reads it: 3 passes; docs/cpu-stages.md profiling"),
    "kv_read": ("capacity: a fixed-shape step graph attends over every slot (masked); position: only "
                "the filled slots, averaged over the utterance (a position-aware kernel)"),
    "prompt_tokens": "the recorded published run's prompt: 40 positions (docs/talker-step.md)",
    "utterance_s": "assumption: a 10 s utterance (prefill and the first vocoder step amortised over it)",
    "npu_cores_per_stage": ("1: a stateful step runs on one core (docs/estimate.md; multi-core does not "
                            "help a dispatch-bound model, rknn-stt log)"),
    "npu_mhz": "RK3588 NPU 1 GHz (docs/estimate.md)",
    "npu_ddr_gbps": "17 GB/s, the layer table's traffic (docs/estimate.md)",
    "npu_efficiency": ("1 = the compiler's ideal cycles; the Whisper calibration (docs/estimate.md) "
                       "says a board is ~6.7x slower"),
}


#: the ``rkspeech estimate`` flag that sets each assumption (for messages)
FLAGS = {"layer_dispatch_us": "--dispatch-us", "cpu_gbps": "--a76-gbps", "cpu_threads": "--threads",
         "ddr_shared_gbps": "--shared-ddr-gbps",
         "prompt_tokens": "--prompt-tokens", "utterance_s": "--utterance-s", "npu_mhz": "--npu-mhz",
         "npu_ddr_gbps": "--ddr-gbps", "npu_efficiency": "--npu-efficiency"}


@dataclass(frozen=True)
class PlanAssumptions:
    """What the plan estimate assumes (sources in :data:`SOURCES`; all overridable)."""

    chip: str = "rk3588"
    layer_dispatch_us: float = 19.0
    cpu_gbps: float | None = None  # None: by threads (cpu_gbps_by_threads); a figure: every CPU stage at it
    cpu_gbps_by_threads: tuple = CPU_GBPS_BY_THREADS
    cpu_threads: int | None = None  # None: each stage's own (the plan's, else BOARD_DEFAULT_THREADS)
    ddr_shared_gbps: float = 22.0
    cpu_fp32_gflops: float = 153.6
    cpu_int8_gops: float = 614.4
    cache_passes_flat: float = 3.0
    kv_read: str = "capacity"
    prompt_tokens: int = 40
    utterance_s: float = 10.0
    npu_cores_per_stage: int = 1
    npu_mhz: float = 1000.0
    npu_ddr_gbps: float = 17.0
    npu_efficiency: float = 1.0

    def check(self) -> PlanAssumptions:
        if self.chip not in CHIPS:
            raise RkspeechError(f"--target must be one of {', '.join(CHIPS)}, got {self.chip!r}")
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name in ("chip", "kv_read", "cpu_gbps_by_threads") or (v is None and f.name in ("cpu_gbps",
                                                                                                 "cpu_threads")):
                continue
            flag = FLAGS.get(f.name, f"{f.name} (assumption)")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise RkspeechError(f"{flag} must be a number, got {v!r}")
            if v < 0 or (v == 0 and f.name != "layer_dispatch_us"):
                raise RkspeechError(f"{flag} must be {'>= 0' if f.name == 'layer_dispatch_us' else 'positive'}, "
                                    f"got {v!r}")
        if self.cpu_threads is not None and (not isinstance(self.cpu_threads, int) or self.cpu_threads < 1):
            raise RkspeechError(f"--threads must be a whole number >= 1, got {self.cpu_threads!r}")
        pts = self.cpu_gbps_by_threads
        if (not pts or any(not (isinstance(n, int) and n >= 1 and isinstance(g, (int, float)) and math.isfinite(g)
                                and g > 0) for n, g in pts) or [n for n, _ in pts] != sorted({n for n, _ in pts})):
            raise RkspeechError(f"cpu_gbps_by_threads must be rising (threads >= 1, GB/s > 0) pairs, got {pts!r}")
        if self.kv_read not in KV_READS:
            raise RkspeechError(f"--kv-read must be one of {', '.join(KV_READS)}, got {self.kv_read!r}")
        return self

    def cpu_bandwidth(self, threads: int) -> tuple[float, str]:
        """(GB/s, how it was chosen) for a CPU stage that runs ``threads`` threads."""
        if self.cpu_gbps is not None:
            return float(self.cpu_gbps), "--a76-gbps, every stage"
        pts = sorted(self.cpu_gbps_by_threads)
        if threads <= pts[0][0]:
            return float(pts[0][1]), f"{pts[0][0]} thread(s): public figure"
        if threads >= pts[-1][0]:
            return float(pts[-1][1]), (f"{pts[-1][0]} threads: public figure" if threads == pts[-1][0] else
                                       f"{threads} threads: the {pts[-1][0]}-thread public figure (no more big cores)")
        for (n0, g0), (n1, g1) in zip(pts, pts[1:]):
            if n0 <= threads <= n1:
                if threads in (n0, n1):
                    return float(g0 if threads == n0 else g1), f"{threads} threads: public figure"
                g = g0 + (g1 - g0) * (threads - n0) / (n1 - n0)
                return g, f"{threads} threads: interpolated between {n0} ({g0:g}) and {n1} ({g1:g} GB/s)"
        raise AssertionError(threads)

    def stage_threads(self, plan_threads: int | None, *, at_least: int = 1, fixed: int | None = None) -> int:
        """The threads a CPU stage runs with (``SOURCES["cpu_threads"]``)."""
        if fixed is not None:
            return fixed
        return max(self.cpu_threads or plan_threads or BOARD_DEFAULT_THREADS, at_least)

    def npu(self):
        from rkspeech.estimate.steptime import Assumptions

        return Assumptions(npu_mhz=self.npu_mhz, ddr_gbps=self.npu_ddr_gbps, cores=self.npu_cores_per_stage,
                           npu_efficiency=self.npu_efficiency).check()

    def table(self) -> list[tuple[str, str, str]]:
        """(name, value, source) for every assumption."""
        units = {"layer_dispatch_us": " us / layer", "ddr_shared_gbps": " GB/s",
                 "cpu_fp32_gflops": " GFLOP/s", "cpu_int8_gops": " GOP/s", "utterance_s": " s",
                 "npu_mhz": " MHz", "npu_ddr_gbps": " GB/s", "prompt_tokens": " positions"}
        shown = {"cpu_gbps": self._cpu_gbps_text(),
                 "cpu_threads": (f"{self.cpu_threads} (--threads)" if self.cpu_threads else
                                 f"per stage: the plan's, else {BOARD_DEFAULT_THREADS}")}
        return [(f.name, shown.get(f.name, f"{getattr(self, f.name)}{units.get(f.name, '')}"), SOURCES[f.name])
                for f in fields(self) if f.name != "cpu_gbps_by_threads"]

    def _cpu_gbps_text(self) -> str:
        if self.cpu_gbps is not None:
            return f"{self.cpu_gbps:g} GB/s (--a76-gbps)"
        top = max(n for n, _ in self.cpu_gbps_by_threads)
        given = {n for n, _ in self.cpu_gbps_by_threads}
        return "by threads: " + ", ".join(f"{n} -> {self.cpu_bandwidth(n)[0]:.1f}{'' if n in given else '*'}"
                                          for n in range(1, top + 1)) + " GB/s (* interpolated)"
