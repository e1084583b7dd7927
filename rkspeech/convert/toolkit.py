"""Lazy imports of rknn-toolkit2 (host: build + x86 simulator) and rknn-toolkit-lite2 (board).

Neither is imported at module level anywhere in rkspeech; call these helpers inside functions.

Facts these helpers work around (measured here with rknn-toolkit2 2.5.0 on x86_64 / quoted in the
shared field notes):

* rknn-toolkit2 imports ``pkg_resources``: setuptools >= 81 removed it, so the import fails there.
* Importing rknn-toolkit-lite2 rewrites ``logging._nameToLevel`` (afterwards
  ``logger.setLevel("INFO")`` raises); :func:`rknn_lite_class` saves and restores
  ``logging._nameToLevel`` / ``logging._levelToName`` around the import.
* ``RKNN.release()`` calls ``unsetenv("TMPDIR")`` at C level in the calling process;
  :func:`release` puts it back.
"""

from __future__ import annotations

import logging
import os
import warnings

from rkspeech.core.errors import MissingPackage, RkspeechError

TOOLKIT_HINT = ("install it into the host venv with `pip install --no-deps rknn-toolkit2==2.5.0` "
                "(plus numpy<2, onnx<=1.18, setuptools<81; see `rkspeech doctor`)")
#: Where librknnrt.so comes from. rknn-toolkit-lite2 2.5.0's aarch64 wheel holds no librknnrt.so
#: (measured: `pip install '.[board]'` in an emulated arm64 root, issue 40); it dlopens the one in
#: /usr/lib (LIBRKNNRT_PATH elsewhere). Rockchip publishes it in airockchip/rknn-toolkit2 at
#: rknpu2/runtime/Linux/librknn_api/aarch64/ (airockchip/rknn-toolkit2#303, rockchip-linux/
#: rknn-toolkit2#260); vendor images package it too (Radxa's `rknpu2-rk3588`: radxa-docs/docs#612).
LIBRKNNRT_FROM = ("rknn-toolkit-lite2's wheel does not ship librknnrt.so: copy "
                  "rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so from airockchip/rknn-toolkit2 (the "
                  "release of the toolkit that built the .rknn) to /usr/lib/, or install the board vendor's "
                  "runtime package (Radxa: rknpu2-rk3588)")
LITE_HINT = ("rknn-toolkit-lite2 runs on the board (aarch64): `pip install rknn-toolkit-lite2` there; "
             + LIBRKNNRT_FROM)


def rknn_class():
    """Return ``rknn.api.RKNN`` or raise RkspeechError saying how to install it."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # pkg_resources deprecation noise
            from rknn.api import RKNN
    except ModuleNotFoundError as exc:
        if exc.name == "pkg_resources":
            raise RkspeechError("rknn-toolkit2 needs pkg_resources, which setuptools>=81 removed: "
                                "`pip install 'setuptools<81'`") from None
        raise MissingPackage(f"rknn-toolkit2 is not importable ({exc}); {TOOLKIT_HINT}") from None
    except ImportError as exc:
        raise RkspeechError(f"rknn-toolkit2 failed to import ({exc}); {TOOLKIT_HINT}") from None
    return RKNN


def rknn_lite_class():
    """Return ``rknnlite.api.RKNNLite`` (board runtime) without letting it break ``logging``."""
    saved_name = dict(logging._nameToLevel)  # type: ignore[attr-defined]
    saved_level = dict(logging._levelToName)  # type: ignore[attr-defined]
    try:
        from rknnlite.api import RKNNLite
    except ImportError as exc:
        raise MissingPackage(f"rknn-toolkit-lite2 is not importable ({exc}); {LITE_HINT}") from None
    finally:
        logging._nameToLevel.clear()  # type: ignore[attr-defined]
        logging._nameToLevel.update(saved_name)  # type: ignore[attr-defined]
        logging._levelToName.clear()  # type: ignore[attr-defined]
        logging._levelToName.update(saved_level)  # type: ignore[attr-defined]
    return RKNNLite


def have_toolkit() -> bool:
    """True when rknn-toolkit2 is installed (checked without importing it)."""
    import importlib.util

    try:
        return importlib.util.find_spec("rknn.api") is not None
    except (ImportError, ValueError):
        return False


def release(rknn) -> None:
    """``rknn.release()`` and restore TMPDIR, which the toolkit unsets at C level."""
    tmpdir = os.environ.get("TMPDIR")
    try:
        rknn.release()
    finally:
        if tmpdir is not None:
            os.putenv("TMPDIR", tmpdir)
            os.environ["TMPDIR"] = tmpdir
