#!/usr/bin/env bash
# The board side of rkspeech rehearsed on an emulated aarch64 (issue 40; docs/board.md "Rehearsal").
#
#   scripts/board-rehearsal.sh [--cache DIR] [--out DIR] [--quick] [--root-only]
#
# Builds (once) a Debian bookworm arm64 root run by qemu-aarch64-static, installs this checkout
# into it with `pip install '.[board]'`, builds (once, on this x86 host) a reduced custom-voice
# plan with cpu-int4 talker and code predictor and an NPU vocoder, then runs inside the arm64 root
# `doctor --plan`, `check-board --backend ort`, `speak --backend ort --greedy` and the default
# (rknn-lite) check-board, whose one-line refusal is expected (no NPU under emulation); also a reduced
# Qwen3-ASR plan (int4 decoder), its check-board and `transcribe --plan --backend ort` of one wav; runs the same
# speak and transcribe on x86 and prints a table: greedy codes aarch64 vs x86 (identical, or the first decision
# that differs and whether check-board's measured error explains it: a near-tie, rkspeech.board.compare),
# wav SNR, each step's time.  Exit 0 when every check passes.
#
# Idempotent: every step whose result is in the cache is skipped (the root, its Python packages
# while the checkout is unchanged, the model, the plan); the commands are run every time.
#
# Needs: Linux >= 6.7 (a user namespace's own binfmt_misc; nothing is registered on the host),
# qemu-user-static and debootstrap (Debian packages), root for debootstrap's first stage (it
# creates the root's device nodes), the registries (Debian mirror, PyPI) and the host's
# .venv with rkspeech's host toolchain (scripts/setup.sh).
#
# Environment: RKSPEECH_REHEARSAL_DIR (cache, default ~/.cache/rkspeech/arm64-root),
# DEBIAN_MIRROR (default http://deb.debian.org/debian), QEMU_AARCH64 (default
# /usr/bin/qemu-aarch64-static), RKSPEECH_HEAVY_LOCK (the x86 build runs under flock on it,
# default /tmp/rkspeech-heavy.lock), HOST_CA (the CA bundle pip uses inside, default the
# host's PIP_CERT or /etc/ssl/certs/ca-certificates.crt).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${RKSPEECH_REHEARSAL_DIR:-$HOME/.cache/rkspeech/arm64-root}
OUT=
QUICK=0
ROOT_ONLY=0
usage() { sed -n '2,25p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cache) CACHE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --quick) QUICK=1; shift ;;
    --root-only) ROOT_ONLY=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "board-rehearsal: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)
