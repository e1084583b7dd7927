"""How many CPU threads host-side compute uses (torch, onnxruntime): one rule for every stage.

``RKSPEECH_THREADS`` when set, else at most 2: the measuring machines have 2 cores shared with
other jobs, and on a board the NPU does the work while the CPU only feeds it.
"""

from __future__ import annotations

import os

ENV = "RKSPEECH_THREADS"


def default_threads() -> int:
    value = os.environ.get(ENV, "").strip()
    if value:
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            from rkspeech.core.errors import RkspeechError

            raise RkspeechError(f"{ENV}={value!r}: set it to a whole number of threads >= 1, or unset it")
        return n
    return min(2, os.cpu_count() or 1)
