"""Whisper's fixed audio window (standard library only: the runtime and the CLI use it).

Every Whisper size reads 30 s windows: 16 kHz audio, hop 160 -> 100 mel frames a second ->
3000 mel frames -> 1500 encoder frames (conv2 has stride 2).  The decoder's cross-attention is
sized for 1500 frames, so an encoder exported for another window (the model zoo's 20 s one)
does not fit a stock decoder.
"""

SAMPLE_RATE = 16000
#: Mel frames per second in Whisper's front end (hop 160 at 16 kHz).
FRAMES_PER_SECOND = 100
WINDOW_FRAMES = 3000
ENCODER_FRAMES = WINDOW_FRAMES // 2
