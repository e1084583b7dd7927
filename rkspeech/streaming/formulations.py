"""The step-graph formulations and the default (standard library only: the CLI imports it).

* ``seed`` - ``rkspeech.streaming.step.VocoderStep``: the model's own ops (Sin, Gather,
  ConvTranspose, dilated convs); int64 codes, channel-major cache tails.
* ``npu`` - ``rkspeech.streaming.step_npu.NpuVocoderStep``: the same I/O names and shapes,
  every op on the NPU (float32 codes, time-major tails; see docs/npu-formulation.md).

The default is ``npu`` since 2026-11-29: at the published size on rk3588 (B=16, fp16) it has
0 CPU ops and 0 REGTASK lines against the seed graph's 69 and 931,920 (REGTASK-overflow layers
are a known board failure), the same simulator SNR (47.29 vs 47.3 dB), less than half the
conversion memory (3.3 vs 7.4 GB), a smaller .rknn (267 vs 360 MB) and 0.78x the compiler's
conv cycle estimate.  Against it: the compiler plans 3.5x the memory traffic (4.4 vs 1.3 GB per
step; every op of the Snake polynomial is a pass over an activation), which only a board can
weigh.
"""

SEED = "seed"
NPU = "npu"
FORMULATIONS = (SEED, NPU)
DEFAULT_FORMULATION = NPU
