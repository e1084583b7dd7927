"""Voices saved beside a Base plan (issue 54, item 6; ``runtime.tts.saved_voices``).

The session's reduced Base plan (``tts_base_build``), linked into a folder of this module's own,
used as a user uses it: from that folder, relative paths.  What must hold:

* ``voices save NAME --plan --ref-audio [--ref-text]`` writes ``voices/NAME.voice`` beside the plan,
  and ``speak --voice NAME`` gives exactly the codes of ``speak --ref-audio [--ref-text]`` on the
  same recording (x-vector and in context);
* ``voices --plan`` lists them; ``serve`` offers them as Wyoming voices and OpenAI ``voice`` values,
  through the real ``wyoming`` and ``openai`` clients, with the samples ``speak --voice`` writes;
* bad names, a name taken, a damaged file, a voice from another model, an unknown voice, a voice
  with ``--ref-audio`` beside it: one line each, exit 2.
"""

from __future__ import annotations

import asyncio
import json
import os

import numpy as np
import pytest

from rkfixtures import run_relative

FRAMES = 10
TEXT = "Saved voices speak by name."
REF_TEXT = "A short reference transcript."


@pytest.fixture(scope="module")
def home(tts_base_build, tts_base_ckpt, tmp_path_factory):
    """A folder with ``plan/`` (the Base plan, linked), ``root`` (a link to the model root) and
    ``ref.wav``; the two voices saved from it."""
    from rkspeech.plan.bundle import import_plan
    from rkspeech.runtime.wav import write_wav

    home = tmp_path_factory.mktemp("voices_home")
    import_plan(tts_base_build[1] / "plan.json", home / "plan")
    os.symlink(tts_base_ckpt, home / "root")
    t = np.arange(int(24000 * 1.7)) / 24000
    rng = np.random.default_rng(4)
    pcm = (0.3 * np.sin(2 * np.pi * 170 * t) * (1 + 0.5 * np.sin(2 * np.pi * 2 * t))
           + 0.03 * rng.standard_normal(t.size)).astype(np.float32)
    write_wav(home / "ref.wav", pcm, 24000)
    for name, extra in (("alice", []), ("bob", ["--ref-text", REF_TEXT])):
        rc, _, new = run_relative(home, ["voices", "save", name, "--plan", "plan/plan.json", "--model-dir", "root",
                                         "--ref-audio", "ref.wav", "--threads", "1", *extra])
        assert rc == 0 and new == {f"plan/voices/{name}.voice"}
    return home


def _speak(home, name, *voice):
    rc, _, _ = run_relative(home, ["speak", TEXT, "--model-dir", "root", "--plan", "plan/plan.json", "-o",
                                   f"{name}.wav", "--max-frames", str(FRAMES), "--threads",
                                   "1", "--greedy", "--codes-out", f"{name}.npy", *voice])
    assert rc == 0
    return np.load(home / f"{name}.npy")


@pytest.mark.parametrize("voice, ref", [("alice", []), ("bob", ["--ref-text", REF_TEXT])], ids=["xvector", "icl"])
def test_a_saved_voice_speaks_as_its_recording(home, voice, ref):
    got = _speak(home, f"saved_{voice}", "--voice", voice)
    want = _speak(home, f"ref_{voice}", "--ref-audio", "ref.wav", *ref)
    assert got.shape == (FRAMES, 16)
    np.testing.assert_array_equal(got, want)


def test_the_two_modes_differ_and_are_listed(home, capsys):
    a, b = (_speak(home, f"list_{v}", "--voice", v) for v in ("alice", "bob"))
    assert not np.array_equal(a, b)
    capsys.readouterr()
    rc, _, _ = run_relative(home, ["voices", "--model-dir", "root", "--plan", "plan/plan.json", "--json"])
    assert rc == 0
    saved = {v["name"]: v for v in json.loads(capsys.readouterr().out)["saved_voices"]}
    assert set(saved) == {"alice", "bob"}
    assert not saved["alice"]["in_context"] and saved["bob"]["in_context"] and saved["bob"]["ref_text"] == REF_TEXT


def _one_line(home, argv, capsys, match):
    capsys.readouterr()
    rc, err, _ = run_relative(home, argv, capsys)
    lines = [ln for ln in err.splitlines() if ln.startswith("rkspeech:") or "error" in ln.lower()]
    assert rc == 2, err
    assert "Traceback" not in err and match in err, err
    return lines


