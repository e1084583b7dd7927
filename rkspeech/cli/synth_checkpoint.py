"""``rkspeech synth-checkpoint qwen3-tts-vocoder|qwen3-tts|qwen3-asr``: a synthetic checkpoint in the real format."""

from __future__ import annotations

import argparse

from rkspeech.cli.vocabulary import Flags


def register(subparsers) -> None:
    p = subparsers.add_parser("synth-checkpoint", help="write a synthetic checkpoint in the real on-disk format")
    models = p.add_subparsers(dest="model_kind", metavar="MODEL")
    v = models.add_parser("qwen3-tts-vocoder", help="Qwen3-TTS 12 Hz speech tokenizer (decoder weights)")
    f = Flags(v, "synth-checkpoint qwen3-tts-vocoder")
    f.add(None, "--config", choices=("published", "reduced"), default="reduced")
    f.add(None, "--seed", type=int, default=0)
    f.add(None, "--out-dir", writes="folder", required=True, metavar="DIR", help="model root to write (gets speech_tokenizer/)")
    f.add(None, "--no-encoder-keys", action="store_true", help="write decoder keys only")
    v.set_defaults(func=run)
    t = models.add_parser("qwen3-tts", help="full Qwen3-TTS 12 Hz model root (talker, code predictor, speaker "
                          "encoder, text tokenizer, speech_tokenizer/)")
    f = Flags(t, "synth-checkpoint qwen3-tts")
    f.add(None, "--config", choices=("published", "reduced", "published-1.7b", "reduced-1.7b"), default="reduced",
          help="published: the 0.6B size; published-1.7b: the 1.7B; reduced / reduced-1.7b: their structure, "
               "small (default reduced)")
    f.add(None, "--variant", choices=("base", "custom-voice", "voice-design"), default="custom-voice")
    f.add(None, "--seed", type=int, default=0)
    f.add(None, "--out-dir", writes="folder", required=True, metavar="DIR", help="model root to write")
    f.add(None, "--trained", action="store_true",
          help="train the reduced talker and code predictor for a few CPU minutes on a fixed text -> codes "
               "rule, so they are confident and stop by themselves (custom-voice; cached under "
               "~/.cache/rkspeech; docs/confident-checkpoint.md)")
    f.add(None, "--massive-activations", action="store_true",
          help="give the code predictor the published 0.6B's massive activation: a few ffn_down input "
               "channels peak at ~2x the fp16 maximum on ordinary text, the fp32 model unchanged "
               "(combinable with --trained; docs/massive-activations.md)")
    t.set_defaults(func=run_tts)
    a = models.add_parser("qwen3-asr", help="Qwen3-ASR model root (audio encoder, text model, tokenizer, processor)")
    f = Flags(a, "synth-checkpoint qwen3-asr")
    f.add(None, "--config", choices=("reduced", "published", "published-1.7b"), default="reduced")
    f.add(None, "--seed", type=int, default=0)
    f.add(None, "--out-dir", writes="folder", required=True, metavar="DIR", help="model root to write")
    f.add(None, "--trained", action="store_true",
          help="train the reduced encoder and decoder for about half a CPU minute on synthetic two-tone "
               "clips, so that greedy transcripts are confident and stop by themselves (cached under "
               "~/.cache/rkspeech; docs/qwen3-asr.md, Accuracy gate)")
    a.set_defaults(func=run_asr)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args: argparse.Namespace) -> int:
    from rkspeech.core import progress
    from rkspeech.core.atomic import check_writable
    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint

    check_writable(args.out_dir, what="output", folder=True)
    with progress.stage(f"synthetic {args.config} checkpoint (seed {args.seed})"):
        folder = write_checkpoint(args.out_dir, args.config, args.seed, with_encoder_keys=not args.no_encoder_keys)
    print(folder)
    return 0


def run_tts(args: argparse.Namespace) -> int:
    from rkspeech.core import progress
    from rkspeech.core.atomic import check_writable
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    check_writable(args.out_dir, what="output", folder=True)
    if getattr(args, "trained", False):
        return _run_trained(args)
    with progress.stage(f"synthetic {args.config} {args.variant} Qwen3-TTS model (seed {args.seed})"):
        root = write_tts_checkpoint(args.out_dir, args.config, args.variant, args.seed)
    _massive(args, root)
    print(root)
    return 0


def run_asr(args: argparse.Namespace) -> int:
    from rkspeech.core import progress
    from rkspeech.core.atomic import check_writable
    from rkspeech.models.qwen3_asr.synthetic_asr import write_asr_checkpoint

    check_writable(args.out_dir, what="output", folder=True)
    if getattr(args, "trained", False):
        from rkspeech.models.qwen3_asr.trained import default_cache_dir, write_trained_asr_checkpoint

        with progress.stage(f"trained synthetic {args.config} Qwen3-ASR model (seed {args.seed})"):
            root, record = write_trained_asr_checkpoint(args.out_dir, args.config, args.seed,
                                                        cache_dir=default_cache_dir(), log=progress.info)
        how = f"from the cache {record['cached']}" if record.get("cached") else f"trained in {record['seconds']} s"
        progress.info(f"{how}; final loss {record['loss_last20']}")
        print(root)
        return 0
    with progress.stage(f"synthetic {args.config} Qwen3-ASR model (seed {args.seed})"):
        root = write_asr_checkpoint(args.out_dir, args.config, args.seed)
    print(root)
    return 0


def _massive(args: argparse.Namespace, root) -> None:
    if not getattr(args, "massive_activations", False):
        return
    from rkspeech.core import progress
    from rkspeech.models.qwen3_tts.massive_activations import write_massive_activations

    with progress.stage("massive activations in the code predictor"):
        r = write_massive_activations(root)
    progress.info(f"code predictor layer {r['layer']} ffn_down input channels {r['channels']} scaled by "
                  f"{', '.join(f'{s:.0f}' for s in r['scales'])} (the median calibration text peaks at "
                  f"{r['ratio']}x 65504)")


def _run_trained(args: argparse.Namespace) -> int:
    from rkspeech.core import progress
    from rkspeech.models.qwen3_tts.trained import default_cache_dir, write_trained_tts_checkpoint

    with progress.stage(f"trained synthetic {args.config} {args.variant} Qwen3-TTS model (seed {args.seed})"):
        root, record = write_trained_tts_checkpoint(args.out_dir, args.config, args.variant, args.seed,
                                                    cache_dir=default_cache_dir(), log=progress.info)
    how = f"from the cache {record['cached']}" if record.get("cached") else f"trained in {record['seconds']} s"
    progress.info(f"{how}; final losses: talker {record['talker_loss_last50']}, code predictor "
                  f"{record['code_predictor_loss_last50']}")
    _massive(args, root)
    print(root)
    return 0
