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

#: Each assumption's source, printed beside its value.
SOURCES = {
    "chip": "the plan's target (the layer tables are the compiler's for that chip)",
    "layer_dispatch_us": ("public: ~19 us per compiled RKNN layer on RK3588 (driver 0.9.6, runtime 2.3.2), "
                          "nsbb/rknn-stt zipformer/rk3588/OPTIMIZATION_LOG.md"),
    "cpu_gbps": ("public: RK3588 sequential memory bandwidth 17-22 GB/s measured under sustained load "
                 "(Turing Pi RK1 benchmarks); the low end, for the 4 A76 cores"),
    "ddr_shared_gbps": ("the high end of the same 17-22 GB/s: what CPU and NPU together may stream "
                        "(LPDDR4x-4266 x 64 bit = 34 GB/s peak, Radxa forum)"),
    "cpu_fp32_gflops": ("peak: 4 A76 cores x 2.4 GHz x 2 NEON pipes x 4 fp32 FMA lanes x 2 "
                        "(Cortex-A76 software optimization guide); a floor, rarely reached"),
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
FLAGS = {"layer_dispatch_us": "--dispatch-us", "cpu_gbps": "--a76-gbps", "ddr_shared_gbps": "--shared-ddr-gbps",
         "prompt_tokens": "--prompt-tokens", "utterance_s": "--utterance-s", "npu_mhz": "--npu-mhz",
         "npu_ddr_gbps": "--ddr-gbps", "npu_efficiency": "--npu-efficiency"}


@dataclass(frozen=True)
class PlanAssumptions:
    """What the plan estimate assumes (sources in :data:`SOURCES`; all overridable)."""

    chip: str = "rk3588"
    layer_dispatch_us: float = 19.0
    cpu_gbps: float = 17.0
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
            if f.name in ("chip", "kv_read"):
                continue
            flag = FLAGS.get(f.name, f"{f.name} (assumption)")
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise RkspeechError(f"{flag} must be a number, got {v!r}")
            if v < 0 or (v == 0 and f.name != "layer_dispatch_us"):
                raise RkspeechError(f"{flag} must be {'>= 0' if f.name == 'layer_dispatch_us' else 'positive'}, "
                                    f"got {v!r}")
        if self.kv_read not in KV_READS:
            raise RkspeechError(f"--kv-read must be one of {', '.join(KV_READS)}, got {self.kv_read!r}")
        return self

    def npu(self):
        from rkspeech.estimate.steptime import Assumptions

        return Assumptions(npu_mhz=self.npu_mhz, ddr_gbps=self.npu_ddr_gbps, cores=self.npu_cores_per_stage,
                           npu_efficiency=self.npu_efficiency).check()

    def table(self) -> list[tuple[str, str, str]]:
        """(name, value, source) for every assumption."""
        units = {"layer_dispatch_us": " us / layer", "cpu_gbps": " GB/s", "ddr_shared_gbps": " GB/s",
                 "cpu_fp32_gflops": " GFLOP/s", "cpu_int8_gops": " GOP/s", "utterance_s": " s",
                 "npu_mhz": " MHz", "npu_ddr_gbps": " GB/s", "prompt_tokens": " positions"}
        return [(f.name, f"{getattr(self, f.name)}{units.get(f.name, '')}", SOURCES[f.name]) for f in fields(self)]