def test_bad_inputs_are_one_line(home, capsys):
    save = ["voices", "save", "--plan", "plan/plan.json", "--model-dir", "root", "--ref-audio", "ref.wav"]
    _one_line(home, [*save[:2], "alice", *save[2:]], capsys, "already saved")
    _one_line(home, [*save[:2], "no/slash", *save[2:]], capsys, "voice name")
    speak = ["speak", TEXT, "--model-dir", "root", "--plan", "plan/plan.json", "-o", "x.wav", "--max-frames", "2"]
    _one_line(home, [*speak, "--voice", "nobody"], capsys, "saved: alice, bob")
    _one_line(home, [*speak, "--voice", "alice", "--ref-audio", "ref.wav"], capsys, "give no --speaker")
    voices = home / "plan" / "voices"
    try:
        (voices / "carl.voice").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
        _one_line(home, [*speak, "--voice", "alice"], capsys, "carl.voice: not a readable voice file")
    finally:
        (voices / "carl.voice").unlink()
    other = voices / "dave.voice"
    try:  # alice's numbers, another model's fingerprint
        with np.load(voices / "alice.voice", allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        meta = {**json.loads(str(arrays.pop("meta"))), "name": "dave", "speaker_fingerprint": "0" * 16}
        with open(other, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta)), **arrays)
        _one_line(home, [*speak, "--voice", "dave"], capsys, "saved from another model")
    finally:
        other.unlink()


def test_serve_offers_the_saved_voices(home, tts_base_ckpt):
    """The real clients: the Wyoming voice list and the OpenAI ``voice``, the samples of ``speak --voice``
    (no language: the wyoming client sends none beside a voice's name)."""
    pytest.importorskip("wyoming")
    pytest.importorskip("uvicorn")
    openai = pytest.importorskip("openai")
    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe
    from wyoming.tts import Synthesize, SynthesizeVoice

    from rkspeech.models.qwen3_tts.generate import GenerationOptions
    from rkspeech.runtime.tts.speak import Speaker
    from rkspeech.runtime.wav import read_wav_int16
    from rkspeech.serve.audio import wav_header
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.options import ServeOptions
    from rkspeech.serve.server import ServerThread

    _speak(home, "served_bob", "--voice", "bob")
    pcm = read_wav_int16(home / "served_bob.wav")[0].astype("<i2").tobytes()
    speaker = Speaker(tts_base_ckpt, home / "plan" / "plan.json", threads=1,
                      options=GenerationOptions.greedy(max_new_tokens=FRAMES + 1))
    st = ServerThread(ServePool(speakers=[speaker], max_queue=2),
                      ServeOptions(wyoming="tcp://127.0.0.1:0", http="127.0.0.1:0")).start()
    try:
        client = openai.OpenAI(base_url=f"http://{st.addresses['http']}/v1", api_key="unused", max_retries=0,
                               timeout=300)
        with client.audio.speech.with_streaming_response.create(model="tts-1", voice="bob", input=TEXT,
                                                                 response_format="wav") as response:
            assert b"".join(response.iter_bytes()) == wav_header(24000) + pcm
        with pytest.raises(openai.BadRequestError, match="unknown voice 'carol'.*alice, bob"):
            client.audio.speech.create(model="tts-1", voice="carol", input=TEXT)
        host, port = st.addresses["wyoming"].removeprefix("tcp://").rsplit(":", 1)

        async def go():
            async with AsyncTcpClient(host, int(port), read_timeout=300) as c:
                await c.write_event(Describe().event())
                info = await c.read_event()
                await c.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="bob")).event())
                events = []
                while not events or events[-1].type not in ("audio-stop", "error"):
                    events.append(await c.read_event())
            return info, events

        info, events = asyncio.run(go())
        assert [v["name"] for p in info.data["tts"] for v in p["voices"]] == ["alice", "bob"]
        assert events[-1].type == "audio-stop", events[-1]
        got = b"".join(e.payload for e in events if e.type == "audio-chunk")
        assert len(got) == len(pcm), (len(got), len(pcm))
        assert got == pcm
    finally:
        assert st.stop()
