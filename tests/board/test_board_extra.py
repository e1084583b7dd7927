"""``pip install .[board]`` brings what a board needs to speak from a stage plan, and no torch.

The extra is read from pyproject.toml (no network here).  Measured once with the registry
(2026-12-01, docs/numpy-runtime.md): ``pip install --dry-run --report`` of ``.[board]`` into a
fresh venv resolved 28 distributions, none of them torch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "torchaudio", "onnx", "transformers", "qwen-tts", "rknn-toolkit2", "safetensors")


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def _name(req: str) -> str:
    return re.split(r"[ ;<>=!~\[]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def test_board_extra_has_no_torch():
    board = _extras()["board"]
    names = {_name(r) for r in board}
    assert not names & set(HEAVY), names & set(HEAVY)
    assert {"numpy", "onnxruntime", "tokenizers", "soundfile", "faster-whisper"} <= names
    # what `rkspeech serve` imports: a board serves
    assert {"wyoming", "starlette", "uvicorn", "python-multipart", "prometheus-client"} <= names
    lite = [r for r in board if _name(r) == "rknn-toolkit-lite2"]
    assert len(lite) == 1 and "platform_machine == 'aarch64'" in lite[0]


def test_main_install_stays_numpy_only():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [_name(d) for d in deps] == ["numpy"]
