"""``rkspeech estimate --plan plan.json``: the flags and the printout of the whole-plan estimate.

Not a command of its own: ``cli/estimate.py`` adds these flags to its parser and hands a
``--plan`` run here.  Standard library only at module level.
"""

from __future__ import annotations

import argparse


def add_arguments(f) -> None:
    """The ``--plan`` flags, through the command's ``cli.vocabulary.Flags``."""
    from rkspeech.cli.vocabulary import INPUT

    plan = "whole text-to-speech plan (--plan)"
    f.add(INPUT, "--plan", metavar="plan.json",
          help="estimate every stage of this plan (talker, code predictor, vocoder) and the pipeline; a Qwen3-ASR "
               "plan: its encoder windows and decoder, per utterance (3 s, 10 s)")
    f.add(plan, "--target", "--chip", choices=("rk3588", "rk3576"), default=None,
          help="the board (default: the plan's target, else rk3588)")
    f.add(plan, "--dispatch-us", type=float, default=None,
          help="NPU dispatch per compiled layer, us (default 19: nsbb/rknn-stt, RK3588)")
    f.add(plan, "--a76-gbps", type=float, default=None,
          help="memory bandwidth of every CPU stage, GB/s (default: by the threads each runs with, public "
               "RK3588 STREAM: 1 A76 ~12, 4 A76 ~20 GB/s, 2-3 interpolated)")
    f.add(plan, "--threads", dest="threads", type=int, low=None, default=None, metavar="N",
          help="price the CPU stages as run with N threads (speak --threads N; default: each stage's plan "
               "threads, else the runtime's default 2)")
    f.add(plan, "--shared-ddr-gbps", type=float, default=None,
          help="what CPU and NPU stream together, GB/s (default 22)")
    f.add(plan, "--kv-read", choices=("capacity", "position"), default=None,
          help="KV bytes a talker step reads: the whole capacity (fixed-shape graph, default) "
               "or the filled slots averaged over the utterance")
    f.add(plan, "--prompt-tokens", type=int, default=None, help="prompt positions (default 40)")
    f.add(plan, "--utterance-s", type=float, default=None, help="utterance length, s (default 10)")
    f.add(plan, "--streams", default=None, metavar="N[,N...]",
          help="also price N streams at once (speak --streams, serve --tts-streams): the talker and code "
               "predictor steps batched over the plan's lanes graphs, the rest per stream; per-stream "
               "real-time factor, aggregate audio seconds per second, first audio (e.g. 1,2,4,8)")


def _ms(v: float) -> str:
    return f"{v:,.2f}" if v >= 1 else f"{v:.3g}"


def _fmt_bytes(b: float) -> str:
    return f"{b / 1e9:,.2f} GB" if b >= 1e9 else f"{b / 1e6:,.1f} MB"


