"""Pass marks of the checks (standard library only: the CLI uses them as flag defaults).

* ``FP32_MIN_SNR_DB``: a float32 step (torch, onnxruntime) stepped over a whole signal against
  the full decode.  Measured 113-115 dB on synthetic checkpoints; a zeroed KV history or a 0/1
  ``cache_valid`` lands below 40 dB (tests/test_stepwise.py), so 100 dB separates them cleanly.
* ``SIM_MIN_SNR_DB``: the rknn-toolkit2 simulator (fp16) stepped the same way.  Measured
  47.2-47.3 dB at the published size and 47-49 dB on reduced checkpoints; a broken cache or
  graph falls far below it.
"""

FP32_MIN_SNR_DB = 100.0
SIM_MIN_SNR_DB = 40.0
