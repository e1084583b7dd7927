"""Voice cloning's two graphs for a Base root: the speaker encoder and the speech tokenizer's encoder.

``build qwen3-tts`` on a Base checkpoint runs two more resumable stages (``pipelines.resumable``):

* ``speaker_encoder``: the checkpoint's ECAPA-TDNN (``models.qwen3_tts.speaker_encoder``) as the
  graph ``mel [1, frames, 128] -> xvector`` (``export.clone_onnx``, any number of frames), checked:
  over :data:`CHECK_SECONDS` reference clips, the x-vector the runtime computes (numpy mel, the
  graph on onnxruntime: ``runtime.tts.clone_encoders.GraphSpeakerEncoder``) against the torch
  path's (torch mel, the torch module: ``TTSModel.speaker_embedding``), max-abs and cosine
  against ``core.thresholds`` ``CLONE_XVECTOR_MAX_ABS`` / ``CLONE_XVECTOR_MIN_COSINE``;
* ``speech_encoder``: the speech tokenizer's encoder (``models.qwen3_tts.speech_encoder``) as the
  graph ``audio, length -> codes``, checked: the same clips' codes through the graph and through
  the torch module, identical (``CLONE_CODES_MAX_DIFFERENT`` = 0).

Both are placed ``cpu-fp32`` (onnxruntime): they run once per request, at the reference's length,
which a fixed-shape .rknn cannot take (docs/tts-build.md "Voice cloning").  A check that fails
removes the graph and stops the build in one line.  The plan gets one stage record each
(``plan.sections.CLONE_ROLES``); the report the figures.

Each check also records the graph's golden replay (``runtime.golden``; ``X.onnx`` ->
``X.golden.npz`` beside it, listed in the stage record's ``goldens`` as role ``encoder``), which
``rkspeech check-board`` replays on a board's onnxruntime: the check's first
:data:`GOLDEN_CALLS` call(s) on onnxruntime (``core.capture.RecordingRunner``), the shortest clip
(0.55 s), its feed as the runtime wrapper built it and this host's outputs.  Sizes:
docs/board.md.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rkspeech.core.errors import RkspeechError
from rkspeech.plan.integrity import golden_path

#: reference clips of the build's checks, seconds (a short one, a typical one, one past the speech
#: encoder's 10 s of 25 Hz transformer frames)
CHECK_SECONDS = (0.55, 3.3, 10.7)
CHECK_SEED = 20261205
#: bumped when what a stage builds or checks changes, so a resumed build redoes it
CLONE_VERSION = 2  # 2: the golden replay of each graph (2026-12-06)
#: calls of a check kept as the graph's golden (the first: the shortest clip, the smallest file)
GOLDEN_CALLS = 1


def check_clips(sample_rate: int) -> list[np.ndarray]:
    """Deterministic reference clips: a voiced-like tone stack, an amplitude envelope, some noise."""
    rng = np.random.default_rng(CHECK_SEED)
    out = []
    for k, seconds in enumerate(CHECK_SECONDS):
        t = np.arange(int(seconds * sample_rate)) / sample_rate
        f0 = 110 + 40 * k
        voiced = sum(np.sin(2 * np.pi * f0 * h * t) / h for h in range(1, 6))
        envelope = 0.5 + 0.5 * np.sin(2 * np.pi * (2 + k) * t) ** 2
        out.append((0.2 * voiced * envelope + 0.02 * rng.standard_normal(t.size)).astype(np.float32))
    return out


def build_speaker_encoder(stages, files, model, folder: Path) -> dict:
    """``{"path", "contract", "record"}``: the speaker encoder graph of the Base root ``files``
    (``model``: the build's ``LazyTTSModel``, loaded only when the stage runs)."""
    import onnxruntime

    from rkspeech.core.thresholds import CLONE_XVECTOR_MAX_ABS, CLONE_XVECTOR_MIN_COSINE

    folder = Path(folder)
    dst = folder / "speaker_encoder.onnx"

    def work():
        from rkspeech.contracts.clone import SpeakerEncoderContract
        from rkspeech.export.clone_onnx import export_speaker_encoder_onnx
        from rkspeech.models.qwen3_tts.tts_checkpoint import read_tts_config
        from rkspeech.runtime.tts.clone_encoders import speaker_fingerprint
        from rkspeech.runtime.tts.host_weights import SafetensorsFile

        cfg = read_tts_config(files).speaker_encoder
        tts = model.get()
        enc = tts.net.speaker_encoder
        if enc is None:
            raise RkspeechError(f"{files.root}: this Base checkpoint has no speaker encoder weights")
        contract = SpeakerEncoderContract(mel_dim=cfg.mel_dim, enc_dim=cfg.enc_dim, sample_rate=cfg.sample_rate,
                                          fingerprint=speaker_fingerprint(SafetensorsFile(files.weights)))
        folder.mkdir(parents=True, exist_ok=True)
        export_speaker_encoder_onnx(enc, contract, dst)
        calls: tuple[list, list] = ([], [])
        check = _check_speaker(dst, tts, cfg, record=calls)
        bad = []
        if not check["max_abs_diff"] <= CLONE_XVECTOR_MAX_ABS:
            bad.append(f"max-abs {check['max_abs_diff']:.3g} > {CLONE_XVECTOR_MAX_ABS:g}")
        if not check["cosine_min"] >= CLONE_XVECTOR_MIN_COSINE:
            bad.append(f"cosine {check['cosine_min']:.8f} < {CLONE_XVECTOR_MIN_COSINE}")
        if bad:
            _remove(dst)
            raise RkspeechError(f"the speaker encoder graph does not give the torch path's x-vectors ({', '.join(bad)} "
                                f"over {len(CHECK_SECONDS)} reference clips); nothing written")
        return {"onnx": str(dst), "bytes": dst.stat().st_size, "contract": contract.to_dict(), "check": check,
                "golden": _save_golden(dst, contract, calls)}

    args = {"version": CLONE_VERSION, "ort": onnxruntime.__version__, "seconds": CHECK_SECONDS,
            "marks": [CLONE_XVECTOR_MAX_ABS, CLONE_XVECTOR_MIN_COSINE]}
    record = stages.run("speaker_encoder", args, [Path(files.config), Path(files.weights)],
                        lambda: [dst, golden_path(dst)], work)
    return {"path": dst, "golden": golden_path(dst), "contract": record["contract"], "record": record}


def _remove(dst: Path) -> None:
    """A graph that failed its check, and any golden an earlier build left beside it."""
    dst.unlink(missing_ok=True)
    golden_path(dst).unlink(missing_ok=True)


def _recorder(graph, record: tuple[list, list] | None) -> None:
    """``graph``'s runner wrapped so its first :data:`GOLDEN_CALLS` calls land in ``record``
    (feeds, outputs); nothing when ``record`` is None."""
    from rkspeech.core.capture import RecordingRunner

    if record is not None:
        graph.runner = RecordingRunner(graph.runner, record[0], outputs=record[1], limit=GOLDEN_CALLS, owns=True)


def _save_golden(dst: Path, contract, calls: tuple[list, list]) -> dict:
    """The golden of graph ``dst`` from the check's recorded ``calls``, written beside it; a small report."""
    import onnxruntime

    from rkspeech.runtime.golden import golden_bytes, golden_from_calls, save_golden

    feeds, outs = calls
    if not feeds:
        raise RkspeechError(f"{dst.name}: the check recorded no calls for its golden replay; please report this")
    golden = golden_from_calls("encoder", contract, feeds, outs, inputs="check clips",
                               seconds=list(CHECK_SECONDS[:len(feeds)]), source="ort", placement="cpu",
                               onnxruntime=onnxruntime.__version__)
    p = save_golden(golden_path(dst), golden)
    return {"path": str(p), "calls": golden.steps, "bytes": p.stat().st_size,
            **{f"{k}_bytes": v for k, v in golden_bytes(golden).items()}}


def _check_speaker(path: Path, tts, cfg, record: tuple[list, list] | None = None) -> dict:
    """The graph (numpy mel, onnxruntime) against the torch path (torch mel, torch module), per
    clip; ``record``: (feeds, outputs) lists that get the graph's first calls (its golden)."""
    from rkspeech.core.compare import cosine, max_abs_diff
    from rkspeech.runtime.tts.clone_encoders import GraphSpeakerEncoder

    graph = GraphSpeakerEncoder(path, "ort", config=cfg, threads=1)
    _recorder(graph, record)
    try:
        rows = []
        for clip in check_clips(cfg.sample_rate):
            ref = np.asarray(tts.speaker_embedding(clip).detach().numpy(), dtype=np.float32)
            got = graph(clip)
            rows.append({"seconds": round(clip.size / cfg.sample_rate, 3), "max_abs_diff": max_abs_diff(ref, got),
                         "cosine": cosine(ref, got), "max_abs_value": float(np.abs(ref).max())})
    finally:
        graph.close()
    return {"clips": rows, "max_abs_diff": max(r["max_abs_diff"] for r in rows),
            "cosine_min": min(r["cosine"] for r in rows)}


def build_speech_encoder(stages, vfiles, num_code_groups: int, folder: Path) -> dict:
    """``{"path", "contract", "record"}``: the speech tokenizer's encoder graph (``vfiles``: the
    root's ``speech_tokenizer`` files; its ``num_code_groups`` codebooks)."""
    import onnxruntime

    from rkspeech.core.thresholds import CLONE_CODES_MAX_DIFFERENT

    folder = Path(folder)
    dst = folder / "speech_encoder.onnx"

    def work():
        from rkspeech.contracts.clone import SpeechEncoderContract
        from rkspeech.export.clone_onnx import export_speech_encoder_onnx
        from rkspeech.models.qwen3_tts.speech_encoder import load_speech_encoder
        from rkspeech.runtime.tts.clone_encoders import speech_fingerprint

        enc = load_speech_encoder(vfiles)
        if enc.num_code_groups != num_code_groups:
            raise RkspeechError(f"{vfiles.config}: the encoder keeps {enc.num_code_groups} codebooks, the talker "
                                f"reads {num_code_groups}")
        c = enc.config
        contract = SpeechEncoderContract(num_code_groups=num_code_groups, codebook_size=c["codebook_size"],
                                         samples_per_code=enc.samples_per_code, sample_rate=c["sampling_rate"],
                                         fingerprint=speech_fingerprint(vfiles.weights))
        folder.mkdir(parents=True, exist_ok=True)
        export_speech_encoder_onnx(enc, contract, dst)
        calls: tuple[list, list] = ([], [])
        check = _check_speech(dst, enc, contract, record=calls)
        if check["different_codes"] > CLONE_CODES_MAX_DIFFERENT:
            _remove(dst)
            raise RkspeechError(f"the speech encoder graph does not give the torch module's codes "
                                f"({check['different_codes']} of {check['codes']} differ over {len(CHECK_SECONDS)} "
                                "reference clips); nothing written")
        return {"onnx": str(dst), "bytes": dst.stat().st_size, "contract": contract.to_dict(), "check": check,
                "golden": _save_golden(dst, contract, calls)}

    args = {"version": CLONE_VERSION, "ort": onnxruntime.__version__, "seconds": CHECK_SECONDS,
            "marks": [CLONE_CODES_MAX_DIFFERENT]}
    record = stages.run("speech_encoder", args, [Path(vfiles.config), Path(vfiles.weights)],
                        lambda: [dst, golden_path(dst)], work)
    return {"path": dst, "golden": golden_path(dst), "contract": record["contract"], "record": record}


def _check_speech(path: Path, enc, contract, record: tuple[list, list] | None = None) -> dict:
    """The graph's codes against the torch module's, per clip; ``record`` as :func:`_check_speaker`."""
    from rkspeech.runtime.tts.clone_encoders import GraphSpeechEncoder

    graph = GraphSpeechEncoder(path, "ort", threads=1)
    _recorder(graph, record)
    try:
        rows = []
        for clip in check_clips(contract.sample_rate):
            ref = enc.codes(clip)
            got = graph(clip)
            if got.shape != ref.shape:
                raise RkspeechError(f"the speech encoder graph gave codes {list(got.shape)}, the torch module "
                                    f"{list(ref.shape)}")
            rows.append({"seconds": round(clip.size / contract.sample_rate, 3), "codes": int(ref.size),
                         "different_codes": int((got != ref).sum())})
    finally:
        graph.close()
    return {"clips": rows, "codes": sum(r["codes"] for r in rows),
            "different_codes": sum(r["different_codes"] for r in rows)}