def run(args: argparse.Namespace) -> int:
    import sys
    from dataclasses import fields, replace

    from rkspeech.core.atomic import write_json
    from rkspeech.core.errors import RkspeechError
    from rkspeech.core.reporting import print_table
    from rkspeech.estimate.plan_time import PlanAssumptions, estimate_plan, peer_check

    if args.report:
        from rkspeech.core.atomic import check_writable

        check_writable(args.report, what="report")
    chip = args.target
    if chip is None:
        from rkspeech.estimate.plan_inputs import plan_target

        chip = plan_target(args.plan) or "rk3588"
    given = {"chip": chip, "layer_dispatch_us": args.dispatch_us, "cpu_gbps": args.a76_gbps,
             "cpu_threads": getattr(args, "threads", None),
             "ddr_shared_gbps": args.shared_ddr_gbps, "kv_read": args.kv_read,
             "prompt_tokens": args.prompt_tokens, "utterance_s": args.utterance_s}
    # the single-graph flags that mean the same here, when changed from their defaults
    defaults = {f.name: f.default for f in fields(PlanAssumptions)}
    for flag, name in (("npu_mhz", "npu_mhz"), ("ddr_gbps", "npu_ddr_gbps"), ("npu_efficiency", "npu_efficiency")):
        v = getattr(args, flag, None)
        if v is not None and v != defaults[name]:
            given[name] = v
    a = replace(PlanAssumptions(), **{k: v for k, v in given.items() if v is not None}).check()
    from rkspeech.plan.asr import is_asr_plan

    asr = is_asr_plan(args.plan)
    streams = _stream_counts(getattr(args, "streams", None))
    if streams and asr:
        raise RkspeechError("--streams prices a text-to-speech plan's batched generation; this is a Qwen3-ASR plan")
    if asr:
        from rkspeech.estimate.asr_time import estimate_asr_plan

        rep = estimate_asr_plan(args.plan, a)
    else:
        rep = estimate_plan(args.plan, a, streams=streams)
    if args.report:
        write_json(args.report, rep)
    if getattr(args, "json", False):
        import json

        print(json.dumps(rep, indent=1))
        return 0
    if asr:
        return _print_asr(rep, a)
    print_table("assumptions (no board here: every figure below is an estimate)",
                [(r["name"], r["value"], r["source"]) for r in rep["assumption_table"]],
                headers=("assumption", "value", "source"))
    rows = []
    for r in rep["stages"]:
        how = (f"{r['layers']} layers: table {r['layer_table_ms']:.2f} + dispatch {r['dispatch_ms']:.2f} ms"
               if r["unit"] == "npu" else
               f"{r['variant']}, {_fmt_bytes(r['bytes_per_call'])} a call, {r['bound']}-bound, "
               f"{r['threads']} thread(s) at {r['cpu_gbps']:.1f} GB/s")
        rows.append((r["stage"], r["unit"], _ms(r["ms_per_call"]), f"{r['calls_per_audio_s']:,.3g}",
                     _ms(r["ms_per_audio_s"]), how))
    print_table("per stage", rows, headers=("stage", "unit", "ms / call", "calls / audio s", "ms / audio s",
                                            "how"))
    t = rep["time_to_first_audio"]
    summary = [(f"{u.upper()} (stages add up)", f"{v['ms_per_audio_s']:,.1f} ms per audio s")
               for u, v in rep["units"].items()]
    summary += [("shared DDR floor", f"{rep['ddr_floor_ms_per_audio_s']:,.1f} ms per audio s "
                                     f"({_fmt_bytes(rep['bytes_per_audio_s'])} per audio s)"),
                ("steady state (units overlap: max)", f"{rep['steady_ms_per_audio_s']:,.1f} ms per audio s"),
                ("real-time factor", f"{rep['rtf']:.3f}"),
                ("limited by", f"{rep['limiting_stage']} (unit: {rep['limiting_unit']})")]
    if t:
        summary.append(("time to first audio", (f"{_ms(t['ms'])} ms = prefill {_ms(t['prefill_ms'])} + "
                                                f"{t['frames']} frames x {_ms(t['per_frame_ms'])} + "
                                                f"{t['vocoder_stage']} {_ms(t['vocoder_step_ms'])}")))
    print_table("whole plan (estimate)", summary)
    print_table("beside public board figures (theirs, measured)", peer_check(rep))
    top = rep["sensitivity"][:3]
    print_table("most sensitive to (each assumption 1.2x worse)",
                [(s["assumption"], f"RTF {s['rtf']:.3f} ({100 * s['change']:+.0f} %)") for s in top])
    f = rep.get("npu_board_factor_check")
    if f and "npu" in f["units"]:
        print_table(f"if the NPU runs {f['factor']:g}x slower than the layer table (docs/estimate.md calibration)",
                    [("real-time factor", f"{f['rtf']:.3f}, limited by {f['limiting_stage']}")])
    sp = rep.get("speak_schedule")
    if sp:
        print_table("as speak runs it (small vocoder steps after the first: the utterance ends one small step "
                    "after its last frame)",
                    [("vocoder", f"{sp['vocoder_ms_per_audio_s']:,.1f} ms per audio s"),
                     ("real-time factor", f"{sp['rtf']:.3f}, limited by {sp['limiting_stage']}")])
    if rep.get("streams"):
        _print_streams(rep["streams"], print_table)
    for n in rep["notes"] + (rep.get("streams") or {}).get("notes", []):
        print(f"note: {n}", file=sys.stderr)
    return 0


