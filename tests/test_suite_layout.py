"""The suite collects: pytest's default import mode (``prepend``, no ``__init__.py`` in tests/)
imports each test module by its basename, so two ``test_x.py`` in different folders stop the
whole run at collection ("import file mismatch"). This test names the clash in one line
instead of leaving it to the CI's collection error.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def duplicate_basenames(root: Path) -> dict[str, list[str]]:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("test_*.py")):
        seen[path.name].append(str(path.relative_to(root)))
    return {name: paths for name, paths in seen.items() if len(paths) > 1}


def test_test_module_basenames_are_unique():
    clashes = duplicate_basenames(TESTS)
    assert not clashes, f"test modules sharing a basename (rename one): {clashes}"


def test_clash_is_found(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_same.py").write_text("")
    assert duplicate_basenames(tmp_path) == {"test_same.py": ["a/test_same.py", "b/test_same.py"]}


def test_modules_sharing_a_costly_fixture_run_on_one_worker():
    """``conftest.worker_groups``: each module its own group, modules that share a fixture of
    ``SHARED_BUILDS`` one group (transitively), others apart."""
    from conftest import worker_groups

    groups = worker_groups({
        "a.py": {"reduced_vocoder_build", "tmp_path"},
        "b.py": {"reduced_vocoder_build", "trained_tts_ckpt"},
        "c.py": {"trained_tts_ckpt"},
        "d.py": {"tts_custom_ckpt", "tmp_path"},  # cheap: not shared
        "e.py": {"tts_custom_ckpt"},
    })
    assert groups["a.py"] == groups["b.py"] == groups["c.py"]
    assert len({groups["a.py"], groups["d.py"], groups["e.py"]}) == 3


def test_this_suite_keeps_the_vocoder_build_and_the_trained_root_on_one_worker_each():
    from conftest import source_groups

    groups = source_groups(TESTS)
    assert groups["tests/board/test_board.py"] == groups["tests/pipelines/test_build_tts.py"]
    assert groups["tests/accuracy/test_npu_gate.py"] == groups["tests/accuracy/test_accuracy_gate.py"]
    assert groups["tests/board/test_board.py"] != groups["tests/accuracy/test_npu_gate.py"]
    assert groups["tests/test_layering.py"] == "tests/test_layering.py"
