"""rkspeech: speech models onto the Rockchip NPU, verified at every stage.

Heavy packages (torch, onnx, onnxruntime, rknn-toolkit2, rknn-toolkit-lite2) are imported
lazily inside the functions that need them, so a runtime-only install (a board with numpy and
rknn-toolkit-lite2) can import the package.
"""

__version__ = "0.1.0"
