"""The Rockchip chips rkspeech builds for, their NPU core masks, and which chip this machine is.

Standard library only: the CLI, the .rknn reader and the board runtime import it.
"""

from __future__ import annotations

#: Chips this project builds for (rknn-toolkit2 2.5.0 accepts each as ``target_platform``).
TARGETS = ("rk3588", "rk3576", "rk3562", "rk3566", "rk3568")
DEFAULT_TARGET = "rk3588"
#: rknn-toolkit-lite2 core masks by name ("auto": the runtime picks one core).
CORE_MASKS = ("auto", "0", "1", "2", "0_1", "0_1_2")
#: One context per NPU core: the masks to pin them to, per chip (single-core chips: "auto").
CORES_BY_TARGET = {"rk3588": ("0", "1", "2"), "rk3576": ("0", "1")}
#: rk3588 fp16: the compiler lifts a 3-D graph input or output ``[1, C, W]`` to its 4-D layout
#: with a ``(1, C, W) <-> (1, C, 1, W)`` Reshape that runs on the NPU only when W is a multiple of
#: this (16 bytes of fp16); otherwise on the CPU.  A one-channel ``(1, 1, C, W)`` view stays on the
#: NPU (single-graph measurements: docs/npu-formulation.md).
IO_WIDTH_ALIGN = 8


def cores_for(target: str | None) -> tuple[str, ...]:
    """Core masks for one context per NPU core of ``target``."""
    return CORES_BY_TARGET.get((target or "").lower(), ("auto",))


def split_cores(target: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Default core masks of ``rkspeech serve`` when it runs both engines on the NPU: the last core
    for speech, the others for transcription (rk3588: "0", "1" | "2"), so neither waits for the
    other's NPU work; single-core chips: "auto" for both."""
    cores = cores_for(target)
    if len(cores) < 2:
        return cores, cores
    return cores[:-1], cores[-1:]


def mask_cores(mask: str) -> set[str]:
    """The cores a mask names ("0_1" -> {"0", "1"}; "auto": empty, the runtime chooses)."""
    return set() if mask == "auto" else set(mask.split("_"))


def board_target() -> str | None:
    """The Rockchip chip this machine is (from the device tree), or None off a board."""
    try:
        with open("/proc/device-tree/compatible", "rb") as f:
            text = f.read().decode("ascii", errors="replace")
    except OSError:
        return None
    # rk3566 before rk3568 is irrelevant (distinct strings); rk3588 also matches "rk3588s"
    for chip in TARGETS:
        if chip in text:
            return chip
    return None
