"""Qwen3-ASR through a built plan: encoder windows on the NPU (0 CPU ops), transcripts identical to
the official qwen-asr on the same reduced root, one-line refusals."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

pytestmark = pytest.mark.rknn

MAX_NEW = 12


@pytest.fixture(scope="module")
def asr_root(tmp_path_factory):
    from rkspeech.models.qwen3_asr.synthetic_asr import write_asr_checkpoint

    return write_asr_checkpoint(tmp_path_factory.mktemp("asr") / "ck", "reduced", seed=0)


@pytest.fixture(scope="module")
def fp32_plan(asr_root, tmp_path_factory):
    pytest.importorskip("rknn.api")
    from rkspeech.pipelines.asr_build import ASRBuildOptions, build_qwen3_asr

    out = tmp_path_factory.mktemp("asr_plan")
    report = build_qwen3_asr(ASRBuildOptions(model_dir=str(asr_root), out_dir=str(out), decoder="cpu-fp32"))
    return Path(report["plan"]), report


def _audio(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * 16000)) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def test_encoder_windows_on_the_npu(fp32_plan):
    _, report = fp32_plan
    enc = report["encoder"]
    for role in enc["export"]:
        conv = enc["sequence"]["convert"][role]
        assert conv["placement"]["cpu_ops"] == 0 and conv["placement"]["npu_ops"] > 0
        assert conv["build"]["regtask_overflow_lines"] == 0
        assert enc["simulator"][role]["finite"] and enc["simulator"][role]["snr_db"] > 35
    plan = json.loads(fp32_plan[0].read_text())
    assert plan["asr_encoder"]["placement"] == "npu" and plan["asr_decoder"]["placement"] == "cpu-fp32"


def test_transcripts_identical_to_the_official(asr_root, fp32_plan):
    """fp32 decoder, encoder graphs on onnxruntime: the official ``transcribe``'s greedy text and
    language, under 1 s (the unpadded conv case), 2 s and one full 8 s window, detected and forced."""
    from tests.asr_reference import official_asr
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    official = official_asr(asr_root)
    official.max_new_tokens = MAX_NEW
    with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
        for seconds, language in ((0.6, None), (2.0, "English"), (7.9, None)):
            wave = _audio(seconds)
            want = official.transcribe((wave, 16000), language=language)[0]
            got = asr.transcribe(wave, language=language, max_new_tokens=MAX_NEW)
            assert (got.language, got.text) == (want.language, want.text), seconds
            assert len(got.token_ids[0]) == MAX_NEW


def test_a_broken_encoder_mask_is_caught(asr_root, fp32_plan):
    """The check above fails when the short-audio conv masks are left out (all ones): 0.6 s then
    differs from the official, as the unpadded convolution is no longer reproduced."""
    from rkspeech.models.qwen3_asr.features import log_mel
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
        mel = log_mel(_audio(0.6))
        good = asr.encode(mel)
        g = asr.geometry
        win = g.windows(mel.shape[1])[0]
        x, _, _, key = g.window_inputs(mel, win, chunks=8, short=False)  # masks all ones
        m1, m2 = np.ones((8, 1, 1, 50), np.float32), np.ones((8, 1, 1, 25), np.float32)
        bad = asr.windows[8].infer({"chunks": x, "mask1": m1, "mask2": m2, "key_mask": key})["features"][:win.tokens]
        assert np.abs(good - bad).max() > 1e-4


def test_cli_from_a_folder_of_its_own(fp32_plan, tmp_path):
    """``transcribe --plan`` with relative paths, outputs written; a bad language is one line."""
    import soundfile

    plan_dir = fp32_plan[0].parent
    soundfile.write(tmp_path / "a.wav", _audio(1.5), 16000)
    (tmp_path / "p").symlink_to(plan_dir)
    cmd = [sys.executable, "-m", "rkspeech", "transcribe", "a.wav", "--plan", "p/plan.json", "--max-new-tokens", "4",
           "--out-dir", "tr"]
    r = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "tr" / "a.txt").is_file() and json.loads((tmp_path / "tr" / "a.json").read_text())["text"]
    r = subprocess.run(cmd[:-2] + ["--language", "klingon"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "klingon" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()[-1]) > 0


def test_long_audio_is_cut_to_what_the_decoder_holds(fp32_plan):
    """Audio past the decoder's capacity is cut where the official cuts (the quietest point within
    5 s of the mark), the mark set back so that every piece fits (400 s of noise once made a
    1,072-position prompt for the 1,024 cache); when no piece could fit, one line says why."""
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber

    noise = (0.1 * np.random.default_rng(1).standard_normal(16000 * 400)).astype(np.float32)
    with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
        r = asr.transcribe(noise, max_new_tokens=8)
        fits = asr.fitting_seconds(8)
        assert len(r.token_ids) == len(list(asr.iter_pieces(noise, max_new_tokens=8))) > 400 / fits
        assert asr.piece_seconds(30.0, 8) == 1200.0  # it fits whole: not cut, as the official
        with pytest.raises(RkspeechError, match="must be cut into pieces, which needs more"):
            asr.transcribe(noise[:16000 * 60], max_new_tokens=960)


def test_plan_refusals(tmp_path):
    from rkspeech.plan.asr import load_asr_plan

    (tmp_path / "plan.json").write_text(json.dumps({"format": "rkspeech-plan/2", "whisper_encoder": {}}))
    with pytest.raises(RkspeechError, match="no Qwen3-ASR records"):
        load_asr_plan(tmp_path / "plan.json")


def test_check_board_replays_every_graph(fp32_plan, tmp_path):
    """The encoder window's golden (recorded on the simulator) and the decoder's three graphs' (onnxruntime)
    replay within their marks: what a board runs after copying the plan folder."""
    plan = json.loads(fp32_plan[0].read_text())
    assert sorted(plan["asr_decoder"]["goldens"]) == ["decode", "head", "prefill"]
    r = subprocess.run([sys.executable, "-m", "rkspeech", "check-board", "--plan", str(fp32_plan[0]), "--backend", "ort",
                        "-o", str(tmp_path / "cb.json")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "cb.json").read_text())
    rows = report["graphs"]
    assert {row["graph"] for row in rows} == {"asr encoder k8", "asr decoder prefill", "asr decoder decode",
                                              "asr decoder head"}
    assert report["ok"] and all(row["ok"] for row in rows)


def test_doctor_checks_the_plan(fp32_plan):
    """``doctor --plan`` reads a Qwen3-ASR plan's .rknn files (chip, toolkit) as any plan's."""
    r = subprocess.run([sys.executable, "-m", "rkspeech", "doctor", "--plan", str(fp32_plan[0])],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "window_k8.rknn: rk3588, toolkit 2.5.0" in r.stdout + r.stderr


def test_estimate_prices_the_plan(fp32_plan):
    """``estimate --plan`` on a Qwen3-ASR plan: the encoder windows from their layer tables (ideal, and
    at the NPU board factor), the decoder's calls from their bytes; per utterance the parts add up."""
    from rkspeech.estimate.asr_time import estimate_asr_plan
    from rkspeech.estimate.assumptions import NPU_BOARD_FACTOR

    rep = estimate_asr_plan(fp32_plan[0])
    w = rep["encoder"][8]
    assert w["unit"] == "npu" and w["ideal_ms"] > 0 and w["calibrated_ms"] == pytest.approx(w["ideal_ms"] * NPU_BOARD_FACTOR)
    assert rep["per_token_ms"] == pytest.approx(rep["decoder"]["decode"]["ms"] + rep["decoder"]["head"]["ms"])
    short, long = rep["utterances"]
    assert (short["audio_s"], long["audio_s"]) == (3.0, 10.0) and long["windows"] == [8, 8]
    for u in rep["utterances"]:
        total = u["encoder_ms"]["ideal"] + u["prefill_ms"] + u["decode_ms"]
        assert u["end_of_speech_to_transcript_s"]["ideal"] == pytest.approx(total / 1e3)
        assert u["rtf"]["ideal"] < u["rtf"]["calibrated"]
    r = subprocess.run([sys.executable, "-m", "rkspeech", "estimate", "--plan", str(fp32_plan[0])],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "per utterance" in r.stdout, r.stderr[-2000:]


def _serve(args: list[str], cwd) -> tuple[subprocess.Popen, dict]:
    """``rkspeech serve ARGS`` in ``cwd``, both front ends on free loopback ports: (process, {kind: address})."""
    from rkfixtures import serve_process

    proc, addresses, _ = serve_process(args, cwd)
    return proc, addresses


def test_serve_a_plan_through_the_real_clients(fp32_plan, tmp_path):
    """``serve --asr-plan`` from a folder of its own with relative paths: the ``openai`` client's
    json / verbose_json / streamed answers and the ``wyoming`` client's transcript are the text
    ``transcribe`` gives for the same samples, language and context; what Qwen3-ASR cannot do (word
    timestamps) and unknown languages are 400s with one line."""
    import asyncio

    import soundfile

    openai = pytest.importorskip("openai")
    pytest.importorskip("wyoming")
    from rkspeech.runtime.qwen3_asr.transcriber import ASRTranscriber
    from rkspeech.runtime.qwen3_asr.whisper_api import language_code

    soundfile.write(tmp_path / "a.wav", _audio(1.5, seed=3), 16000, subtype="PCM_16")
    (tmp_path / "p").symlink_to(fp32_plan[0].parent)
    wave16, _ = soundfile.read(tmp_path / "a.wav", dtype="float32")
    with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
        want = asr.transcribe(wave16, language="English", context="kitchen lights").text
        detected = asr.transcribe(wave16)
    proc, at = _serve(["--asr-plan", "p/plan.json", "--asr-language", "en"], tmp_path)
    try:
        client = openai.OpenAI(base_url=f"http://{at['http']}/v1", api_key="unused", max_retries=0, timeout=300)

        def ask(**kw):
            with open(tmp_path / "a.wav", "rb") as f:
                return client.audio.transcriptions.create(model="qwen3-asr", file=f, **kw)

        assert ask(prompt="kitchen lights").text == want
        verbose = ask(language="auto", response_format="verbose_json")
        assert (verbose.text, verbose.language) == (detected.text, language_code(detected.language))
        assert len(verbose.segments) == 1 and verbose.segments[0].end == pytest.approx(1.5)
        events = list(ask(prompt="kitchen lights", stream=True))
        assert events[-1].type == "transcript.text.done" and events[-1].text == want
        assert "".join(e.delta for e in events[:-1]) == want
        with pytest.raises(openai.BadRequestError, match="no word timestamps"):
            ask(response_format="verbose_json", timestamp_granularities=["word"])
        with pytest.raises(openai.BadRequestError, match="unsupported language 'klingon'; supported: Chinese"):
            ask(language="klingon")

        async def wyoming():
            from wyoming.asr import Transcribe
            from wyoming.audio import AudioChunk, AudioStart, AudioStop
            from wyoming.client import AsyncTcpClient
            from wyoming.info import Describe

            host, port = at["wyoming"].removeprefix("tcp://").rsplit(":", 1)
            pcm = (wave16 * 32768).astype("<i2").tobytes()
            async with AsyncTcpClient(host, int(port), read_timeout=300) as c:
                await c.write_event(Describe().event())
                info = await c.read_event()
                await c.write_event(Transcribe(language="en-US").event())
                await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                for i in range(0, len(pcm), 3200):
                    await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + 3200]).event())
                await c.write_event(AudioStop().event())
                events = [await c.read_event()]
                while events[-1].type != "transcript":
                    events.append(await c.read_event())
            return info, events

        info, events = asyncio.run(wyoming())
        program = info.data["asr"][0]
        assert program["name"] == "rkspeech-qwen3-asr" and program["models"][0]["name"] == "p"
        assert len(program["models"][0]["languages"]) == 30 and "yue" in program["models"][0]["languages"]
        final = events[-1].data
        with ASRTranscriber(fp32_plan[0], backend="ort") as asr:
            assert final["text"] == asr.transcribe(wave16, language="English").text
        assert final["language"] == "en" and events[0].type == "transcript-start"
    finally:
        proc.terminate()
        assert proc.wait(60) == 0