def _stream_counts(text: str | None) -> list[int] | None:
    """``--streams 1,2,4,8`` -> [1, 2, 4, 8]; one line on anything else."""
    from rkspeech.core.errors import RkspeechError

    if text is None:
        return None
    try:
        counts = [int(v) for v in text.split(",")]
    except ValueError:
        counts = []
    if not counts or any(n < 1 for n in counts):
        raise RkspeechError(f"--streams must be whole numbers >= 1 separated by commas (1,2,4,8), got {text!r}")
    return counts


def _print_streams(st: dict, print_table) -> None:
    rows = []
    for r in st["rows"]:
        how = ("one at a time" if not r["batched"] and r["streams"] > 1 else
               "batched" + (" (rebuild with --streams N)" if r["rebuild"] else "") if r["streams"] > 1 else "-")
        gain = f"{r['gain_vs_one']:.2f}x" if r["gain_vs_one"] else "-"
        rows.append((str(r["streams"]), f"{r['rtf_per_stream']:.3f}", f"{r['audio_s_per_s']:.2f}", gain,
                     _ms(r["first_audio_ms"]) if r["first_audio_ms"] is not None else "-",
                     f"{r['limiting_stage']} ({r['limiting_unit']})", how))
    print_table(f"N streams at once (estimate; the plan's lanes graphs serve {st['plan_lanes']})", rows,
                headers=("streams", "real-time factor per stream", "audio s per s (all)", "vs one",
                         "first audio, ms", "limited by", "how"))
    if st["saturates_at"]:
        print_table("where more streams stop adding audio",
                    [("shared DDR or NPU limits from", f"{st['saturates_at']} streams")])


def _print_asr(rep: dict, a) -> int:
    """A Qwen3-ASR plan's estimate: per graph one call, per utterance the parts and the real-time factor."""
    import sys

    from rkspeech.core.reporting import print_table

    x = rep["assumptions"]
    print_table("assumptions (no board here: every figure below is an estimate)", [
        ("NPU", f"the layer table + {a.layer_dispatch_us:g} us dispatch a layer (ideal); x{x['npu_board_factor']:g} "
                "(calibrated: the one public point, docs/estimate.md)"),
        ("CPU", f"{x['threads']} thread(s) at {x['cpu_gbps']:.1f} GB/s (public RK3588 STREAM)"),
        ("prompt", f"{x['prompt_overhead']} positions + 13 audio tokens a second (this plan's tokenizer)"),
        ("transcript", f"{x['language_tokens']} tokens of language tag + {x['tokens_per_s']:g} tokens a second of "
                       "speech + an end token")])
    rows = [(f"encoder window k{k}", w["unit"], f"{_ms(w['ideal_ms'])} .. {_ms(w['calibrated_ms'])}")
            for k, w in rep["encoder"].items()]
    rows += [(f"decoder {r} ({rep['decoder_placement']})", "cpu",
              f"{_ms(g['ms'])} ({_fmt_bytes(g['bytes'])} a call)") for r, g in rep["decoder"].items()]
    print_table("per call", rows, headers=("graph", "unit", "ms (ideal .. calibrated)"))
    rows = [(f"{u['audio_s']:g} s", f"{u['rtf']['ideal']:.3f} .. {u['rtf']['calibrated']:.3f}",
             f"{u['end_of_speech_to_transcript_s']['ideal']:.2f} .. {u['end_of_speech_to_transcript_s']['calibrated']:.2f}",
             f"{u['end_of_speech_to_first_word_s']['ideal']:.2f} .. {u['end_of_speech_to_first_word_s']['calibrated']:.2f}")
            for u in rep["utterances"]]
    print_table("per utterance (estimate, ideal .. calibrated)", rows,
                headers=("audio", "real-time factor", "end of speech -> transcript, s", "-> first word, s"))
    print_table("beside public board figures (theirs, measured)",
                [(k, f"{v['value']:g} ({v['source']})") for k, v in rep["peers"].items()])
    for n in rep["notes"]:
        print(f"note: {n}", file=sys.stderr)
    return 0

