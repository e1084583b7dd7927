"""Text to speech through the plan's streaming vocoder (``rkspeech speak``, ``runtime.tts.speak``).

The reduced custom-voice model (talker + code predictor on the host) feeds the session's reduced
B=4 / B=16 step graphs on onnxruntime.  What must hold: the streamed wav is the decode of the
codes it saved (bit for bit, and >= 80 dB against the torch full decode), the first audio comes
before generation ends, ``-o -`` streams the same samples, and bad requests are one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError
from streaming_fixtures import step_graphs, write_ort_plan

REPO = Path(__file__).resolve().parents[2]
FRAMES = 24  # enough for a B=4 first step and one B=16 main step plus a flushed tail


@pytest.fixture(scope="module")
def plan(tmp_path_factory, reduced_model):
    return write_ort_plan(tmp_path_factory.mktemp("speak_plan"), step_graphs(tmp_path_factory, reduced_model))


def _run(argv, capsys):
    from rkspeech.cli import main

    rc = main(argv)
    return rc, capsys.readouterr()


def _speak_argv(root, plan, out, *extra):
    return ["speak", "The quick brown fox.", "--model-dir", str(root), "--plan", str(plan), "-o", str(out),
            "--speaker", "vivian", "--language", "english", "--greedy", "--max-frames", str(FRAMES),
            "--threads", "1", *extra]


def _snr_db(ref, x):
    n = min(ref.size, x.size)
    return 10 * np.log10(np.sum(ref[:n] ** 2) / max(np.sum((ref[:n] - x[:n]) ** 2), 1e-30))


@pytest.fixture(scope="module")
def spoken(tts_custom_ckpt, plan, tmp_path_factory):
    """One in-process ``rkspeech speak`` run: (folder, stderr)."""
    from rkspeech.cli import main

    d = tmp_path_factory.mktemp("spoken")
    rc = main(_speak_argv(tts_custom_ckpt, plan, d / "a.wav", "--codes-out", str(d / "codes.npy"),
                          "--report", str(d / "r.json")))
    assert rc == 0
    return d


def test_speak_wav_is_the_decode_of_its_codes(spoken, plan, reduced_model, tmp_path, capsys):
    import torch

    from rkspeech.runtime.wav import read_wav_int16

    c = np.load(spoken / "codes.npy")
    assert c.dtype == np.int64 and c.ndim == 2 and c.shape[1] == 16
    assert c.shape[0] == FRAMES  # --max-frames N: N frames of audio (this talker does not stop sooner)
    rc, cap = _run(["decode", "--plan", str(plan), str(spoken / "codes.npy"), "-o", str(tmp_path / "b.wav"),
                    "--threads", "1"], capsys)
    assert rc == 0, cap.err
    wav_a, rate = read_wav_int16(spoken / "a.wav")
    wav_b, _ = read_wav_int16(tmp_path / "b.wav")
    assert rate == 24000 and wav_a.size == c.shape[0] * 1920
    # the audio of a whole-codes decode: speak cuts its steps where the frames arrived (eager
    # small steps), so float rounding may move a sample by one LSB, no more
    assert np.abs(wav_a.astype(np.int32) - wav_b).max() <= 1
    with torch.no_grad():
        full = reduced_model(torch.from_numpy(c.T[None].copy())).reshape(-1).numpy()
    assert _snr_db(np.round(np.clip(full, -1, 1) * 32767), wav_a.astype(np.float64)) >= 80
    r = json.loads((spoken / "r.json").read_text())
    assert r["frames"] == c.shape[0] and r["samples"] == wav_a.size
    # streaming: the first audio (after the B=4 first step) comes before generation has ended
    assert 0 < r["time_to_first_audio_s"] < r["generate_seconds"]


def test_speak_to_stdout_streams_the_same_samples(spoken, tts_custom_ckpt, plan):
    from rkspeech.runtime.wav import read_wav_int16

    p = subprocess.run([sys.executable, "-m", "rkspeech", *_speak_argv(tts_custom_ckpt, plan, "-")],
                       capture_output=True, cwd=REPO, check=False)
    assert p.returncode == 0, p.stderr.decode()[-2000:]
    raw = np.frombuffer(p.stdout, dtype="<i2")
    assert np.array_equal(raw, read_wav_int16(spoken / "a.wav")[0])
    assert b"rkspeech speak" in p.stderr  # the table went to stderr, not into the audio


def test_stream_api_yields_chunks_as_steps_finish(tts_custom_ckpt, plan):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming

    with Speaker(tts_custom_ckpt, plan, threads=1) as sp:
        assert sp.sample_rate == 24000 and "vivian" in sp.speakers and "english" in sp.languages
        timing, codes = SpeechTiming(), []
        chunks = list(sp.stream("Hello there.", speaker="vivian", options=GenerationOptions.greedy(max_new_tokens=FRAMES),
                                codes_out=codes, timing=timing))
    sizes = [c.size for c in chunks]
    assert sizes[0] == 4 * 1920  # the B=4 first step, as soon as 4 frames exist
    # then a small step every 4 frames (eager: speak pushes frame by frame), the last one flushed
    assert all(s == 4 * 1920 for s in sizes[:-1]) and 0 < sizes[-1] <= 4 * 1920
    assert sum(sizes) == len(codes) * 1920
    assert timing.frames == len(codes) and timing.samples == sum(sizes)


def test_generation_runs_beside_the_vocoder(tts_custom_ckpt, plan):
    """Frames are generated in their own thread while the caller's thread vocodes: the generator
    runs ahead of the chunks consumed; a caller that stops early stops the generator; an error
    in generation reaches the caller."""
    import threading

    from rkspeech.core.errors import RkspeechError
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.generation_thread import Generation
    from rkspeech.runtime.tts.speak import Speaker

    with Speaker(tts_custom_ckpt, plan, threads=1) as sp:
        inner, seen = sp.model.generate_frames, []

        def spy(*a, **kw):
            for frame in inner(*a, **kw):
                seen.append(threading.get_ident())
                yield frame

        sp.model.generate_frames = spy
        opts = GenerationOptions.greedy(max_new_tokens=FRAMES)
        long = GenerationOptions.greedy(max_new_tokens=400)  # the random talker never stops by itself
        stream = sp.stream("Hello there.", speaker="vivian", options=long)
        first = next(stream)  # the B=4 first step
        assert first.size == 4 * 1920
        assert seen and set(seen) != {threading.get_ident()}  # generated in another thread
        stream.close()  # a client gone: generation stops before the utterance ends
        stopped_at = len(seen)
        # at most the first step's frames, a full queue and the frame in hand: the queue bounds it
        assert stopped_at <= 4 + Generation.QUEUE_FRAMES + 2 and not any(t.name == "rkspeech-generate" and t.is_alive()
                                               for t in threading.enumerate())
        assert len(seen) == stopped_at

        def broken(*a, **kw):
            yield from inner(*a, **kw)
            raise RkspeechError("generation failed on purpose")

        sp.model.generate_frames = broken
        with pytest.raises(RkspeechError, match="on purpose"):
            list(sp.stream("Hello there.", speaker="vivian", options=opts))
        sp.model.generate_frames = inner
        assert sum(c.size for c in sp.stream("Hi.", speaker="vivian", options=opts)) > 0  # lock released


def test_plan_for_another_speech_tokenizer_is_refused():
    from rkspeech.models.qwen3_tts.vocoder_config import VocoderConfig
    from rkspeech.plan.plan import check_plan_for_model

    cfg = VocoderConfig()
    good = SimpleNamespace(path="plan.json", contract=SimpleNamespace(
        num_quantizers=16, codebook_size=cfg.codebook_size, head_dim=cfg.head_dim, sliding_window=cfg.sliding_window,
        rope_theta=cfg.rope_theta, samples_per_token=cfg.samples_per_token, sample_rate=cfg.sample_rate))
    check_plan_for_model(good, cfg)
    good.contract.sliding_window = 36
    with pytest.raises(RkspeechError, match=r"not built for this model's speech tokenizer .*sliding_window 36 vs 72"):
        check_plan_for_model(good, cfg)


BAD = [
    (["--speaker", "nobody"], r"nobody.*vivian"),
    (["--speaker", "vivian", "--language", "klingon"], r"klingon.*english"),
    (["--speaker", "vivian", "--ref-audio", "{ref}"], r"custom-voice checkpoint cannot clone a voice"),
    ([], r"custom-voice checkpoint needs a speaker; one of: aiden, .*vivian"),
    (["--speaker", "vivian", "--ref-audio", "/nonexistent/ref.wav"], r"reference audio /nonexistent/ref.wav: no such file"),
]


@pytest.mark.parametrize("extra,pattern", BAD, ids=["speaker", "language", "mode", "no-speaker", "ref-audio"])
def test_bad_requests_are_one_line(extra, pattern, tts_custom_ckpt, plan, tmp_path, tmp_path_factory, capsys):
    import re

    from rkspeech.runtime.wav import write_wav

    ref = write_wav(tmp_path_factory.mktemp("ref") / "ref.wav", np.sin(np.arange(24000) / 9.0) * 0.3, 24000)
    extra = [x.format(ref=ref) for x in extra]
    out = tmp_path / "x.wav"
    argv = ["speak", "Hello.", "--model-dir", str(tts_custom_ckpt), "--plan", str(plan), "-o", str(out), *extra]
    rc, cap = _run(argv, capsys)
    lines = cap.err.strip().splitlines()  # progress lines may come first; the error is one line
    assert rc == 2 and "Traceback" not in cap.err and re.search(pattern, lines[-1], re.I), cap.err
    assert lines[-1].startswith("rkspeech speak: error: ")
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == []


def test_text_that_is_not_unicode_is_one_line(tmp_path):
    """A byte that is not UTF-8 on the command line (a shell passes it as a lone surrogate) is
    refused in one line, before any model loads."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "rkspeech", "speak", os.fsencode("Hello ") + b"\xff",
                           "--plan", "nowhere.json", "-o", "x.wav"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == ("rkspeech speak: error: the text is not valid Unicode: byte 0xff "
                                                    "at character 6 (give UTF-8 text)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_empty_text_and_wrong_output_are_refused_before_loading(tmp_path, capsys):
    rc, cap = _run(["speak", "  ", "--plan", "nowhere.json", "-o", str(tmp_path / "x.wav")], capsys)
    assert rc == 2 and "the text is empty" in cap.err
    rc, cap = _run(["speak", "Hi.", "--plan", "nowhere.json", "-o", str(tmp_path / "x.mp3")], capsys)
    assert rc == 2 and "must end in .wav" in cap.err
    rc, cap = _run(["speak", "Hi.", "--plan", "nowhere.json", "-o", str(tmp_path / "x.wav"), "--max-frames", "0"], capsys)
    assert rc == 2 and "--max-frames must be >= 1, got 0" in cap.err


def test_decode_of_the_codes_of_several_sentences_is_the_spoken_wav(tts_custom_ckpt, plan, tmp_path, capsys):
    """speak gives each sentence its own utterance (a fresh vocoder state); its codes file keeps
    the sentences apart ([N, T, 16], -1 padded) and decode decodes them apart: the wav of the two
    sentences is the spoken one (decoded as one stream it differed by up to 16,102 LSB, issue 37)."""
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.codes import utterance_array
    from rkspeech.runtime.tts.long_text import stream_sentences
    from rkspeech.runtime.tts.speak import Speaker, SpeechTiming
    from rkspeech.runtime.wav import read_wav_int16, to_int16

    caps = (FRAMES, 9)  # frames per sentence at most
    with Speaker(tts_custom_ckpt, plan, threads=1) as sp:
        codes, pcm = [], []
        for frames, text in zip(caps, ("The quick brown fox.", "It jumps.")):  # speak's code path per sentence
            pcm += list(stream_sentences(sp, text, options=GenerationOptions.greedy(max_new_tokens=frames + 1),
                                         timing=SpeechTiming(), codes_out=codes, speaker="vivian"))
    spoken = to_int16(np.concatenate(pcm))
    lengths = [len(c) for c in codes]
    assert len(lengths) == 2 and lengths[0] == FRAMES and 0 < lengths[1] < FRAMES, lengths
    arr = utterance_array(codes)  # what speak --codes-out writes
    assert arr.shape == (2, FRAMES, 16) and (arr[1, lengths[1]:] == -1).all()
    np.save(tmp_path / "codes.npy", arr)
    rc, cap = _run(["decode", "--plan", str(plan), str(tmp_path / "codes.npy"), "-o", str(tmp_path / "d.wav"),
                    "--threads", "1", "--report", str(tmp_path / "r.json")], capsys)
    assert rc == 0, cap.err
    decoded, _ = read_wav_int16(tmp_path / "d.wav")
    assert decoded.size == spoken.size == sum(lengths) * 1920
    # speak's eager small steps vs decode's main steps: float rounding, at most one LSB (as for one sentence)
    assert np.abs(decoded.astype(np.int32) - spoken).max() <= 1  # measured: 1
    assert json.loads((tmp_path / "r.json").read_text())["utterances"] == 2
    # with speak's step schedule (frame by frame, small steps): sample for sample
    rc, cap = _run(["decode", "--plan", str(plan), str(tmp_path / "codes.npy"), "-o", str(tmp_path / "e.wav"),
                    "--threads", "1", "--as-spoken"], capsys)
    assert rc == 0, cap.err
    assert np.array_equal(read_wav_int16(tmp_path / "e.wav")[0], spoken)
    # the sentences' codes decoded as one stream are another signal (the fresh state matters)
    np.save(tmp_path / "flat.npy", np.concatenate(codes))
    rc, cap = _run(["decode", "--plan", str(plan), str(tmp_path / "flat.npy"), "-o", str(tmp_path / "f.wav"),
                    "--threads", "1"], capsys)
    assert rc == 0, cap.err
    assert np.abs(read_wav_int16(tmp_path / "f.wav")[0].astype(np.int32) - spoken).max() > 100  # measured: 16,512


def test_speak_prints_progress_as_it_goes(tts_custom_ckpt, plan, tmp_path, capsys, monkeypatch):
    """A long text ran for minutes with nothing on stderr: now a line every few seconds (here
    at every chunk) with the audio so far."""
    from rkspeech.core import progress

    monkeypatch.setattr(progress, "PERIODIC_SECONDS", 0)
    rc, cap = _run(["speak", "Hi.", "--model-dir", str(tts_custom_ckpt), "--plan", str(plan), "-o",
                    str(tmp_path / "a.wav"), "--speaker", "vivian", "--greedy", "--max-frames", "8",
                    "--threads", "1"], capsys)
    assert rc == 0, cap.err
    lines = [x for x in cap.err.splitlines() if x.strip().startswith("speak: ")]
    assert lines and "s of audio" in lines[-1] and "frames" in lines[-1], cap.err