ROOT=$CACHE/root
WORK=$CACHE/work                   # bind-mounted at /rehearsal inside the root
OUT=${OUT:-$WORK/out}
mkdir -p "$WORK" "$OUT"
OUT=$(cd "$OUT" && pwd)
case "$OUT" in "$WORK"/*) ;; *) echo "board-rehearsal: --out must be under $WORK (the root sees only that)" >&2; exit 2 ;; esac
IN_OUT=/rehearsal${OUT#"$WORK"}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
QEMU=${QEMU_AARCH64:-/usr/bin/qemu-aarch64-static}
LOCK=${RKSPEECH_HEAVY_LOCK:-/tmp/rkspeech-heavy.lock}
HOST_CA=${HOST_CA:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
HOST_PY=${RKSPEECH_HOST_PYTHON:-$REPO/.venv/bin/python}
VENV=/opt/rkspeech                 # inside the root
MODEL=$WORK/model-reduced-custom-voice
PLAN=$WORK/plan-reduced-cpu-int4
[ "$QUICK" = 1 ] && PLAN=$WORK/plan-reduced-cpu-int4-quick
ROOT_TIMES=$CACHE/root-times.tsv   # the root's steps, kept across runs (they run once)
TIMES=$ROOT_TIMES

die() { echo "board-rehearsal: $*" >&3; exit 1; }
exec 3>&2                          # progress notes go here even while a step's output is redirected
note() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&3; }

# ---- preconditions, each one line --------------------------------------------------------------
kver=$(uname -r); kmaj=${kver%%.*}; kmin=${kver#*.}; kmin=${kmin%%.*}
{ [ "$kmaj" -gt 6 ] || { [ "$kmaj" -eq 6 ] && [ "$kmin" -ge 7 ]; }; } \
  || die "Linux $kver: a user namespace's own binfmt_misc needs >= 6.7"
[ -x "$QEMU" ] || die "$QEMU missing: apt-get install qemu-user-static (or set QEMU_AARCH64)"
command -v debootstrap >/dev/null || [ -d "$ROOT/usr" ] || die "debootstrap missing: apt-get install debootstrap"
command -v unshare >/dev/null || die "unshare missing (util-linux)"
[ -f "$HOST_CA" ] || die "HOST_CA $HOST_CA: no such CA bundle"
[ -x "$HOST_PY" ] || die "$HOST_PY missing: bash scripts/setup.sh first (the x86 side builds the plan)"

# ---- timing: one row per step: name, seconds, exit code ----------------------------------------
# run_step NAME CMD...: time CMD, record its exit code; never stops the script (the table shows it)
run_step() {
  local name=$1; shift
  local t0 t1 rc=0
  note "step $name"
  t0=$(date +%s.%N)
  "$@" || rc=$?
  t1=$(date +%s.%N)
  awk -v n="$name" -v a="$t0" -v b="$t1" -v rc="$rc" -v d="$(date -u +%FT%TZ)" \
    'BEGIN { printf "%s\t%.1f\t%s\t%s\n", n, b - a, rc, d }' >> "$TIMES"
  return 0
}
# must NAME CMD...: as run_step, but a failure stops the script
must() {
  local name=$1; shift
  run_step "$name" "$@"
  local rc; rc=$(tail -n1 "$TIMES" | cut -f3)
  [ "$rc" = 0 ] || die "step $name failed (exit $rc); its log is in $OUT"
}

# ---- the arm64 root ----------------------------------------------------------------------------
# A Cortex-A76 /proc/cpuinfo (qemu passes the host's x86 one through; onnxruntime's cpuinfo
# segfaults on import without an ARM one), as many processors as this host has.
write_cpuinfo() {
  local n i; n=$(nproc)
  : > "$CACHE/cpuinfo"
  for ((i = 0; i < n; i++)); do
    cat >> "$CACHE/cpuinfo" <<EOF
processor	: $i
BogoMIPS	: 48.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp
CPU implementer	: 0x41
CPU architecture: 8
CPU variant	: 0x4
CPU part	: 0xd0b
CPU revision	: 0

EOF
  done
}

# in_root [ENV=VAL...] -- CMD...: CMD chrooted into the arm64 root inside a private user + mount +
# pid namespace with its own binfmt_misc instance, where qemu-aarch64-static is registered with
# the F flag (opened now, so the root needs no copy of it). The namespace ends with the command.
# Its ids 0-65535 are this host's 0-65535, written by this (root) shell into the namespace's
# uid_map / gid_map: dpkg in debootstrap's second stage chowns to system groups (mail, shadow...),
# which `unshare --map-root-user` alone (uid 0 only) refuses.
in_root() {
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  unshare --user --mount --pid --fork --kill-child -- \
    env ROOT="$ROOT" WORK="$WORK" CACHE="$CACHE" QEMU="$QEMU" \
    bash -euc '
      while ! grep -q . /proc/self/gid_map; do sleep 0.02; done
      mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
      magic="\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00"
      mask="\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff"
      printf "%s" ":rkspeech-aarch64:M::$magic:$mask:$QEMU:F" > /proc/sys/fs/binfmt_misc/register
      mkdir -p "$ROOT/proc" "$ROOT/sys" "$ROOT/rehearsal" "$ROOT/tmp"
      mount -t proc proc "$ROOT/proc" 2>/dev/null || mount --rbind /proc "$ROOT/proc"
      mount --bind "$CACHE/cpuinfo" "$ROOT/proc/cpuinfo"
      mount --rbind /sys "$ROOT/sys" 2>/dev/null || true
      mount --bind "$WORK" "$ROOT/rehearsal"
      exec chroot "$ROOT" "$@"
    ' in_root env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      LANG=C.UTF-8 QEMU_CPU=cortex-a76 "${envs[@]}" "$@" &
  local pid=$! mine rc=0
  mine=$(readlink /proc/self/ns/user)
  while [ "$(readlink "/proc/$pid/ns/user" 2>/dev/null || echo "$mine")" = "$mine" ]; do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  echo "0 0 65536" > "/proc/$pid/uid_map" && echo "0 0 65536" > "/proc/$pid/gid_map" \
    || { kill "$pid" 2>/dev/null; echo "board-rehearsal: cannot map the namespace's ids (needs root)" >&2; }
  # unshare ignores SIGTERM / SIGINT while it waits, and --kill-child's death signal did not reach
  # the command (measured: it ran on, reparented, after unshare was SIGKILLed): SIGKILL the
  # namespace's pid 1 from here, which ends every process in the namespace, then unshare
  trap 'kill -KILL $(cat /proc/'"$pid"'/task/'"$pid"'/children 2>/dev/null) '"$pid"' 2>/dev/null; exit 143' INT TERM
  wait "$pid" || rc=$?
  trap - INT TERM
  return "$rc"
}

root_stage1() {
  [ "$(id -u)" = 0 ] || die "debootstrap's first stage needs root (it creates device nodes): sudo $0"
  rm -rf "$ROOT"
  debootstrap --arch=arm64 --foreign --variant=minbase \
    --include=python3,python3-venv,ca-certificates bookworm "$ROOT" "$MIRROR" > "$CACHE/stage1.log" 2>&1 \
    || { tail -5 "$CACHE/stage1.log" >&2; return 1; }
}
root_stage2() {
  in_root container=lxc -- /debootstrap/debootstrap --second-stage > "$CACHE/stage2.log" 2>&1 \
    || { tail -5 "$CACHE/stage2.log" >&2; return 1; }
  touch "$CACHE/stage2.done"
}

# The checkout as git sees it (tracked and untracked, not ignored files, as they are on disk), copied into the root;
# its hash decides whether the root's install is current.
copy_checkout() {
  local dst=$ROOT/src/rkspeech
  rm -rf "$dst"; mkdir -p "$dst"
  # (.venv: a developer's venv, or a link to one, is no part of the checkout)
  (cd "$REPO" && git ls-files -co --exclude-standard | grep -v -e '^\.venv' -e '^build/' \
     | while IFS= read -r f; do [ -f "$f" ] && printf '%s\n' "$f"; done | tar -cf - -T -) | tar -xf - -C "$dst"
  (cd "$dst" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
pip_install() {
  cp "$HOST_CA" "$ROOT/etc/rkspeech-host-ca.pem"
  in_root PIP_CERT=/etc/rkspeech-host-ca.pem PIP_DISABLE_PIP_VERSION_CHECK=1 -- /bin/sh -ec "
    [ -x $VENV/bin/pip ] || python3 -m venv $VENV
    cd /src/rkspeech && $VENV/bin/pip install -q '.[board]'
    $VENV/bin/pip freeze > /rehearsal/arm64-pip-freeze.txt
  " > "$CACHE/pip.log" 2>&1 || { tail -5 "$CACHE/pip.log" >&2; return 1; }
}

write_cpuinfo
if [ ! -f "$CACHE/stage2.done" ]; then
  must root-stage1 root_stage1         # again after a failed second stage: a half-configured root is no base
  must root-stage2 root_stage2
else
  note "root: cached ($ROOT)"
fi
src_hash=$(copy_checkout)
if [ "$(cat "$CACHE/pip.done" 2>/dev/null)" != "$src_hash" ]; then
  must pip-install pip_install
  echo "$src_hash" > "$CACHE/pip.done"
else
  note "pip install: cached (checkout $src_hash unchanged)"
fi
[ "$ROOT_ONLY" = 1 ] && { note "root ready: $ROOT"; exit 0; }

# ---- x86: the reduced model and its plan (cpu-int4 talker and code predictor, NPU vocoder) -----
HOST_RK=("$HOST_PY" -m rkspeech)
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
if [ "$QUICK" = 1 ]; then   # one vocoder golden step, small talker cache, a short gate
  BUILD_OPTS=(--codes-length 4 --first-length 0 --verify-steps 1 --verify-frames 4 --talker-capacity 96
              --talker-prefill 16 --cpu-check-frames 16)
  TEXTS=("The quick brown fox jumps over the lazy dog.")
  CHECK_OPTS=(--repeats 1)   # emulated call times mean nothing; the first replay is the one compared
else
  # the vocoder at B=16 (first B=2), as issue 40's measured run: the reduced default B=64 makes each
  # emulated main call ~2 min at load 6 (measured: check-board's 15 first-step calls took 435 s)
  BUILD_OPTS=(--codes-length 16 --first-length 2)
  CHECK_OPTS=(--repeats 2)
  TEXTS=("The quick brown fox jumps over the lazy dog." "A board without a board, rehearsed."
         "Numbers like 1234 and dates like March 5th.")
fi
FRAMES=32
SPEAKER=ryan
TIMES=$OUT/times.tsv
: > "$TIMES"
uptime > "$OUT/load-start.txt"
if [ ! -f "$MODEL/config.json" ]; then
  must synth-checkpoint "${HOST_RK[@]}" synth-checkpoint qwen3-tts --config reduced --variant custom-voice \
    --seed 0 --out-dir "$MODEL"
fi
# random synthetic weights fail the accuracy gate by design (docs/tts-build.md): --gate warn; run every time
# (resumable: a cached plan gets the stages it lacks, such as the lanes graphs of --streams)
must build flock "$LOCK" "${HOST_RK[@]}" build qwen3-tts --model-dir "$MODEL" --target rk3588 --out-dir "$PLAN" \
  --talker cpu-int4 --code-predictor cpu-int4 --vocoder npu --int4-block 128 --int4-symmetric --gate warn \
  "${BUILD_OPTS[@]}" > "$OUT/build.log" 2>&1
ASR_MODEL=$WORK/model-asr-reduced
ASR_PLAN=$WORK/plan-asr-reduced-cpu-int4
if [ ! -f "$ASR_MODEL/config.json" ]; then
  must synth-checkpoint-asr "${HOST_RK[@]}" synth-checkpoint qwen3-asr --config reduced --seed 0 --out-dir "$ASR_MODEL"
fi
if [ ! -f "$ASR_PLAN/plan.json" ]; then
  must build-asr flock "$LOCK" "${HOST_RK[@]}" build qwen3-asr --model-dir "$ASR_MODEL" --target rk3588 \
    --out-dir "$ASR_PLAN" --decoder cpu-int4 > "$OUT/build-asr.log" 2>&1
fi
"$HOST_PY" - "$OUT/asr.wav" <<'PY'
import sys
import numpy as np
import soundfile as sf
t = np.arange(24000) / 16000  # 1.5 s: a tone over faint noise
wave = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * np.random.default_rng(0).standard_normal(t.size)
sf.write(sys.argv[1], wave.astype(np.float32), 16000)
PY
# a Base plan (the vocoder plan above reused) and a reference recording: voices save on the board
BASE_MODEL=$WORK/model-base-reduced
BASE_PLAN=$WORK/plan-base-reduced-cpu-int4
if [ ! -f "$BASE_MODEL/config.json" ]; then
  must synth-checkpoint-base "${HOST_RK[@]}" synth-checkpoint qwen3-tts --config reduced --variant base --seed 0 \
    --out-dir "$BASE_MODEL"
fi
if [ ! -f "$BASE_PLAN/plan.json" ]; then
  must build-base flock "$LOCK" "${HOST_RK[@]}" build qwen3-tts --model-dir "$BASE_MODEL" --target rk3588 \
    --out-dir "$BASE_PLAN" --vocoder-plan "$PLAN/vocoder/plan.json" --talker cpu-int4 --code-predictor cpu-int4 \
    --int4-block 128 --int4-symmetric --gate warn > "$OUT/build-base.log" 2>&1
fi
rm -rf "$BASE_PLAN/voices"  # saved by this run's board step
"$HOST_PY" - "$OUT/ref.wav" <<'PY'
import sys
import numpy as np
import soundfile as sf
t = np.arange(int(24000 * 1.7)) / 24000  # a voice-like tone: 170 Hz, slowly modulated, faint noise
wave = 0.3 * np.sin(2 * np.pi * 170 * t) * (1 + 0.5 * np.sin(2 * np.pi * 2 * t)) \
    + 0.03 * np.random.default_rng(4).standard_normal(t.size)
sf.write(sys.argv[1], wave.astype(np.float32), 24000)
PY
IN_BASE_PLAN=/rehearsal/${BASE_PLAN#"$WORK"/}/plan.json
IN_BASE_MODEL=/rehearsal/${BASE_MODEL#"$WORK"/}
REF_TEXT="A short reference transcript."
IN_ASR_PLAN=/rehearsal/${ASR_PLAN#"$WORK"/}/plan.json
IN_PLAN=/rehearsal/${PLAN#"$WORK"/}/plan.json
IN_MODEL=/rehearsal/${MODEL#"$WORK"/}
arm() { in_root -- "$VENV/bin/rkspeech" "$@"; }

# ---- aarch64: the board's commands ---------------------------------------------------------------
run_step arm64-doctor arm doctor --plan "$IN_PLAN" > "$OUT/arm64-doctor.txt" 2>&1
run_step arm64-check-board-ort arm check-board --plan "$IN_PLAN" --backend ort "${CHECK_OPTS[@]}" \
  -o "$IN_OUT/arm64-check-ort.json" \
  > "$OUT/arm64-check-ort.txt" 2>&1
for i in "${!TEXTS[@]}"; do
  run_step "arm64-speak-$i" arm speak "${TEXTS[$i]}" --model-dir "$IN_MODEL" --plan "$IN_PLAN" --backend ort \
    --greedy --speaker "$SPEAKER" --max-frames "$FRAMES" -o "$IN_OUT/arm64-$i.wav" \
    --codes-out "$IN_OUT/arm64-$i.npy" --margins-out "$IN_OUT/arm64-$i.margins.npy" > "$OUT/arm64-speak-$i.txt" 2>&1
done
run_step arm64-check-board-asr arm check-board --plan "$IN_ASR_PLAN" --backend ort "${CHECK_OPTS[@]}" \
  -o "$IN_OUT/arm64-check-asr.json" > "$OUT/arm64-check-asr.txt" 2>&1
run_step arm64-transcribe arm transcribe "$IN_OUT/asr.wav" --plan "$IN_ASR_PLAN" --backend ort --max-new-tokens 8 \
  --json > "$OUT/arm64-transcribe.json" 2> "$OUT/arm64-transcribe.txt"
# serve's Qwen3-ASR engine on the board install: the Wyoming server and client in one process
# (a file under the bind-mounted work folder: in_root's command runs in the background, without stdin)
cat > "$WORK/serve-asr.py" <<'PY'
import asyncio, json, sys, wave

from wyoming.asr import Transcribe
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe

from rkspeech.serve.engines import ServePool
from rkspeech.serve.options import ServeOptions
from rkspeech.serve.server import ServerThread
from rkspeech.serve.transcribers import open_qwen3_asr

engines = open_qwen3_asr(sys.argv[1])
engines[0].max_new_tokens = 8  # as the transcribe step
st = ServerThread(ServePool(transcribers=engines), ServeOptions(wyoming="tcp://127.0.0.1:0", http=None)).start()
with wave.open(sys.argv[2]) as w:
    pcm = w.readframes(w.getnframes())

async def talk():
    host, port = st.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
    async with AsyncTcpClient(host, int(port), read_timeout=600) as c:
        await c.write_event(Describe().event())
        info = await c.read_event()
        await c.write_event(Transcribe().event())
        await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
        await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm).event())
        await c.write_event(AudioStop().event())
        event = await c.read_event()
        while event.type != "transcript":
            event = await c.read_event()
        return info.data["asr"][0]["name"], event.data["text"]

try:
    program, text = asyncio.run(talk())
finally:
    st.stop()
print(json.dumps({"program": program, "text": text}))
PY
run_step arm64-serve-asr in_root -- "$VENV/bin/python" /rehearsal/serve-asr.py "$IN_ASR_PLAN" "$IN_OUT/asr.wav" \
  > "$OUT/arm64-serve-asr.json" 2> "$OUT/arm64-serve-asr.txt"
# two sentences generated at once over the plan's lanes graphs (runtime.tts.batch) against one at a time
cat > "$WORK/speak-streams.py" <<'PY'
import json
import sys

from rkspeech.runtime.tts.long_text import stream_sentences
from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

model, plan, text, speaker = sys.argv[1:5]
out = {}
for n in (1, 2):
    with Speaker(model, plan, backend="ort", threads=1, streams=n) as sp:
        codes = []
        opts = sp.default_options(do_sample=False, subtalker_dosample=False, max_new_tokens=9)
        list(stream_sentences(sp, text, options=opts, timing=SpeechTiming(), codes_out=codes, speaker=speaker))
        out[str(n)] = {"streams": sp.streams, "codes": [c.tolist() for c in codes]}
print(json.dumps(out))
PY
run_step arm64-speak-streams in_root -- "$VENV/bin/python" /rehearsal/speak-streams.py "$IN_MODEL" "$IN_PLAN" \
  "The first sentence. And the second one." "$SPEAKER" > "$OUT/arm64-speak-streams.json" 2> "$OUT/arm64-speak-streams.txt"
# a voice saved on the board, spoken there by name and from the recording, then on x86 from the board's file
run_step arm64-voices-save arm voices save narrator --plan "$IN_BASE_PLAN" --model-dir "$IN_BASE_MODEL" \
  --ref-audio "$IN_OUT/ref.wav" --ref-text "$REF_TEXT" > "$OUT/arm64-voices-save.txt" 2>&1
for how in voice ref; do
  if [ "$how" = voice ]; then src=(--voice narrator); else src=(--ref-audio "$IN_OUT/ref.wav" --ref-text "$REF_TEXT"); fi
  run_step "arm64-speak-$how" arm speak "${TEXTS[0]}" --model-dir "$IN_BASE_MODEL" --plan "$IN_BASE_PLAN" \
    --backend ort --greedy --max-frames 16 "${src[@]}" -o "$IN_OUT/arm64-$how.wav" --codes-out "$IN_OUT/arm64-$how.npy" \
    > "$OUT/arm64-speak-$how.txt" 2>&1
done
# the board default (rknn-lite): no NPU under emulation, so one line and exit 2 is the pass
run_step arm64-check-board-rknnlite arm check-board --plan "$IN_PLAN" "${CHECK_OPTS[@]}" > "$OUT/arm64-rknnlite.txt" 2>&1

# ---- x86: the same speak ----------------------------------------------------------------------------
for i in "${!TEXTS[@]}"; do
  run_step "x86-speak-$i" "${HOST_RK[@]}" speak "${TEXTS[$i]}" --model-dir "$MODEL" --plan "$PLAN/plan.json" \
    --backend ort --greedy --speaker "$SPEAKER" --max-frames "$FRAMES" -o "$OUT/x86-$i.wav" \
    --codes-out "$OUT/x86-$i.npy" --margins-out "$OUT/x86-$i.margins.npy" > "$OUT/x86-speak-$i.txt" 2>&1
done
run_step x86-speak-voice "${HOST_RK[@]}" speak "${TEXTS[0]}" --model-dir "$BASE_MODEL" --plan "$BASE_PLAN/plan.json" \
  --backend ort --greedy --max-frames 16 --voice narrator -o "$OUT/x86-voice.wav" --codes-out "$OUT/x86-voice.npy" \
  > "$OUT/x86-speak-voice.txt" 2>&1
run_step x86-transcribe "${HOST_RK[@]}" transcribe "$OUT/asr.wav" --plan "$ASR_PLAN/plan.json" --backend ort \
  --max-new-tokens 8 --json > "$OUT/x86-transcribe.json" 2> "$OUT/x86-transcribe.txt"
uptime > "$OUT/load-end.txt"

# ---- the table -----------------------------------------------------------------------------------
"$HOST_PY" - "$OUT" "$ROOT_TIMES" "${#TEXTS[@]}" <<'PY'
import json, math, sys
from pathlib import Path

import numpy as np
import soundfile as sf

from rkspeech.board.compare import explain, stage_snr

out, root_times, n = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
rows, ok = [], True
def tsv(path):
    return [line.split("\t") for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
times = {r[0]: (float(r[1]), int(r[2])) for r in tsv(out / "times.tsv")}
chk = out / "arm64-check-ort.json"
rep = json.loads(chk.read_text()) if chk.is_file() else {}
snr = stage_snr(rep)  # each stage's worst output SNR aarch64 vs x86: the error a near-tie is judged by
total = whole = ties = 0
for i in range(n):
    a, x = out / f"arm64-{i}.npy", out / f"x86-{i}.npy"
    if not (a.is_file() and x.is_file()):
        rows.append((f"greedy codes, utterance {i}", "missing (see the speak logs)")); ok = False; continue
    ca, cx = np.load(a), np.load(x)
    total += cx.size
    margins = [np.load(p) if p.is_file() else None for p in (out / f"x86-{i}.margins.npy", out / f"arm64-{i}.margins.npy")]
    e = explain(cx, ca, *margins, snr)
    if e["identical"]:
        whole += 1
        verdict = f"identical ({cx.shape[0]} frames x {cx.shape[1]} codebooks)"
    else:  # identical up to a near-tie the measured error explains passes (issue 40: "or the first differing frame and why")
        ties += e["near_tie"]
        ok &= e["near_tie"]
        verdict = (f"differ from frame {e['frame']} codebook {e['codebook']} ({e['stage']}; {len(ca)} frames aarch64 / "
                   f"{len(cx)} x86): {e['why']}")
    wa, _ = sf.read(out / f"arm64-{i}.wav", dtype="int16"); wx, _ = sf.read(out / f"x86-{i}.wav", dtype="int16")
    t = min(len(wa), len(wx)); d = wa[:t].astype(np.int64) - wx[:t].astype(np.int64)
    p = float(np.sum(wx[:t].astype(np.int64) ** 2)); e = float(np.sum(d ** 2))
    snr = "identical" if e == 0 else f"SNR {10 * math.log10(p / e):.1f} dB"
    verdict += f"; wav {snr}, max |diff| {int(np.abs(d).max()) if t else 0} LSB, {int(np.count_nonzero(d))} of {t} samples differ"
    rows.append((f"utterance {i}: aarch64 vs x86", verdict))
if total:
    rows.insert(0, ("greedy codes aarch64 vs x86", f"{whole} of {n} utterances identical end to end, {ties} part at a "
                                                    f"near-tie ({total} codes compared)"))
if rep:
    def worst(g):  # the lowest SNR of a graph's graded outputs (null: identical), and its logits' top-1
        snr = [r["snr_db"] for s in g["steps"] for r in s["outputs"] if r.get("graded")]
        num = [v for v in snr if isinstance(v, (int, float))]
        top = [r["top1"] for s in g["steps"] for r in s["outputs"] if r.get("top1")]
        t = (f", top-1 {sum(round(x['agreement'] * x['rows']) for x in top)}/{sum(x['rows'] for x in top)}"
             if top else "")
        return (f"worst {min(num):.1f} dB" if num else "identical" if snr else "-") + t
    rows.append(("check-board --backend ort (aarch64)", "; ".join(
        f"{g['graph']} {'ok' if g['ok'] else 'FAIL'} ({len(g['steps'])} steps, {worst(g)})" for g in rep["graphs"])))
    ok &= bool(rep.get("ok"))
lite = (out / "arm64-rknnlite.txt").read_text().strip().splitlines() if (out / "arm64-rknnlite.txt").is_file() else []
lite = [ln for ln in lite if not ln.startswith(("... ", "done: "))]  # rkspeech's own progress lines
rc = times.get("arm64-check-board-rknnlite", (0, -1))[1]
rows.append(("check-board rknn-lite (aarch64)", f"exit {rc}, {len(lite)} line(s) besides progress: "
             f"{lite[-1][:150] if lite else ''}..."))
ok &= rc == 2 and len(lite) == 1
def transcript(name):
    try:
        return json.loads((out / name).read_text())["files"][0]
    except (OSError, ValueError, KeyError, IndexError):
        return None
ta, tx = transcript("arm64-transcribe.json"), transcript("x86-transcribe.json")
if ta is None or tx is None:
    rows.append(("Qwen3-ASR transcribe --plan (aarch64 vs x86)", "missing (see arm64-/x86-transcribe.txt)")); ok = False
else:
    ia, ix = ta["token_ids"][0], tx["token_ids"][0]
    first = next((k for k, (p, q) in enumerate(zip(ia, ix)) if p != q), None)
    same = ia == ix
    verdict = ("token ids identical" if same else
               f"token ids differ from token {first if first is not None else min(len(ia), len(ix))} (int4 "
               "decoder, onnxruntime versions differ)")
    rows.append(("Qwen3-ASR transcribe --plan (aarch64 vs x86)", f"{verdict}; aarch64 text {ta['text'][:40]!r}"))
    ok &= bool(ta["text"])
try:
    served = json.loads((out / "arm64-serve-asr.json").read_text())
except (OSError, ValueError):
    served = None
if served is None or ta is None:
    rows.append(("serve --asr-plan, Wyoming (aarch64)", "missing (see arm64-serve-asr.txt)")); ok = False
else:
    same = served["text"] == ta["text"]
    rows.append(("serve --asr-plan, Wyoming (aarch64)", f"{served['program']}: transcript "
                 + ("= transcribe --plan's" if same else f"DIFFERS from transcribe --plan's: {served['text'][:40]!r}")))
    ok &= same
asr_chk = out / "arm64-check-asr.json"
asr_rep = json.loads(asr_chk.read_text()) if asr_chk.is_file() else {}
rows.append(("check-board --backend ort, Qwen3-ASR plan (aarch64)", "; ".join(
    f"{g['graph']} {'ok' if g.get('ok') else 'FAILED'}" for g in asr_rep.get("graphs", [])) or "missing"))
ok &= bool(asr_rep.get("ok"))
voice = {k: np.load(out / f"{k}.npy") for k in ("arm64-voice", "arm64-ref", "x86-voice") if (out / f"{k}.npy").is_file()}
if len(voice) < 3:
    rows.append(("voices save + speak --voice (aarch64, x86)", "missing (see arm64-voices-save.txt, *-speak-voice.txt)"))
    ok = False
else:
    same = np.array_equal(voice["arm64-voice"], voice["arm64-ref"])
    cross = np.array_equal(voice["arm64-voice"], voice["x86-voice"])
    rows.append(("voices save + speak --voice (aarch64, x86)",
                 f"aarch64 --voice {'=' if same else 'DIFFERS FROM'} --ref-audio --ref-text "
                 f"({voice['arm64-ref'].shape[0]} frames); x86 speaking the board's saved voice: "
                 + ("identical" if cross else "differs (int4 stages, onnxruntime versions differ)")))
    ok &= same
try:
    st = json.loads((out / "arm64-speak-streams.json").read_text())
except (OSError, ValueError):
    st = None
if st is None:
    rows.append(("speak, 2 sentences at once (aarch64)", "missing (see arm64-speak-streams.txt)")); ok = False
else:
    same = st["1"]["codes"] == st["2"]["codes"] and st["2"]["streams"] == 2
    rows.append(("speak, 2 sentences at once (aarch64)", f"{st['2']['streams']} streams: greedy codes "
                 + ("= one at a time" if same else "DIFFER from one at a time")
                 + f" ({sum(len(c) for c in st['1']['codes'])} frames)"))
    ok &= same
doc = (out / "arm64-doctor.txt").read_text().splitlines() if (out / "arm64-doctor.txt").is_file() else []
rows.append(("doctor --plan (aarch64)", f"exit {times.get('arm64-doctor', (0, -1))[1]}, {len(doc)} lines"))
print(f"board rehearsal, {out}\nload at start: {(out / 'load-start.txt').read_text().strip()}\n"
      f"load at end:   {(out / 'load-end.txt').read_text().strip()}\n")
print("| check | result |\n|---|---|")
for k, v in rows:
    print(f"| {k} | {v} |")
print("\n| step | seconds | exit |\n|---|---|---|")
for name, sec, rc, *when in tsv(root_times):
    print(f"| {name} (root, {when[0] if when else ''}) | {float(sec):.1f} | {rc} |")
for name, (sec, rc) in times.items():
    print(f"| {name} | {sec:.1f} | {rc} |")
sys.exit(0 if ok else 1)
PY
