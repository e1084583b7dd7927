"""Known board-side incompatibilities and slow-downs, as data, each with its public source.

``rkspeech doctor`` on a board (``board.doctor``) reads the runtime, driver, clocks and each
.rknn of a plan, then applies these rules; each gives a one-line verdict with the fix.  Versions
are tuples of ints.  Sources are the public threads where the failure was reported and fixed.
"""

from __future__ import annotations

from rkspeech.plan.versions import version_tuple  # noqa: F401  (the one reading of a version string)

#: where Rockchip's runtime looks for librknnrt.so (rknn-toolkit-lite2 2.5.0's rknn_runtime
#: module: ``LIBRKNNRT_PATH``, else ``/usr/lib/librknnrt.so``), then the usual library folders
LIBRKNNRT_PATHS = ("usr/lib/librknnrt.so", "usr/lib64/librknnrt.so", "usr/local/lib/librknnrt.so",
                   "usr/lib/aarch64-linux-gnu/librknnrt.so")
#: the rknpu driver's version file (debugfs, root only): "RKNPU driver: v0.9.8"
#: (radxa-build/rock-5b#29, yifengyou/Liontron-D3588#5), then the module parameter file
DRIVER_VERSION_PATHS = ("sys/kernel/debug/rknpu/version", "sys/module/rknpu/version")
#: devfreq nodes: the NPU (rk3588 ``fdab0000.npu``, rk3576 ``27700000.npu``, rk3566/8
#: ``fde40000.npu``) and the DDR controller ``dmc`` (airockchip/rknn-llm scripts/fix_freq_rk3588.sh,
#: fix_freq_rk3576.sh)
DEVFREQ = "sys/class/devfreq"
NPU_DEBUGFS = "sys/kernel/debug/rknpu"
#: governors that hold a clock where it is set
PINNED_GOVERNORS = ("userspace", "performance")
#: the CPU's cpufreq policies (one per cluster: RK3588 policy0 = A55 cpus 0-3, policy4 / policy6 = A76)
CPUFREQ = "sys/devices/system/cpu/cpufreq"

SOURCES = {
    "runtime-older-than-toolkit": "airockchip/rknn-toolkit2#281 (librknnrt 1.4.0, model from 2.3.0: \"Invalid RKNN "
                                  "model version 6\"), #254 (librknnrt 1.3.0), rockchip-linux/rknn-toolkit2#316 "
                                  "(librknnrt 1.5.0); fixed by replacing /usr/lib/librknnrt.so",
    "librknnrt-missing": "the rknn-toolkit-lite2 2.5.0 aarch64 wheel holds no librknnrt.so (issue 40, measured); "
                         "airockchip/rknn-toolkit2#303 (runtime/Linux/librknn_api/${BOARD_ARCH}/librknnrt.so pushed "
                         "to /usr/lib), rockchip-linux/rknn-toolkit2#260, radxa-docs/docs#612 (rknpu2-rk3588)",
    "lite-runtime-skew": "airockchip/rknn-toolkit2#281 (rknn-toolkit-lite2 2.3.0 over librknnrt 1.4.0)",
    "driver-old": "airockchip/rknn-llm#97 (0.9.6: stability, NPU allocations over 4 GB); a 0.9.3 driver failing "
                  "\"failed to submit\" on a MobileNet conv, fixed by 0.9.6 (blog.gitcode.com, Radxa Rock 5B); "
                  "airockchip/rknn-toolkit2#468 (0.8.2 much slower than 0.9.2)",
    "clock-unpinned": "airockchip/rknn_model_zoo#180, airockchip/rknn-llm#409 and #532 (boards 2-3x slower than "
                      "the published figures until the NPU and DDR clocks are pinned); the pinning recipe: "
                      "airockchip/rknn-llm scripts/fix_freq_rk3588.sh",
    "cpu-governor": ("public RK3588 measurements: the ondemand CPU governor costs 26-32 % of LM decode speed and of "
                     "a TTS real-time factor against performance (eidolon-os HOST-RK3588.md); sbc-bench reviews "
                     "(ThomasKaiser/sbc-bench) run with the performance governor for the same reason"),
    "cpu-big-cores": ("public RK3588 measurements: a second model on the A76 cluster broke a TTS service's threads, "
                      "on the A55 cluster it did not (contention is per cluster); STREAM ~12 GB/s for one A76 core, "
                      "~20 GB/s for four (eidolon-os HOST-RK3588.md, sbc-bench)"),
    "chip-mismatch": "rknn-toolkit2 2.5.0 user guide: a .rknn runs only on the target_platform it was built for",
}

#: the rknpu driver version below which the checks warn
MIN_DRIVER = (0, 9, 6)


def runtime_older_than_toolkit(runtime: tuple | None, toolkit: tuple | None) -> bool:
    """A librknnrt older (major.minor) than the toolkit that built the .rknn cannot load it."""
    return runtime is not None and toolkit is not None and runtime[:2] < toolkit[:2]
