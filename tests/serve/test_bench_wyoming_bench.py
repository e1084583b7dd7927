"""``benchmarks/bench_wyoming_bench.py`` reads wyoming-bench's own report (it has no JSON output):
the per-mode stat rows, the ``-v`` lines, every failure or skip line, and the side-by-side
figures; on text in the tool's exact format (wyoming-bench 2026.10.0 against ``rkspeech serve``,
trimmed).  No server, no timing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_wyoming_bench.py"

STT = """\
=== 127.0.0.1:42695 (rkspeech-whisper) ===
[non_streaming] r0 clip0 total=1056ms ttft=1055ms WER=6.2% audio=5.28s
[streaming] r0 clip1 total=1246ms ttft=n/a WER=16.7% audio=6.00s

Server: 127.0.0.1:42695 (rkspeech-whisper)
------------------------------------------------------------------------------
[non_streaming] ok=2 fail=0
  metric             min      mean    median       p95       max
  Total (ms)      1056.0    1198.9    1198.9    1327.4    1341.7
  TTFT (ms)       1055.2    1198.1    1198.1    1326.8    1341.1
  RTF (x)           0.20      0.21      0.21      0.22      0.22
  Audio        mean=5.64s input
  Accuracy     WER=11.8%  CER=5.6%  SAR=0.0%
[streaming] ok=2 fail=0
  metric             min      mean    median       p95       max
  Total (ms)      1222.7    1234.1    1234.1    1244.4    1245.6
  RTF (x)           0.21      0.22      0.22      0.23      0.23

==============================================================================
Summary (lower is better)
==============================================================================

[non_streaming]
  server                              ok      WER      CER     SAR  Total_mean   TTFT_p95  RTF_mean
  127.0.0.1:42695 (rkspeech-whisper)   2    11.8%     5.6%    0.0%      1198.9     1326.8      0.21
"""

TTS = """\
=== 127.0.0.1:42695 (rkspeech-speech) ===
[non_streaming] r0 sent=1 ttft=129ms total=437ms audio=1.60s bytes=76800 cycles=1
[non_streaming] r0 sent=2 ttft=202ms total=557ms audio=1.60s bytes=76800 cycles=1
[non_streaming] r1 sent=1 ttft=131ms total=441ms audio=1.60s bytes=76800 cycles=1
[non_streaming] r1 FAIL: server error (bad-request): this custom-voice checkpoint needs a speaker
  [streaming] NOT SUPPORTED by 127.0.0.1:42695 (no audio in response to synthesize-*); skipping streaming mode

Server: 127.0.0.1:42695 (rkspeech-speech)
------------------------------------------------------------------------------
[non_streaming] ok=3 fail=1
  metric             min      mean    median       p95       max
  TTFT (ms)        128.7     158.7     152.3     194.8     201.6
  Total (ms)       437.3     515.1     522.3     575.4     578.6
  RTF (x)            n/a       n/a       n/a       n/a       n/a
  Audio        mean=1.60s (1600 ms), 76800 bytes
"""


def _bench():
    spec = importlib.util.spec_from_file_location("bench_wyoming_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_its_report_is_read_into_figures_runs_and_problems():
    bench = _bench()
    stt, tts = bench.parse_report(STT), bench.parse_report(TTS)
    assert stt["modes"]["non_streaming"]["metrics"]["total_ms"] == {
        "min": 1056.0, "mean": 1198.9, "median": 1198.9, "p95": 1327.4, "max": 1341.7}
    assert stt["modes"]["non_streaming"]["accuracy"] == {"wer": 0.118, "cer": 0.056, "sar": 0.0}
    assert stt["modes"]["non_streaming"]["audio_mean_s"] == 5.64
    assert set(stt["modes"]["streaming"]["metrics"]) == {"total_ms", "rtf"}  # the summary table is not a block
    assert stt["runs"][1] == {"mode": "streaming", "round": 0, "sample": "clip1", "total_ms": 1246, "ttft_ms": None,
                              "wer": 0.167, "audio_s": 6.0}
    assert stt["problems"] == []
    assert tts["modes"]["non_streaming"]["ok"] == 3 and tts["modes"]["non_streaming"]["fail"] == 1
    assert tts["modes"]["non_streaming"]["metrics"]["rtf"]["median"] is None
    assert [r["sentences"] for r in tts["runs"]] == [1, 2, 1]
    assert len(tts["problems"]) == 2 and "needs a speaker" in tts["problems"][0]
    assert tts["problems"][1].startswith("[streaming] NOT SUPPORTED")


def test_side_by_side_pairs_its_medians_with_bench_serve_rows():
    bench = _bench()
    ours = {"wyoming asr": {"final_s": {"p50": 0.9, "p95": 1.0}, "first_s": {"p50": 0.8, "p95": 0.9}},
            "wyoming tts": {"final_s": {"p50": 0.5, "p95": 0.6}, "first_s": {"p50": 0.2, "p95": 0.3}}}
    rows = bench.side_by_side(bench.parse_report(STT), bench.parse_report(TTS), ours)
    assert [(r["wyoming_bench_s"], r["bench_serve_s"]) for r in rows] == [
        (1.199, 0.9),  # STT non-streaming Total median
        (None, 0.8),  # no streaming TTFT row in its block
        (0.13, 0.2),  # TTS: the median of the one-sentence runs only (129, 131 ms)
        (0.439, 0.5),
    ]
    assert bench.side_by_side(None, None, {})[0] == {"what": rows[0]["what"], "wyoming_bench_s": None,
                                                     "bench_serve_s": None}


def test_arguments():
    args = _bench().build_parser().parse_args(["--asr-model-dir", "a", "--asr-model-dir", "b", "--rounds", "1",
                                               "--ours-seconds", "0", "--json-out", "x.json"])
    assert (args.asr_model_dir, args.rounds, args.ours_seconds, args.mode) == (["a", "b"], 1, 0.0, "both")
