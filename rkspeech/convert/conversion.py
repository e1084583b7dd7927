"""ONNX -> .rknn with rknn-toolkit2, in a child process that may crash without taking us along.

Why a child process: the toolkit has crashes that kill the process without a Python exception
(bfloat16 on rk3588 segfaults; some quantized dtypes on other chips abort), big graphs need many
GB (measured here: vocoder step graph B=64, 20.7 GB peak RSS), and its build log (layer table,
REGTASK lines) is printed from C to fd 1/2.  So the child (``rkspeech.convert.converter_child``) runs
with fd 1 and 2 on ``<output>.build.log``; the parent polls its RSS (children included) with
psutil, enforces the timeout / memory limit by killing the child's process group, and turns a
signal or a non-zero exit into one :class:`RkspeechError` naming the signal and the log (the
watching helpers are shared with the simulator child: :mod:`rkspeech.core.child`).

The .rknn is exported under a temporary name in the output folder and renamed into place only
after the build succeeded and the file parsed (``rknn_file.read_container``), so an earlier good
artifact survives a failed build.  The ONNX (missing, a folder, not a protobuf model) and the
output locations are checked before the child starts; the child and its hidden temp folder are
recorded in :mod:`rkspeech.core.child`, so SIGINT, SIGTERM or SIGHUP to the caller kills the
child's process group and removes the folder.

Measured here (2 cores): a Conv+Relu+Sin+Mul graph on [1,4,16,16], rk3588 fp16, converts in
about 2-3 s wall (child start and toolkit import included), ~0.4 GB peak RSS, 21 KB .rknn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rkspeech.core.atomic import check_writable
from rkspeech.core.child import (POLL_SECONDS, ChildWatch, death_message, kill_tree, last_error_line, log_tail,
                                 owned)
from rkspeech.core.errors import RkspeechError
from rkspeech.core.targets import TARGETS

#: The converter's log beside each FILE.rknn (FILE.rknn.build.log): its layer table is what
#: ``rkspeech estimate`` reads, so it travels with the graph (``plan.bundle``).
BUILD_LOG_SUFFIX = ".build.log"

#: ``int16-hybrid``: w16a16i_dfp with the layers int16 cannot take in fp16 (``convert.hybrid_int16``)
DTYPES = ("fp16", "int8", "int16-hybrid")
#: the dtypes whose build needs a calibration dataset
CALIBRATED_DTYPES = ("int8", "int16-hybrid")
#: sherpa-onnx keeps its custom string under 1 KB; we hold ours to the same limit.
CUSTOM_STRING_LIMIT = 1024


@dataclass
class ConversionResult:
    onnx_path: str
    rknn_path: str
    log_path: str
    target: str
    dtype: str
    seconds: float
    peak_rss_mb: float | None
    rknn_bytes: int
    opt_level: int | None = None
    custom_string: str | None = None
    toolkit_version: str | None = None
    placement: Any = None  # rkspeech.convert.placement.Placement
    container: Any = None  # rkspeech.contracts.rknn_file.RknnContainer
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cpu_compute_ops(self) -> int:
        return len(self.placement.cpu_layers) if self.placement is not None else 0

    def to_report(self) -> dict[str, Any]:
        placement = self.placement.to_report() if self.placement is not None else {}
        c = self.container
        return {
            "target": self.target,
            "dtype": self.dtype,
            "onnx": self.onnx_path,
            "rknn": {
                "path": self.rknn_path,
                "bytes": self.rknn_bytes,
                "format": c.format if c else None,
                "target_platform": c.target_platform if c else None,
                "inputs": [vars(t) for t in c.inputs] if c else None,
                "outputs": [vars(t) for t in c.outputs] if c else None,
                "custom_string_bytes": len(self.custom_string.encode()) if self.custom_string else 0,
                # any rkspeech contract: vocoder, talker, code predictor
                "has_contract": bool(c is not None and c.contract is not None),
            },
            "build": {
                "seconds": round(self.seconds, 3),
                "peak_rss_mb": None if self.peak_rss_mb is None else round(self.peak_rss_mb, 1),
                "log": self.log_path,
                "regtask_overflow_lines": self.placement.regtask_overflow_lines if self.placement else 0,
                "opt_level": self.opt_level,
                "toolkit_version": self.toolkit_version,
            },
            "placement": placement,
            **({"extra": self.extra} if self.extra else {}),
        }


def default_output(onnx_path: str | os.PathLike, target: str) -> Path:
    p = Path(onnx_path)
    return p.with_name(f"{p.stem}_{target}.rknn")


def _last_step(log_path: str) -> str:
    """The last ``[rkspeech child] STEP ...`` marker in the log (tail only)."""
    tail = log_tail(log_path, 256 * 1024)
    i = tail.rfind("[rkspeech child] ")
    return tail[i + 17:].split(" ", 1)[0] if i >= 0 else "start"


def _validate(onnx_path: Path, target: str, dtype: str, dataset, custom_string) -> None:
    from rkspeech.contracts.read import check_onnx_file

    check_onnx_file(onnx_path)
    if target not in TARGETS:
        raise RkspeechError(f"unknown target {target!r}; choose one of {', '.join(TARGETS)}")
    if dtype not in DTYPES:
        raise RkspeechError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
    if dtype in CALIBRATED_DTYPES:
        if not dataset:
            raise RkspeechError(f"{dtype} needs a calibration dataset: pass --dataset FILE.txt "
                                "(one line per sample, .npy paths of the inputs separated by spaces)")
        if not Path(dataset).is_file():
            raise RkspeechError(f"{dataset}: no such dataset file")
    if custom_string is not None:
        n = len(custom_string.encode("utf-8"))
        if n > CUSTOM_STRING_LIMIT:
            raise RkspeechError(f"custom string is {n} bytes; the limit is {CUSTOM_STRING_LIMIT} "
                                "(keep the contract compact)")


class _Ticker:
    """Elapsed time and RSS while the child runs: a rich status on a terminal, lines otherwise."""

    def __init__(self, label: str, enabled: bool):
        self.label, self.enabled = label, enabled
        self.status = None
        self.last = 0.0
        if enabled:
            from rkspeech.core import progress

            console = progress._console()
            if console is not None and console.is_terminal:
                self.status = console.status(label)
                self.status.__enter__()

    def update(self, elapsed: float, rss_mb: float | None) -> None:
        if not self.enabled:
            return
        mem = f", RSS {rss_mb / 1024:.2f} GB" if rss_mb is not None else ""
        text = f"{self.label}: {elapsed:.0f} s{mem}"
        if self.status is not None:
            self.status.update(text)
        elif elapsed - self.last >= 15:
            from rkspeech.core import progress

            progress.info(f"    {text}")
            self.last = elapsed

    def close(self) -> None:
        if self.status is not None:
            self.status.__exit__(None, None, None)
            self.status = None


def convert(onnx_path, output_path, *, target: str, dtype: str = "fp16", dataset=None,
            opt_level: int | None = None, timeout: float | None = None,
            custom_string: str | None = None, verbose_log: bool = True,
            memory_limit_mb: float | None = None, show_progress: bool = True,
            hybrid=None) -> ConversionResult:
    """Convert ``onnx_path`` to ``output_path`` (.rknn) for ``target`` in a child process.

    Returns a :class:`ConversionResult` (placement parsed from the build log and cross-checked with
    the .rknn).  Raises :class:`RkspeechError` on bad arguments, a crash (the signal is named; a
    SIGKILL is often the kernel OOM killer), a failed toolkit step, a timeout or the memory limit;
    the message names the build log.  ``output_path`` is replaced only on success.
    ``hybrid``: a ``convert.hybrid_int16.HybridInt16Options`` for ``dtype="int16-hybrid"``
    (default: its defaults).
    """
    onnx_path = Path(onnx_path).resolve()
    output_path = Path(output_path).resolve()
    target = target.lower()
    _validate(onnx_path, target, dtype, dataset, custom_string)
    out_dir = output_path.parent
    check_writable(output_path, what="output .rknn")
    check_writable(str(output_path) + BUILD_LOG_SUFFIX, what="build log")
    log_path = Path(str(output_path) + BUILD_LOG_SUFFIX)
    from rkspeech.core import progress

    # the temp folder and the child are recorded in core.child: a signal to this process (the
    # CLI turns SIGTERM / SIGHUP into an exception) kills the child's group and removes the folder
    with owned() as ownership:
        # owner-locked: one left by a SIGKILLed build (no finally ran) is swept by the next conversion here
        work = ownership.workdir(out_dir, prefix=f".{output_path.name}.")
        tmp_rknn = work / output_path.name
        spec = {
            "onnx_path": str(onnx_path), "export_path": str(tmp_rknn), "target": target, "dtype": dtype,
            "dataset": str(Path(dataset).resolve()) if dataset else None, "opt_level": opt_level,
            "custom_string": custom_string, "verbose_log": verbose_log,
            "result_path": str(work / "result.json"),
            "hybrid": hybrid.to_dict() if hybrid is not None else None,
            "parent_pid": os.getpid(),  # the child dies with this process (core.orphans.die_with_parent)
        }
        (work / "spec.json").write_text(json.dumps(spec))
        env = dict(os.environ)
        pkg_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["PYTHONUNBUFFERED"] = "1"
        # rknn-toolkit2 2.5.0's build leaves a tempfile.mkdtemp() folder holding check.onnx and
        # check.rknn (a copy of the model) behind on every conversion (measured: one per run, 67 MB
        # for a reduced vocoder step); inside ``work`` it goes with the rest.
        env["TMPDIR"] = str(work)
        label = f"converting {onnx_path.name} -> {output_path.name} ({target} {dtype})"
        ticker = _Ticker(label, show_progress)
        killed_for: str | None = None
        with open(log_path, "wb") as log:
            popen = subprocess.Popen(
                [sys.executable, "-m", "rkspeech.convert.converter_child", str(work / "spec.json")],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=str(work),
                env=env, start_new_session=True)
        ownership.set_child(popen.pid, group=True)
        watch = ChildWatch(popen.pid, timeout=timeout, memory_limit_mb=memory_limit_mb)
        try:
            while popen.poll() is None:
                killed_for = watch.check()
                if killed_for:
                    kill_tree(popen.pid, group=True)
                    popen.wait()
                    break
                ticker.update(watch.elapsed, watch.peak_mb)
                time.sleep(POLL_SECONDS)
        except BaseException:
            kill_tree(popen.pid, group=True)
            popen.wait()
            raise
        finally:
            ticker.close()
        rc = popen.returncode
        seconds = watch.elapsed
        peak_mb = watch.peak_mb
        result = {}
        try:
            result = json.loads((work / "result.json").read_text())
        except (OSError, ValueError):
            pass
        mem = watch.peak_text()
        step = result.get("step") or _last_step(str(log_path))
        if killed_for:
            raise RkspeechError(f"conversion of {onnx_path.name} {killed_for} (in {step}{mem}); "
                                f"build log: {log_path}")
        if rc < 0:
            raise RkspeechError(f"conversion of {onnx_path.name} crashed: the rknn-toolkit2 child was "
                                f"{death_message(rc)} in {step} after {seconds:.1f} s{mem}; build log: {log_path}")
        if rc != 0 or not result.get("ok"):
            why = result.get("message") or f"exit code {rc}"
            last = last_error_line(log_tail(log_path))
            detail = f"; last error: {last}" if last and last not in why else ""
            raise RkspeechError(f"conversion of {onnx_path.name} failed: {why}{detail}; build log: {log_path}")
        if not tmp_rknn.is_file():
            raise RkspeechError(f"conversion of {onnx_path.name} reported success but wrote no .rknn; "
                                f"build log: {log_path}")
        from rkspeech.contracts.rknn_file import read_container

        container = read_container(tmp_rknn, expect_target=target)
        os.replace(tmp_rknn, output_path)
        container.path = str(output_path)

    from rkspeech.convert.placement import analyze

    placement = analyze(log_path, output_path, onnx_path)
    res = ConversionResult(
        onnx_path=str(onnx_path), rknn_path=str(output_path), log_path=str(log_path), target=target,
        dtype=dtype, seconds=seconds, peak_rss_mb=peak_mb, rknn_bytes=output_path.stat().st_size,
        opt_level=opt_level, custom_string=custom_string, toolkit_version=container.toolkit_version,
        placement=placement, container=container,
        extra={"hybrid": result["hybrid"]} if result.get("hybrid") else {})
    progress.info(f"[ok] {output_path.name}: {res.rknn_bytes / 2**20:.2f} MB in {seconds:.1f} s{mem}; "
                  f"{len(placement.npu_layers)} NPU / {len(placement.cpu_layers)} CPU ops")
    return res
