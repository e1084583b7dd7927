"""Which CPU cores are the big ones, and pinning the process to them (``--cpu-affinity``).

RK3588 has 4 Cortex-A76 (cpus 4-7, ``cpu_capacity`` 1024) and 4 Cortex-A55 (cpus 0-3, 414); left
alone, the scheduler puts onnxruntime's CPU-stage threads on either cluster.  Public RK3588
measurements (eidolon-os HOST-RK3588.md; sbc-bench): a second model on the A76 cluster broke a
TTS service's threads while on the A55 it did not (contention is per cluster), and STREAM gives
~12 GB/s for one A76 core, ~20 GB/s for four.  Not measured here (no board).

:func:`core_info` reads ``sys/devices/system/cpu/cpu*/cpu_capacity`` below ``root`` ("/" on a
board; tests pass a faked tree), else each core's ``cpufreq/cpuinfo_max_freq``, else nothing
("all cores": every core alike).  The big cores are those above the midpoint of the lowest and
highest figure (so two A76 clusters clocked 2.256 and 2.4 GHz are both big).

:func:`apply_affinity` pins with ``os.sched_setaffinity(0, ...)``: that sets the calling thread,
and threads started afterwards inherit it, so it runs before any onnxruntime session is made
(onnxruntime's intra-op threads, started with the session, then run on the big cores: its own
per-thread affinitization happens only when the thread count is left at 0, and every runner here
sets it).  The vocoder's NPU calls (rknn-lite) are not CPU-bound (the calling thread waits for the
NPU), so they stay in the same process mask; moving them to a little core is not done.
Standard library only; no-op where all cores are equal (this x86 host).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rkspeech.core.errors import RkspeechError

#: the ``--cpu-affinity`` words besides a list of cores
AFFINITY_WORDS = ("big", "all")
DEFAULT_AFFINITY = "big"
CPU_DIR = "sys/devices/system/cpu"


@dataclass(frozen=True)
class CoreInfo:
    cpus: tuple[int, ...]  # every core found
    big: tuple[int, ...]  # the big cores (all of them when they are alike)
    source: str  # "cpu_capacity", "cpuinfo_max_freq" or "none"
    figures: dict  # cpu -> the figure read (capacity, or kHz)

    @property
    def heterogeneous(self) -> bool:
        return set(self.big) != set(self.cpus)

    @property
    def little(self) -> tuple[int, ...]:
        return tuple(c for c in self.cpus if c not in self.big)


def format_cpus(cpus) -> str:
    """``(4, 5, 6, 7)`` -> ``"4-7"``; ``(0, 1, 4)`` -> ``"0-1,4"``."""
    cpus = sorted(set(cpus))
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(str(start) if start == c else f"{start}-{c}")
            start = None
    return ",".join(out)


def parse_cpu_list(text: str, *, what: str = "--cpu-affinity") -> tuple[int, ...]:
    """``"4-7"``, ``"4,5,6,7"``, ``"0-1,4"`` -> sorted cores; anything else one line."""
    cpus = set()
    for part in text.split(","):
        lo, dash, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise RkspeechError(f"{what} {text!r}: give big, all, or a list of cores such as 4-7 or 4,5,6,7") \
                from None
        if a < 0 or b < a:
            raise RkspeechError(f"{what} {text!r}: {part.strip()!r} is not a core or a rising range of cores")
        cpus.update(range(a, b + 1))
    return tuple(sorted(cpus))


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _present(root: Path) -> list[int]:
    base = root / CPU_DIR
    text = _read(base / "online") or _read(base / "present")
    if text:
        try:
            return list(parse_cpu_list(text, what=str(base / "online")))
        except RkspeechError:
            pass
    if base.is_dir():
        return sorted(int(p.name[3:]) for p in base.iterdir() if p.name[3:].isdigit() and p.name.startswith("cpu"))
    return []


def core_info(root: str | os.PathLike = "/") -> CoreInfo:
    """The cores below ``root`` and which are big (module docstring: capacity, then max clock)."""
    root = Path(root)
    cpus = _present(root)
    if not cpus and str(root) == "/":
        cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    base = root / CPU_DIR
    for source, rel in (("cpu_capacity", "cpu_capacity"), ("cpuinfo_max_freq", "cpufreq/cpuinfo_max_freq")):
        figures = {}
        for c in cpus:
            v = _read(base / f"cpu{c}" / rel)
            if v and v.isdigit():
                figures[c] = int(v)
        if cpus and len(figures) == len(cpus):
            lo, hi = min(figures.values()), max(figures.values())
            big = tuple(c for c in cpus if lo == hi or figures[c] > (lo + hi) / 2)
            return CoreInfo(tuple(cpus), big, source, figures)
    return CoreInfo(tuple(cpus), tuple(cpus), "none", {})


def resolve_affinity(spec: str, info: CoreInfo) -> tuple[int, ...] | None:
    """The cores ``spec`` asks for on ``info``'s machine; None: leave the scheduler free
    (``all``, or ``big`` where every core is alike)."""
    spec = (spec or DEFAULT_AFFINITY).strip().lower()
    if spec == "all":
        return None
    if spec == "big":
        return info.big if info.heterogeneous else None
    cpus = parse_cpu_list(spec)
    missing = [c for c in cpus if info.cpus and c not in info.cpus]
    if missing:
        raise RkspeechError(f"--cpu-affinity {spec}: no core {format_cpus(missing)} here (cores "
                            f"{format_cpus(info.cpus)}; big {format_cpus(info.big)})")
    return cpus


def apply_affinity(spec: str, *, root: str | os.PathLike = "/", setter=None) -> tuple[int, ...] | None:
    """Pin this thread (and every thread it starts later) to the cores ``spec`` names; call it
    before opening any onnxruntime session.  Returns the cores set, None when nothing was changed.
    ``setter``: ``os.sched_setaffinity`` (tests pass a recorder)."""
    cpus = resolve_affinity(spec, core_info(root))
    if cpus is None:
        return None
    setter = setter or getattr(os, "sched_setaffinity", None)
    if setter is None:
        raise RkspeechError(f"--cpu-affinity {spec}: this system cannot pin threads (no sched_setaffinity); "
                            "pass --cpu-affinity all")
    try:
        setter(0, set(cpus))
    except OSError as exc:
        raise RkspeechError(f"--cpu-affinity {spec}: cannot pin to cores {format_cpus(cpus)} ({exc.strerror}); "
                            "pass --cpu-affinity all or other cores") from None
    return cpus


def pin_cpu_stages(spec: str, *, root: str | os.PathLike = "/") -> tuple[int, ...] | None:
    """``--cpu-affinity`` of speak / serve: :func:`apply_affinity`, said on stderr when it pinned."""
    pinned = apply_affinity(spec, root=root)
    if pinned:
        from rkspeech.core import progress

        progress.info(f"CPU stages pinned to cores {format_cpus(pinned)} (--cpu-affinity {spec})")
    return pinned
