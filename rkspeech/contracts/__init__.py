"""What a graph artifact says about itself, read with the standard library.

A contract is the one description of a graph's inputs, outputs and the state it carries between
calls; it travels inside the artifact (ONNX metadata key ``rkspeech.contract``, the .rknn build's
custom string).  ``vocoder`` / ``talker`` / ``code_predictor`` hold the three kinds over one base
(``base``); ``read.read_contract(path)`` reads any of them from an .onnx or an .rknn;
``onnx_file`` and ``rknn_file`` parse those containers; ``formulations`` names the vocoder
graph's formulations.  Nothing here imports numpy, torch or onnx: the board runtime and the
inspector use it as it is.
"""
