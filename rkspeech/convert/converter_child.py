"""The child process that runs rknn-toolkit2: ``python -m rkspeech.convert.converter_child SPEC.json``.

Run by :func:`rkspeech.convert.conversion.convert` with fd 1 and 2 pointing at the build log, so the
C-level layer table and REGTASK lines land in the log.  It writes a small JSON result to
``spec["result_path"]``; the parent reads it (a crash leaves none).

Exit codes: 0 ok; 3 a toolkit step returned non-zero; 4 a Python exception.  It dies with its
parent (``spec["parent_pid"]``, :func:`rkspeech.core.orphans.die_with_parent`): a SIGKILLed build
left it converting with nobody to read the result.

Test hooks (environment, used only by tests): ``RKSPEECH_TEST_CHILD_SIGNAL=SIGKILL`` makes the child
kill itself with that signal after ``load_onnx``; ``RKSPEECH_TEST_CHILD_SLEEP=S`` sleeps S seconds
there (for timeout tests).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback


def _write(result_path: str, result: dict) -> None:
    tmp = result_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(result, f)
    os.replace(tmp, result_path)


def _test_hooks() -> None:
    sig = os.environ.get("RKSPEECH_TEST_CHILD_SIGNAL")
    if sig:
        sys.stdout.flush()
        os.kill(os.getpid(), getattr(signal, sig))
        time.sleep(5)
    sleep = os.environ.get("RKSPEECH_TEST_CHILD_SLEEP")
    if sleep:
        time.sleep(float(sleep))


def run(spec: dict) -> int:
    result: dict = {"step": "import"}
    result_path = spec["result_path"]
    start = time.perf_counter()
    try:
        import warnings

        warnings.simplefilter("ignore")
        from rknn.api import RKNN

        config = {"target_platform": spec["target"]}
        if spec.get("opt_level") is not None:
            config["optimization_level"] = int(spec["opt_level"])
        if spec.get("custom_string"):
            config["custom_string"] = spec["custom_string"]
        if spec["dtype"] == "int16-hybrid":  # its own steps (convert.hybrid_int16), cwd: the work folder
            return _run_hybrid(spec, RKNN, config, result, start)
        rknn = RKNN(verbose=bool(spec.get("verbose_log", True)))
        if spec["dtype"] == "int8":
            config["quantized_dtype"] = spec.get("quantized_dtype") or "w8a8"
        steps = [
            ("config", lambda: rknn.config(**config)),
            ("load_onnx", lambda: rknn.load_onnx(model=spec["onnx_path"])),
            ("hooks", lambda: _test_hooks() or 0),
            ("build", lambda: rknn.build(do_quantization=spec["dtype"] == "int8",
                                         dataset=spec.get("dataset"))),
            ("export_rknn", lambda: rknn.export_rknn(spec["export_path"])),
        ]
        for name, fn in steps:
            result["step"] = name
            print(f"[rkspeech child] {name} ...", flush=True)
            rc = fn()
            if rc not in (0, None):
                result.update(ok=False, rc=rc, message=f"rknn-toolkit2 {name}() returned {rc}",
                              seconds=time.perf_counter() - start)
                _write(result_path, result)
                return 3
        result.update(ok=True, seconds=time.perf_counter() - start)
        _write(result_path, result)
        return 0
    except BaseException as exc:  # noqa: BLE001 - report anything to the parent
        traceback.print_exc()
        sys.stdout.flush()
        line = f"{type(exc).__name__}: {exc}".splitlines()[0][:400] if str(exc) else type(exc).__name__
        result.update(ok=False, message=f"exception in {result['step']}: {line}",
                      seconds=time.perf_counter() - start)
        _write(result_path, result)
        return 4


def _run_hybrid(spec: dict, RKNN, config: dict, result: dict, start: float) -> int:
    from rkspeech.convert.hybrid_int16 import HybridInt16Options, hybrid_build

    result["step"] = "hybrid"
    _test_hooks()
    try:
        rknn, info = hybrid_build(lambda: RKNN(verbose=bool(spec.get("verbose_log", True))), config,
                                  spec["onnx_path"], spec["dataset"], HybridInt16Options.from_dict(spec.get("hybrid")))
    except RuntimeError as exc:
        result.update(ok=False, message=str(exc), seconds=time.perf_counter() - start)
        _write(result_path=spec["result_path"], result=result)
        return 3
    result["step"] = "export_rknn"
    print("[rkspeech child] export_rknn ...", flush=True)
    rc = rknn.export_rknn(spec["export_path"])
    if rc not in (0, None):
        result.update(ok=False, rc=rc, message=f"rknn-toolkit2 export_rknn() returned {rc}",
                      seconds=time.perf_counter() - start)
        _write(spec["result_path"], result)
        return 3
    result.update(ok=True, hybrid=info, seconds=time.perf_counter() - start)
    _write(spec["result_path"], result)
    return 0


def main(argv: list[str]) -> int:
    with open(argv[1]) as f:
        spec = json.load(f)
    if spec.get("parent_pid"):
        from rkspeech.core.orphans import die_with_parent

        die_with_parent(int(spec["parent_pid"]))
    return run(spec)


if __name__ == "__main__":
    code = main(sys.argv)
    sys.stdout.flush()
    sys.stderr.flush()
    try:  # flush C stdio buffers too: the layer table is printed from C
        import ctypes

        ctypes.CDLL(None).fflush(None)
    except Exception:  # noqa: BLE001
        pass
    # the toolkit leaves threads and atexit handlers behind; do not let them decide the exit code
    os._exit(code)
