"""The ONNX opset of every graph rkspeech exports.

17: the highest opset rknn-toolkit2 2.5.0 documents for ``load_onnx``, and the one every graph here
(vocoder steps in both formulations, Whisper encoders) was converted and simulated with.
"""

OPSET = 17
