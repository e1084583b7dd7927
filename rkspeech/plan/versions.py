"""The runtime versions a plan was built and verified with, and how a machine's differ (issue 40).

A build records in ``plan.json`` ``build.runtime_versions`` (:func:`build_versions`, when the plan
is written: ``plan.plan.write_plan_data``): ``onnxruntime`` (it quantized and checked the CPU
stages, and recorded their goldens) and ``numpy`` (the host loop), and for a plan with NPU stages
``rknn-toolkit2`` (it converted and simulated the .rknn) and ``librknnrt``, the runtime release
those .rknn files want (the toolkit's own: an older one refuses them, "Invalid RKNN model
version", ``board.compat``).  ``rkspeech doctor --plan`` compares them with what is installed
where it runs (:func:`version_skews`): one finding per skew, saying what it means and what to do.

Why: ``pip install '.[board]'`` resolves the newest onnxruntime and numpy (1.32 / 2.4 on
2026-12-05) while the build host pins 1.19.2 / 1.26; on the reduced cpu-int4 plan the greedy codes
of onnxruntime 1.32 on aarch64 parted from the build host's at frames 1-4, while 1.19.2 on aarch64
kept two of three utterances identical (docs/board.md).  Standard library only.
"""

from __future__ import annotations

RUNTIME_KEY = "runtime_versions"
#: the distributions a plan's record names (pip's names) and the board's counterpart of each
RECORDED = ("onnxruntime", "numpy", "rknn-toolkit2", "librknnrt")


def installed_versions(names=("onnxruntime", "numpy", "rknn-toolkit2", "rknn-toolkit-lite2")) -> dict[str, str | None]:
    """name -> the installed version (``importlib.metadata``; None: not installed)."""
    import importlib.metadata as md

    out = {}
    for name in names:
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def build_versions(raw: dict) -> dict[str, str | None]:
    """What a plan ``raw`` (format 2) was built and verified with, here: onnxruntime and numpy;
    with an NPU stage also rknn-toolkit2 and the librknnrt release it wants (the same)."""
    from rkspeech.plan.record import is_npu, stage_records

    have = installed_versions(("onnxruntime", "numpy", "rknn-toolkit2"))
    out = {"onnxruntime": have["onnxruntime"], "numpy": have["numpy"]}
    if any(is_npu(r) for r in stage_records(raw).values()):
        out["rknn-toolkit2"] = have["rknn-toolkit2"]
        out["librknnrt"] = have["rknn-toolkit2"]  # a .rknn wants the runtime of its toolkit's release
    return out


def version_tuple(text: str | None) -> tuple[int, ...] | None:
    """``"1.19.2"`` -> ``(1, 19, 2)``; ``"2.3.2 (429f97ae6b@2025-04-09)"`` / ``"v0.9.8"`` ->
    ``(2, 3, 2)`` / ``(0, 9, 8)``; None when there is no version in ``text``."""
    import re

    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(g) for g in m.groups() if g is not None) if m else None


def _finding(name: str, severity: str, message: str) -> dict:
    return {"id": f"version-skew-{name}", "severity": severity, "message": message,
            "source": "plan.json build.runtime_versions (issue 40)"}


