"""Shared fixtures: synthetic checkpoints written once per test session; and how the suite is
split between pytest-xdist workers (``scripts/test.sh`` runs ``-n N --dist loadgroup``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("RKSPEECH_THREADS", "2")

#: session fixtures that cost a build (the reduced vocoder build: ~200 s): the test modules using
#: one of them run on one xdist worker, so each is built once per run, not once per worker
SHARED_BUILDS = ("reduced_vocoder_build", "tts_base_build", "trained_tts_ckpt", "published_ckpt",
                 "tts_massive_ckpt", "batch_plans", "batch_plan")


def worker_groups(modules: dict[str, set[str]]) -> dict[str, str]:
    """module -> xdist group: one group per module (its module-scoped fixtures are built once),
    joined where modules share a fixture of ``SHARED_BUILDS`` (``modules``: module -> the
    fixture names its tests use)."""
    parent = {m: m for m in modules}

    def root(m: str) -> str:
        while parent[m] != m:
            parent[m] = parent[parent[m]]
            m = parent[m]
        return m

    by_fixture: dict[str, str] = {}
    for module, names in sorted(modules.items()):
        for name in SHARED_BUILDS:
            if name in names:
                if name in by_fixture:
                    parent[root(module)] = root(by_fixture[name])
                else:
                    by_fixture[name] = module
    return {m: root(m) for m in modules}


def source_groups(tests: Path) -> dict[str, str]:
    """``worker_groups`` of every test module under ``tests``, keyed by its path from the
    repository root (as in node ids); a module uses a shared fixture where one of its functions
    takes it as a parameter."""
    import re

    modules = {}
    for path in sorted(tests.rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        modules[path.relative_to(tests.parent).as_posix()] = {
            name for name in SHARED_BUILDS if re.search(rf"def \w+\([^)]*\b{name}\b", text)}
    return worker_groups(modules)


@pytest.hookimpl(optionalhook=True)  # plain pytest (-p no:xdist, or xdist absent) runs too
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup``: xdist's scope scheduler with ``source_groups`` as the scopes (each group
    runs whole on one worker, the largest first).  Groups are read from the sources because the
    controller never collects, and because xdist 3.8's own ``xdist_group`` marks do not take under
    pytest 9 (a test's node id no longer comes from the attribute xdist rewrites)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    groups = source_groups(Path(__file__).resolve().parent)

    class ModuleGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return groups.get(module, module)

    return ModuleGroups(config, log)


@pytest.fixture(scope="session")
def reduced_ckpt(tmp_path_factory):
    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint

    root = tmp_path_factory.mktemp("ckpt_reduced")
    write_checkpoint(root, "reduced", seed=0)
    return root


@pytest.fixture(scope="session")
def published_ckpt(tmp_path_factory):
    from rkspeech.models.qwen3_tts.synthetic_vocoder import write_checkpoint

    root = tmp_path_factory.mktemp("ckpt_published")
    write_checkpoint(root, "published", seed=0)
    return root


@pytest.fixture(scope="session")
def reduced_model(reduced_ckpt):
    import torch

    torch.set_num_threads(2)
    from rkspeech.models.qwen3_tts.vocoder_checkpoint import load_vocoder

    model, cfg, _ = load_vocoder(reduced_ckpt)
    return model


@pytest.fixture(scope="session")
def tts_custom_ckpt(tmp_path_factory):
    """A reduced custom-voice Qwen3-TTS model root (seed 0): its speech_tokenizer/ is the
    ``reduced_ckpt`` vocoder, so the session's reduced step graphs decode its codes."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    return write_tts_checkpoint(tmp_path_factory.mktemp("tts_custom_reduced"), "reduced", "custom-voice", 0)


@pytest.fixture(scope="module")
def tts(tts_custom_ckpt):
    """``tts_custom_ckpt`` loaded as a ``TTSModel``, one per test module (tests swap its backends
    and restore them)."""
    from rkspeech.models.qwen3_tts.generate import TTSModel

    return TTSModel.load(tts_custom_ckpt)


@pytest.fixture(scope="session")
def reduced_vocoder_build(reduced_ckpt, tmp_path_factory):
    """``rkspeech build qwen3-tts-vocoder`` of the reduced checkpoint (B=16, first step B=4, 3
    verify steps on the simulator), run as a user runs it: from a folder of their own, relative
    paths in and out.  ``(out, report)``; shared by the vocoder build tests and ``build qwen3-tts
    --vocoder-plan`` (the custom-voice root's speech tokenizer is this checkpoint)."""
    import json
    import os

    from rkfixtures import run_relative

    home = tmp_path_factory.mktemp("build")
    rc, _, new = run_relative(home, ["build", "qwen3-tts-vocoder", "--model-dir", os.path.relpath(reduced_ckpt, home),
                                     "--target", "rk3588", "-B", "16", "--first-length", "4", "--out-dir", "out",
                                     "--verify-steps", "3", "--timeout", "900"])
    assert rc == 0
    stray = {p for p in new if not p.startswith("out/")}
    assert not stray, f"the build wrote outside its --out-dir folder: {sorted(stray)}"
    out = home / "out"
    return out, json.loads((out / "build-report.json").read_text())


