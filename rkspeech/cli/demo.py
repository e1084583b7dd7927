"""``rkspeech demo``: the main job on the embedded default checkpoint.

Writes a synthetic Qwen3-TTS speech tokenizer (real on-disk format; real weights cannot be
downloaded here) and runs ``rkspeech build qwen3-tts-vocoder`` on it: export + checks, lint,
conversion for the target, container inspection, simulator verification, plan.json.
"""

from __future__ import annotations

import argparse

from rkspeech.core.targets import DEFAULT_TARGET, TARGETS
from rkspeech.stepgraph.formulations import CHOICES, DEFAULT_FORMULATION


def register(subparsers) -> None:
    p = subparsers.add_parser("demo", help="build the vocoder from an embedded synthetic checkpoint, end to end")
    p.add_argument("--config", choices=("published", "reduced"), default="published",
                   help="synthetic checkpoint size (published: ~15-20 min, 8.6 GB peak at B=16; reduced: a few min)")
    p.add_argument("--out", default="out/demo", help="output folder (default out/demo)")
    p.add_argument("--target", default=DEFAULT_TARGET, choices=TARGETS)
    p.add_argument("--codes-length", "-B", type=int, default=16,
                   help="main step B (default 16; 64 needs ~21 GB to convert the published config)")
    p.add_argument("--first-length", type=int, default=4)
    p.add_argument("--skip-verify", action="store_true")
    p.add_argument("--formulation", choices=CHOICES, default=DEFAULT_FORMULATION)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rkspeech.cli.build_vocoder import print_summary
    from rkspeech.core import progress
    from rkspeech.models.qwen3_tts.synthetic import write_checkpoint
    from rkspeech.pipelines.vocoder_build import VocoderBuildOptions, build_vocoder

    from rkspeech.core.atomic import check_writable

    out = check_writable(args.out, what="output", folder=True)
    ckpt = out / f"checkpoint-{args.config}"
    if not (ckpt / "speech_tokenizer" / "model.safetensors").is_file():
        with progress.stage(f"synthetic {args.config} checkpoint"):
            write_checkpoint(ckpt, args.config, seed=0)
    build_dir = out / f"build-{args.config}-{args.formulation}-{args.target}-B{args.codes_length}"
    print_summary(build_vocoder(VocoderBuildOptions(
        out=build_dir, model_dir=ckpt, target=args.target, codes_length=args.codes_length,
        first_length=args.first_length, skip_verify=args.skip_verify, formulation=args.formulation)))
    return 0
