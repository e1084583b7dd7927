"""Whisper's audio window, and the shorter windows (buckets) an encoder may also be built for
(standard library only: the runtime and the CLI use it).

Every Whisper size reads 30 s windows: 16 kHz audio, hop 160 -> 100 mel frames a second ->
3000 mel frames -> 1500 encoder frames (conv2 has stride 2).  The decoder's cross-attention takes
whatever number of encoder frames it is given (CTranslate2's ``Whisper.generate`` accepts a
``[1, 500, d]`` encoder output; checked with CTranslate2 4.8.5), but Whisper was trained on 30 s
windows, so a shorter window changes transcripts somewhat (docs/whisper-buckets.md measures
how much).  An encoder exported for another window (the model zoo's 20 s one) is therefore
refused as *the* encoder; a shorter window is only run as a bucket beside the 30 s one, for audio
that fits in it (``runtime.whisper.buckets``).
"""

SAMPLE_RATE = 16000
#: Mel frames per second in Whisper's front end (hop 160 at 16 kHz).
FRAMES_PER_SECOND = 100
HOP_SAMPLES = SAMPLE_RATE // FRAMES_PER_SECOND
WINDOW_SECONDS = 30
WINDOW_FRAMES = WINDOW_SECONDS * FRAMES_PER_SECOND
ENCODER_FRAMES = WINDOW_FRAMES // 2


def output_frames(n_frames: int) -> int:
    """Encoder frames for ``n_frames`` mel frames: conv1 keeps the length, conv2 (k3, s2, p1) halves it."""
    return (n_frames + 2 * 1 - 3) // 2 + 1


def bucket_frames(seconds: int) -> int:
    """Mel frames of a window of ``seconds`` (whole seconds, 1..30); ValueError otherwise."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 1 <= seconds <= WINDOW_SECONDS:
        raise ValueError(f"a Whisper window is a whole number of seconds from 1 to {WINDOW_SECONDS}, got {seconds!r}")
    return seconds * FRAMES_PER_SECOND


def holds(frames: int, samples: int) -> bool:
    """True when a window of ``frames`` mel frames holds ``samples`` of audio: faster-whisper's
    features of N samples have ``N // 160`` content frames (the waveform padded by 160 samples,
    a centred STFT, its last frame dropped, then ``content_frames = frames - 1``), and its window
    loop never reads past them."""
    return samples // HOP_SAMPLES <= frames