@pytest.fixture(scope="session")
def placeholder_vocoder_plan(tmp_path_factory, reduced_model):
    """A qwen3-tts-vocoder plan for rk3588 whose .rknn files are placeholders (24 bytes, never
    loaded); its ONNX are the session's reduced step graphs (B=16, first B=4).  ``build qwen3-tts
    --vocoder-plan`` takes it without converting anything, and ``speak --backend ort`` runs its
    ONNX; the reduced custom-voice roots' speech tokenizer is this checkpoint."""
    from rkspeech.contracts.read import read_contract
    from rkspeech.plan.plan import write_plan
    from streaming_fixtures import step_graphs

    graphs = step_graphs(tmp_path_factory, reduced_model)
    folder = tmp_path_factory.mktemp("voc_plan")
    rknn = {}
    for role in graphs:
        rknn[role] = folder / f"{role}.rknn"
        rknn[role].write_bytes(b"placeholder, never loaded")
    return write_plan(folder / "plan.json", placement="npu", target="rk3588",
                      contracts={r: read_contract(p) for r, p in graphs.items()}, rknn=rknn, onnx=graphs)


@pytest.fixture(scope="session")
def trained_tts_ckpt(request, tmp_path_factory):
    """``(root, training record)``: the confident reduced custom-voice root (seed 0,
    ``TrainOptions(steps=TRAINED_TEST_STEPS)``), its weights cached in pytest's cache folder under
    the trained checkpoint's key, so only the first session trains (~20 s) and later ones copy."""
    from rkfixtures import TRAINED_TEST_STEPS
    from rkspeech.models.qwen3_tts.trained import TrainOptions, write_trained_tts_checkpoint

    cache = request.config.cache.mkdir("rkspeech") / "trained-tts" if getattr(request.config, "cache", None) else None
    return write_trained_tts_checkpoint(tmp_path_factory.mktemp("trained"), "reduced", "custom-voice", 0,
                                        options=TrainOptions(steps=TRAINED_TEST_STEPS), cache_dir=cache)


@pytest.fixture(scope="session")
def batch_plans(trained_tts_ckpt, placeholder_vocoder_plan, tmp_path_factory):
    """``get(variant="int4", root=None) -> (root, plan.json)``: ``root`` (default the trained
    reduced root) built with both CPU stages ``cpu-VARIANT`` and lanes graphs for 3 streams
    (``build qwen3-tts --streams 3``, gate off), from a folder of its own with relative paths; its
    vocoder the placeholder plan's ONNX.  Each built once."""
    from rkfixtures import run_relative

    built: dict = {}

    def get(variant: str = "int4", root=None):
        root = Path(root or trained_tts_ckpt[0])
        key = (variant, str(root))
        if key not in built:
            home = tmp_path_factory.mktemp(f"batch_{variant}")
            rc, _, _ = run_relative(home, ["build", "qwen3-tts", "--model-dir", os.path.relpath(root, home),
                                           "--out-dir", "out", "--vocoder-plan",
                                           os.path.relpath(placeholder_vocoder_plan, home),
                                           "--talker", f"cpu-{variant}", "--code-predictor", f"cpu-{variant}",
                                           "--cpu-threads", "1", "--talker-capacity", "96", "--talker-prefill", "16",
                                           "--skip-sim", "--gate", "off", "--streams", "3"])
            assert rc == 0
            built[key] = (root, home / "out" / "plan.json")
        return built[key]

    return get


@pytest.fixture(scope="session")
def batch_plan(batch_plans):
    """``batch_plans("int4")``: the trained reduced root's int4 plan with lanes for 3 streams."""
    return batch_plans("int4")


@pytest.fixture(scope="session")
def tts_massive_ckpt(tmp_path_factory):
    """``tts_custom_ckpt``'s model (reduced custom-voice, seed 0) with the published 0.6B's massive
    activation in its code predictor (``synth-checkpoint qwen3-tts --massive-activations``; the
    record in ``model.safetensors``' metadata; ~35 s here)."""
    from rkspeech.models.qwen3_tts.massive_activations import write_massive_activations
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    root = write_tts_checkpoint(tmp_path_factory.mktemp("tts_massive_reduced"), "reduced", "custom-voice", 0)
    write_massive_activations(root)
    return root


@pytest.fixture(scope="session")
def tts_base_ckpt(tmp_path_factory):
    """A reduced Base (voice clone) Qwen3-TTS model root (seed 0; its speech tokenizer, with the
    encoder half, is the ``reduced_ckpt`` vocoder)."""
    from rkspeech.models.qwen3_tts.synthetic_tts import write_tts_checkpoint

    return write_tts_checkpoint(tmp_path_factory.mktemp("tts_base_reduced"), "reduced", "base", 0)


@pytest.fixture(scope="session")
def tts_base_build(tts_base_ckpt, placeholder_vocoder_plan, tmp_path_factory):
    """``build qwen3-tts`` of ``tts_base_ckpt`` as a user runs it (``rkfixtures.tts_base_build_argv``):
    ``(home, home / "out")``, its plan with the two voice-cloning graphs (~25 s here)."""
    from rkfixtures import run_relative, tts_base_build_argv

    home = tmp_path_factory.mktemp("clone_build")
    rc, _, new = run_relative(home, tts_base_build_argv(tts_base_ckpt, placeholder_vocoder_plan, home))
    assert rc == 0
    assert {"out/clone/speaker_encoder.onnx", "out/clone/speech_encoder.onnx"} <= new
    return home, home / "out"
