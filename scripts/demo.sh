#!/usr/bin/env bash
# Set up (idempotent) and run the main job on the embedded default: a synthetic published-size
# Qwen3-TTS checkpoint -> step graphs -> checks -> .rknn for rk3588 -> simulator -> plan.json.
# Pass --config reduced for a quick run (a few minutes instead of ~15-20).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/rkspeech demo "$@"