def version_skews(raw: dict, plan_path, installed: dict[str, str | None], *, board: bool) -> list[dict]:
    """Findings for the plan ``raw``'s recorded versions against ``installed`` (``onnxruntime``,
    ``numpy``, ``rknn-toolkit-lite2``, ``librknnrt``: the board's runtime, None off a board or when
    not found); ``board``: this is a Rockchip board (the NPU runtime is only looked for there).
    A plan without the record: one info line."""
    from rkspeech.plan.record import is_npu, stage_records

    build = raw.get("build") if isinstance(raw.get("build"), dict) else {}
    rec = build.get(RUNTIME_KEY)
    if not isinstance(rec, dict):
        return [{"id": "versions-unrecorded", "severity": "info",
                 "message": f"plan {plan_path} records no runtime versions (built before 2026-12-05): nothing to "
                            "compare with what is installed here; rebuild it to have doctor compare them",
                 "source": "plan.json build.runtime_versions (issue 40)"}]
    records = stage_records(raw)
    cpu = [n.replace("_", " ") for n, r in records.items() if n in ("talker", "code_predictor") and not is_npu(r)]
    npu = any(is_npu(r) for r in records.values())
    out = []
    check = f"`rkspeech check-board --plan {plan_path} --backend ort`"

    ort_b, ort_i = rec.get("onnxruntime"), installed.get("onnxruntime")
    if ort_b and cpu:
        what = f"the plan's CPU stages ({', '.join(cpu)})"
        if ort_i is None:
            out.append(_finding("onnxruntime", "error",
                                f"onnxruntime is not installed: {what} run on it; `pip install onnxruntime=={ort_b}`"))
        elif version_tuple(ort_i) != version_tuple(ort_b):
            major = (version_tuple(ort_i) or ())[:2] != (version_tuple(ort_b) or ())[:2]
            out.append(_finding("onnxruntime", "warning" if major else "info",
                                f"onnxruntime {ort_i} here, {what} were built and checked with {ort_b}: another "
                                "release's int8 / int4 kernels round differently, so greedy codes may part from the "
                                "build's (measured on a reduced cpu-int4 plan on emulated aarch64: 1.32.0 parted from the build's "
                                "1.19.2 at frames 1-4); "
                                f"{check} replays the CPU stages' goldens here, or `pip install onnxruntime=={ort_b}`"))
    np_b, np_i = rec.get("numpy"), installed.get("numpy")
    if np_b and np_i and version_tuple(np_i) != version_tuple(np_b):
        major = (version_tuple(np_i) or ())[:1] != (version_tuple(np_b) or ())[:1]
        out.append(_finding("numpy", "warning" if major else "info",
                            f"numpy {np_i} here, the plan was built and checked with {np_b}"
                            + (": numpy 2 changed scalar type promotion (NEP 50), so the host loop's float32 "
                               "arithmetic (prompt, heads, sampling) may round differently" if major else
                               ": the host loop's arithmetic may round differently")
                            + f"; `pip install numpy=={np_b}` to run as the build did"))
    tk = rec.get("rknn-toolkit2")
    lite = installed.get("rknn-toolkit-lite2")
    if npu and tk and lite and (version_tuple(lite) or ())[:2] != (version_tuple(tk) or ())[:2]:
        out.append(_finding("rknn-toolkit-lite2", "warning",
                            f"rknn-toolkit-lite2 {lite} here, the plan's .rknn graphs were built and simulated with "
                            f"rknn-toolkit2 {tk}: use the same release on the board (`pip install "
                            f"rknn-toolkit-lite2=={tk}`, with its librknnrt.so)"))
    rt_b, rt_i = rec.get("librknnrt"), installed.get("librknnrt")
    if npu and board and rt_b and rt_i:
        b, i = version_tuple(rt_b) or (), version_tuple(rt_i) or ()
        if i[:2] < b[:2]:
            out.append(_finding("librknnrt", "error",
                                f"librknnrt {rt_i} here, the plan's .rknn graphs want {rt_b} (rknn-toolkit2 {tk}'s "
                                "release): an older runtime refuses them (\"Invalid RKNN model version\"); install the "
                                f"librknnrt.so of rknn-toolkit2 {tk}"))
        elif i[:2] != b[:2]:
            out.append(_finding("librknnrt", "warning",
                                f"librknnrt {rt_i} here, the plan's .rknn graphs were built for {rt_b}: a newer "
                                "runtime loads them but computes with its own kernels; `rkspeech check-board --plan "
                                f"{plan_path}` replays their goldens on the NPU, or install the librknnrt.so of "
                                f"rknn-toolkit2 {tk}"))
    return out
