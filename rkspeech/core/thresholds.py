"""Pass marks of the checks (standard library only: the CLI uses them as flag defaults).

* ``FP32_MIN_SNR_DB``: a float32 step (torch, onnxruntime) stepped over a whole signal against
  the full decode.  Measured 113-115 dB on synthetic checkpoints; a zeroed KV history or a 0/1
  ``cache_valid`` lands below 40 dB (tests/pipelines/test_stepwise.py), so 100 dB separates them cleanly.
* ``PHASE_SNAKE_FP32_MIN_SNR_DB``: the same check for the npu graph with the phase Snake
  (``stepgraph.phase_snake``), whose float32 graph is approximate by design: its phase sum runs
  at magnitude 1536 (2^-13 steps).  Measured on the reduced checkpoint, B=16: 72.2 dB
  (onnxruntime), 30 dB above the broken-cache cases.
* ``SIM_MIN_SNR_DB``: the rknn-toolkit2 simulator (fp16) stepped the same way.  Measured
  47.2-47.3 dB at the published size and 47-49 dB on reduced checkpoints; a broken cache or
  graph falls far below it.
"""

FP32_MIN_SNR_DB = 100.0
PHASE_SNAKE_FP32_MIN_SNR_DB = 60.0
SIM_MIN_SNR_DB = 40.0

#: ``rkspeech check-board``: every output of a golden replay against the simulator's, SNR at
#: least ``SIM_MIN_SNR_DB`` and whole-tensor cosine at least this.  An error at 40 dB SNR is
#: 1e-4 of the signal's power, a cosine of ~0.99995 for an error unrelated to the signal; 0.9999
#: leaves that margin, so the SNR mark decides and the cosine mark catches a scaled output
#: (which SNR alone grades the same as noise).
GOLDEN_MIN_COSINE = 0.9999

#: ``rkspeech check-board`` on a CPU stage's golden (``pipelines.cpu_goldens``: a generation's real
#: calls and the build host's onnxruntime outputs): the board's onnxruntime computes the same int8 /
#: int4 graph with its own kernels (ARM dot-product vs x86 AVX, another onnxruntime release), so the
#: outputs are not bit-equal; a broken kernel or graph gives noise.  Measured: docs/board.md.
CPU_GOLDEN_MIN_SNR_DB = 25.0
CPU_GOLDEN_MIN_COSINE = 0.998
#: a near-tie: a top-1 margin (top-1 minus top-2, over the logits' rms) below this many times the
#: logits' error (rms x 10^(-SNR / 20)) may flip under another machine's arithmetic; a decided
#: one may not (``core.compare.top1_rows``, ``board.compare``)
TIE_ERRORS = 6
#: logits (the heads', the frame graph's): every row whose golden top-1 margin is at least this many
#: times the row's rms keeps its argmax: ``TIE_ERRORS`` x the error of an output at the SNR mark
CPU_GOLDEN_TIE = TIE_ERRORS * 10 ** (-CPU_GOLDEN_MIN_SNR_DB / 20)

# The accuracy gate of ``build qwen3-tts`` (``accuracy.gate``): a quantized talker / code predictor
# against its fp32 graph, greedy, over the gate's 20 utterances.  Measured on the confident
# (trained) reduced checkpoint: docs/accuracy-gate.md.
GATE_MIN_AGREEMENT = 0.99  # teacher-forced top-1 agreement per stage (issue 27's acceptance)
GATE_MIN_SAME_STOP = 0.95  # share of utterances whose free-running stop frame is fp32's (issue 27)
GATE_MIN_LOGIT_SNR_DB = 15.0  # teacher-forced logit SNR per stage
GATE_MIN_FRAMES = 300  # reference frames the figures must cover (issue 27)
GATE_MIN_STOPPED_REFERENCE = 0.5  # utterances the fp32 run must end by itself (else "same stop" is vacuous)
#: The Qwen3-ASR gate (``build qwen3-asr``, ``accuracy.asr_gate``) takes the marks above but this
#: logit SNR: its head is the 151936-row tied embedding, quantized with the stack (the talker's
#: codec head stays fp32).  Measured on the trained reduced root, 20 held-out clips
#: (docs/qwen3-asr.md, Accuracy gate): the default int4 (block 128, symmetric) decoder 14.7 dB
#: with every decision and transcript the fp32's (stack alone 16.3 dB, head alone 19.7 dB);
#: damaged: layer 1's down_proj scales x3 6.9 dB (98.9 %), an o_proj zeroed 2.1 / 9.2 dB.
ASR_GATE_MIN_LOGIT_SNR_DB = 12.0
#: What the build does with the gate (``build qwen3-tts --gate``): refuse an unsafe placement (the
#: default), warn (the plan is written, the failures recorded as a warning), off (not measured).
GATE_MODES = ("refuse", "warn", "off")

# The speech check (``rkspeech speech-check qwen3-tts``, ``accuracy.speech_judge``): held-out
# sentences spoken through the fp32 stages and through the plan, both transcribed by Whisper.
#: the plan's character error rate may exceed fp32's by at most this (public practice: a CER delta
#: below 0.05 between an accelerated Qwen3-TTS and its reference, qwen3-tts-triton).  Measured on
#: espeak-ng speech through Whisper tiny.en, 5 sentences (docs/speech-check.md): the same speech on
#: both sides 0.000; under 40 dB white noise -0.013 .. -0.008; 30 dB up to +0.048; 5 dB +0.27 .. +0.29.
SPEECH_MAX_CER_DELTA = 0.05
#: above this character error rate the fp32 side does not speak: nothing is judged.  Measured:
#: clean espeak-ng 0.024 (5 longest sentences) and 0.127 (all 18) through tiny.en; a synthetic
#: root's noise 1.000 (Whisper heard nothing), docs/speech-check.md.
SPEECH_MAX_REFERENCE_CER = 0.5

# Voice cloning's graphs (``build qwen3-tts`` on a Base root, ``pipelines.clone_encoders``): each
# against the torch path over the build's reference clips, float32 on onnxruntime.
#: the x-vector the runtime computes (numpy mel -> speaker encoder graph) against the torch path's
#: (torch mel -> torch module): the largest element difference and the lowest cosine per clip.
#: Measured (docs/tts-build.md "Voice cloning"): 1.4e-6 on the reduced root, 8.9e-7 at the published
#: size (the numpy FFT in float64 and the graph's mean pooling round differently); a mel padded with
#: zeros instead of reflected at its edges: 0.0086, 86x the mark.
CLONE_XVECTOR_MAX_ABS = 1e-4
CLONE_XVECTOR_MIN_COSINE = 0.99999
#: codes of the speech encoder graph that may differ from the torch module's: none
CLONE_CODES_MAX_DIFFERENT = 0
