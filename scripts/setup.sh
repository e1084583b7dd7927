#!/usr/bin/env bash
# Idempotent set-up of .venv in the repository root (and espeak-ng for the Whisper tests).
# Re-runs skip the installs when the requirement files have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$PY" -m venv .venv
fi
stamp=.venv/.rkspeech-setup
want=$(cat requirements/*.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "setup: installing pinned dependencies into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements/host.txt -r requirements/test.txt
  .venv/bin/python -m pip install -q --no-deps -r requirements/no-deps.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  echo "$want" > "$stamp"
fi
if ! command -v espeak-ng >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing espeak-ng (speech for the Whisper tests)" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq espeak-ng >/dev/null) \
      || echo "setup: espeak-ng could not be installed; Whisper transcript tests will skip" >&2
  else
    echo "setup: espeak-ng missing (apt-get install espeak-ng); Whisper transcript tests will skip" >&2
  fi
fi
