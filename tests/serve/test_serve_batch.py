"""``serve`` over one batching speech engine (``runtime.tts.batch``; issue 55): concurrent requests
from the real ``openai`` and ``wyoming`` clients join the running batch, each gets exactly the audio
it gets alone, a client that leaves mid-stream spares the others and frees its lanes, and
``/metrics`` shows the batch.  The trained reduced root with int4 CPU stages and lanes for 3
streams (``batch_plan``), greedy."""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.request

import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("wyoming")
pytest.importorskip("uvicorn")
openai = pytest.importorskip("openai")

FRAMES = 24
TEXTS = ("The quick brown fox.", "A second, longer sentence to say here.", "Short.")


@pytest.fixture(scope="module")
def served(batch_plan):
    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    root, plan = batch_plan
    speaker = Speaker(root, plan, threads=1, streams=3,
                      options=GenerationOptions.greedy(max_new_tokens=FRAMES + 1))
    pool = ServePool(speakers=[speaker], max_queue=4)
    st = ServerThread(pool, ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0")).start()
    yield st, speaker
    assert st.stop()


def _openai(st, text, voice, *, stop_after=None) -> bytes:
    client = openai.OpenAI(base_url=f"http://{st.addresses['http']}/v1", api_key="unused", max_retries=0, timeout=300)
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice=voice, input=text,
                                                             response_format="pcm") as response:
        pieces = []
        for piece in response.iter_bytes(4096):
            pieces.append(piece)
            if stop_after is not None and len(pieces) >= stop_after:
                break  # the client leaves: the response is closed under the server
    return b"".join(pieces)


def _wyoming(st, text, voice) -> bytes:
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeVoice

    host, port = st.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)

    async def go():
        async with AsyncTcpClient(host, int(port), read_timeout=300) as client:
            await client.write_event(Synthesize(text=text, voice=SynthesizeVoice(name=voice)).event())
            events = []
            while not events or events[-1].type not in ("audio-stop", "error"):
                events.append(await client.read_event())
        assert events[-1].type == "audio-stop", events[-1]
        return b"".join(e.payload for e in events if e.type == "audio-chunk")

    return asyncio.run(go())


def _together(jobs) -> tuple[list, int]:
    """Run the jobs at once; their results and the largest batch seen meanwhile."""
    out, errors, peak, done = [None] * len(jobs), [], [0], threading.Event()
    speaker = jobs[0][1]

    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], speaker.batch.active)
            time.sleep(0.002)

    def run(k):
        try:
            out[k] = jobs[k][0]()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    assert not errors, errors
    return out, peak[0]


def test_concurrent_clients_join_the_batch_and_get_their_own_audio(served):
    st, speaker = served
    voice = speaker.speakers[0]
    alone = [_openai(st, t, voice) for t in TEXTS]
    assert _wyoming(st, TEXTS[0], voice) == alone[0]  # the same audio by either front end
    jobs = [(lambda t=t: _openai(st, t, voice), speaker) for t in TEXTS[1:]] + \
           [(lambda: _wyoming(st, TEXTS[0], voice), speaker)]
    got, peak = _together(jobs)
    assert peak >= 2  # generated together, not in turn
    assert got[0] == alone[1] and got[1] == alone[2] and got[2] == alone[0]
    metrics = urllib.request.urlopen(f"http://{st.addresses['http']}/metrics", timeout=30).read().decode()
    assert "rkspeech_speech_batch_streams 0.0" in metrics


def test_a_client_that_leaves_spares_the_others(served):
    st, speaker = served
    voice = speaker.speakers[0]
    alone = [_openai(st, t, voice) for t in TEXTS[1:]]
    jobs = [(lambda: _openai(st, TEXTS[0], voice, stop_after=1), speaker)] + \
           [(lambda t=t: _openai(st, t, voice), speaker) for t in TEXTS[1:]]
    got, _ = _together(jobs)
    assert got[1:] == alone
    deadline = time.monotonic() + 30
    while speaker.batch.active and time.monotonic() < deadline:  # the server notices the closed socket
        time.sleep(0.05)
    assert speaker.batch.active == 0 and sorted(speaker.batch.talker._free) == [0, 1, 2]


def test_serve_cli_batches_from_a_folder_of_its_own(batch_plan, served, tmp_path):
    """``rkspeech serve --tts-streams 3`` started as a user starts it, from a folder outside the
    checkout with relative paths: two openai clients and a wyoming client at once get the audio
    the in-process engine gives each alone, and the server says it batches."""
    import os
    import signal

    import numpy as np
    from rkfixtures import serve_process

    from rkspeech.runtime.wav import to_int16

    st, speaker = served
    voice = speaker.speakers[0]
    # what serve's speech options give each request alone (sampling, seed 0, its frame bound)
    sampled = speaker.default_options(max_new_tokens=FRAMES + 1)
    want = [to_int16(np.concatenate(list(speaker.stream(t, speaker=voice, options=sampled)))).astype("<i2").tobytes()
            for t in TEXTS]
    root, plan = batch_plan
    proc, addresses, lines = serve_process(["--tts-model-dir", os.path.relpath(root, tmp_path), "--tts-plan",
                                            os.path.relpath(plan, tmp_path), "--tts-streams", "3",
                                            "--max-speech-s", str(FRAMES * 0.08 - 0.01)], tmp_path, timeout=300)
    try:
        assert any("3 requests generated at once" in x for x in lines), "".join(lines)

        class Cli:  # what _openai / _wyoming read
            pass

        cli = Cli()
        cli.addresses = addresses
        jobs = [(lambda t=t: _openai(cli, t, voice), speaker) for t in TEXTS[:2]] + \
               [(lambda: _wyoming(cli, TEXTS[2], voice), speaker)]
        got, _ = _together(jobs)
        assert got == want
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
