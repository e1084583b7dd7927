#!/usr/bin/env bash
# Set up (idempotent) and run the whole test suite.
# Over pytest-xdist workers: one per core, at most one per 6 GB of memory (a worker's reduced
# builds and simulator children peak at a few GB) and at most 4; RKSPEECH_TEST_WORKERS=N sets the
# count (1: one process, as plain pytest).  tests/conftest.py keeps each module, and the modules
# sharing a costly session fixture, on one worker.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
workers=${RKSPEECH_TEST_WORKERS:-$(.venv/bin/python -c '
import os
mem_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
print(max(1, min(len(os.sched_getaffinity(0)), int(mem_gb // 6), 4)))')}
if [ "$workers" -gt 1 ]; then
  set -- -n "$workers" --dist loadgroup "$@"
fi
exec .venv/bin/python -m pytest -q -ra "$@"