def test_serve_plan_refusals(fp32_plan, tmp_path):
    """Whisper's flags beside a plan, a missing plan, a Whisper plan, an unknown language: one line, exit 2."""
    def serve(*args):
        r = subprocess.run([sys.executable, "-m", "rkspeech", "serve", *args], capture_output=True, text=True,
                           timeout=120, cwd=tmp_path)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
        return lines[0]

    plan = str(fp32_plan[0])
    assert "drop --asr-vad" in serve("--asr-plan", plan, "--asr-vad")
    assert "no such file" in serve("--asr-plan", "nope/plan.json")
    (tmp_path / "w.json").write_text(json.dumps({"format": "rkspeech-plan/2", "whisper_encoder": {}}))
    assert "is not a Qwen3-ASR plan" in serve("--asr-plan", "w.json")
    assert "unsupported language 'xx'" in serve("--asr-plan", plan, "--asr-language", "xx")


def test_wyoming_partials_while_the_audio_arrives(fp32_plan):
    """``--asr-partials``: audio sent at a pace, transcript chunks come back before audio-stop is
    sent (the official streaming mode's fixed text, each step when the engine is free); the final
    transcript is the plain transcription of the whole audio, and the chunks join to it when it
    kept what they said."""
    import asyncio
    import time

    pytest.importorskip("wyoming")
    from rkspeech.runtime.qwen3_asr.whisper_api import Qwen3ASRWhisperAPI
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    engine = Qwen3ASRWhisperAPI(fp32_plan[0], max_new_tokens=16)
    wave = (_audio(9.0, seed=5) * 32768).astype("<i2")
    want = engine.asr.transcribe(wave.astype(np.float32) / 32768, language="en", max_new_tokens=16).text
    st = ServerThread(ServePool(transcribers=[engine], max_queue=2),
                      ServeOptions(wyoming="tcp://127.0.0.1:0", http=None, asr_partials=True)).start()
    try:
        async def talk():
            from wyoming.asr import Transcribe
            from wyoming.audio import AudioChunk, AudioStart, AudioStop
            from wyoming.client import AsyncTcpClient

            host, port = st.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)
            pcm, got, stop_sent = wave.tobytes(), [], []
            async with AsyncTcpClient(host, int(port), read_timeout=300) as c:
                async def read():
                    while not got or got[-1][1].type != "transcript":
                        got.append((time.monotonic(), await c.read_event()))
                reader = asyncio.ensure_future(read())
                await c.write_event(Transcribe(language="en").event())
                await c.write_event(AudioStart(rate=16000, width=2, channels=1).event())
                for i in range(0, len(pcm), 8000):  # 0.25 s a chunk, 4x faster than real time
                    await c.write_event(AudioChunk(rate=16000, width=2, channels=1, audio=pcm[i:i + 8000]).event())
                    await asyncio.sleep(0.06)
                stop_sent.append(time.monotonic())
                await c.write_event(AudioStop().event())
                await asyncio.wait_for(reader, 300)
            return got, stop_sent[0]

        got, stopped = asyncio.run(talk())
    finally:
        assert st.stop()
    types = [e.type for _, e in got]
    assert types[0] == "transcript-start" and types[-2:] == ["transcript-stop", "transcript"], types
    early = [e.data["text"] for t, e in got if e.type == "transcript-chunk" and t < stopped]
    assert early, types  # partials while the audio was still arriving
    final = got[-1][1].data["text"]
    assert final == want
    chunks = "".join(e.data["text"] for _, e in got if e.type == "transcript-chunk")
    assert chunks == final if final.startswith("".join(early)) else chunks == "".join(early)
