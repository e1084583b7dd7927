"""Imports point downward: a package may import the packages below it in LAYERS, never above.

Reads every `import` / `from ... import` in rkspeech/ with the standard library's `ast` (module
level and inside functions; relative imports resolved), without importing the package, and maps
each to (importing top-level package, imported top-level package). The root module
(`rkspeech/__init__.py`, only `__version__`) and `rkspeech/__main__.py` are outside the layers.

UPWARD_ALLOWED is a ratchet: today's upward imports, each with its reason. The test fails on an
upward import not in it, and on an entry that no longer exists, so the list only shrinks
(CONVENTIONS.md, "Layers"; issue 25).

The torch-free rule beside it (issue 38): the board path (``BOARD_PACKAGES`` and ``BOARD_MODULES``:
what ``pip install .[board]`` runs, without torch) loads no torch when imported, imports at module
level only board-path modules, and imports torch inside a function only where ``TORCH_DOORS``
says why (a ratchet too).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import lru_cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "rkspeech"

# Lowest first. The one place the order is written (CONVENTIONS.md describes it).
LAYERS = (
    "core",
    "contracts",
    "models",
    "stepgraph",
    "export",
    "lint",
    "convert",
    "plan",
    "runtime",
    "verify",
    "accuracy",
    "estimate",
    "board",
    "pipelines",
    "serve",
    "cli",
)

# "importer module path -> imported package": reason. May only shrink.
UPWARD_ALLOWED: dict[str, str] = {}


def _module_parts(path: Path) -> list[str]:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _imported_modules(node: ast.AST, path: Path) -> list[list[str]]:
    if isinstance(node, ast.Import):
        return [alias.name.split(".") for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    if node.level:
        base = _module_parts(path)
        if path.name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        full = base + (node.module.split(".") if node.module else [])
    else:
        full = node.module.split(".")
    if full == ["rkspeech"]:  # from rkspeech import cli  -> the subpackage named
        return [["rkspeech", alias.name] for alias in node.names]
    return [full]


@lru_cache(maxsize=1)
def collect_imports() -> tuple[tuple[str, str, str, int, bool]]:
    """(importer path, importer package, imported package, line, inside a function)."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE.parent).as_posix()
        parts = rel.split("/")
        if len(parts) < 3:  # rkspeech/__init__.py, rkspeech/__main__.py
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), rel)
        in_function = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                in_function.update(id(n) for n in ast.walk(node) if n is not node)
        for node in ast.walk(tree):
            for target in _imported_modules(node, path):
                if len(target) < 2 or target[0] != "rkspeech":
                    continue
                if not (PACKAGE / target[1]).is_dir():  # from rkspeech import __version__
                    continue
                found.append((rel, parts[1], target[1], node.lineno, id(node) in in_function))
    return tuple(found)


def upward_imports(imports):
    rank = {name: i for i, name in enumerate(LAYERS)}
    return [imp for imp in imports if imp[1] != imp[2] and rank[imp[1]] < rank[imp[2]]]


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert len(LAYERS) == len(set(LAYERS))
    assert packages == set(LAYERS), (
        f"place new packages in LAYERS: missing {sorted(packages - set(LAYERS))}, "
        f"stale {sorted(set(LAYERS) - packages)}"
    )


def test_no_upward_import_outside_allow_list():
    upward = upward_imports(collect_imports())
    edges = defaultdict(list)
    for rel, _, imported, line, in_function in upward:
        edges[f"{rel} -> {imported}"].append(f"{rel}:{line}{' (in a function)' if in_function else ''}")
    new = {edge: where for edge, where in edges.items() if edge not in UPWARD_ALLOWED}
    gone = sorted(set(UPWARD_ALLOWED) - set(edges))
    assert not new, (
        "upward import (a lower package importing a higher one; order in LAYERS, lowest first):\n"
        + "\n".join(f"  {w}" for where in new.values() for w in where)
        + f"\nmove the code down or the import up; {len(edges)} upward edges now, "
        f"{len(UPWARD_ALLOWED)} allowed"
    )
    assert not gone, (
        "these allowed upward imports are gone; delete them from UPWARD_ALLOWED "
        "(the list only shrinks) and update the count in CONVENTIONS.md:\n"
        + "\n".join(f"  {edge}" for edge in gone)
    )


def test_no_package_cycle_besides_allowed_edges():
    graph = defaultdict(set)
    for rel, importer, imported, _, _ in collect_imports():
        if importer != imported and f"{rel} -> {imported}" not in UPWARD_ALLOWED:
            graph[importer].add(imported)
    # Peel off packages that import nothing or are imported by nothing among those left;
    # what remains lies on (or between) cycles.
    left = set(LAYERS)
    while True:
        peel = {
            name for name in left
            if not (graph[name] & left) or not any(name in graph[other] for other in left)
        }
        if not peel:
            break
        left -= peel
    cyclic = sorted(left)
    assert not cyclic, (
        f"import cycle between packages {cyclic} (not counting the {len(UPWARD_ALLOWED)} "
        "allowed upward edges)"
    )


# -- the torch-free rule: what the board path may import --------------------------------------------
# The board path: what `pip install .[board]` runs (speak, serve, transcribe on a plan), which has no
# torch (tests/board/test_board_extra.py): these packages whole, and the modules of other packages they
# import at module level.
BOARD_PACKAGES = ("core", "contracts", "plan", "runtime", "serve")
BOARD_MODULES = (
    "models.qwen3_tts.loop", "models.qwen3_tts.prompt", "models.qwen3_tts.numpy_host", "models.qwen3_tts.clone_inputs",
    "models.qwen3_tts.generate", "models.qwen3_tts.sampling", "models.qwen3_tts.backends",
    "models.qwen3_tts.tts_config", "models.qwen3_tts.tts_checkpoint", "models.qwen3_tts.text_tokenizer",
    "models.qwen3_tts.vocoder_checkpoint", "models.qwen3_tts.vocoder_config", "models.whisper.window",
    "stepgraph.host", "convert.conversion",
    "models.qwen3_asr.asr_config", "models.qwen3_asr.geometry", "models.qwen3_asr.features", "models.qwen3_asr.prompt",
    "models.qwen3_asr.transcript_text", "models.qwen3_asr.languages", "models.qwen3_asr.long_audio",
)
TORCH = ("torch", "torchaudio", "transformers")
# Where a board-path module may import torch, inside a function only ("module:function" -> why).
# A torch-only feature reached from the board path; the test fails on a torch import elsewhere, and
# on an entry that no longer imports torch, so the list only shrinks.
TORCH_DOORS: dict[str, str] = {
    "models.qwen3_tts.backends:TorchTalker.forward": "the torch reference talker (host=torch)",
    "models.qwen3_tts.backends:TorchCodePredictor.__init__": "the torch reference code predictor (host=torch)",
    "models.qwen3_tts.generate:TTSModel.__init__": "TTSModel is the generation loop over the torch host",
    "models.qwen3_tts.generate:TTSModel.speaker_embedding": "TTSModel's speaker encoder (torch)",
    "models.qwen3_tts.generate:TTSModel.generate_frames": "TTSModel: the prompt under torch.no_grad",
    "models.qwen3_tts.generate:TTSModel._frames": "TTSModel: the frames under torch.no_grad",
    "models.qwen3_tts.tts_checkpoint:TTSNet.__init__": "the torch model of a checkpoint (host=torch)",
    "models.qwen3_tts.tts_checkpoint:load_tts_net": "the torch model of a checkpoint (host=torch)",
    "models.qwen3_tts.vocoder_checkpoint:read_decoder_state": "the vocoder's torch weights (build, reference)",
    "models.qwen3_tts.vocoder_checkpoint:load_vocoder": "the vocoder's torch model (build, reference)",
    "runtime.runners.torch_step:TorchStepRunner._infer": "the vocoder step in torch, a reference runner",
    "runtime.tts.codes:load_codes_file": "codes saved as .pt are read with torch.load",
    "runtime.tts.numpy_loop:NumpyTTSModel.speaker_embedding": "a plan without the speaker encoder graph (built "
                                                              "before it) runs it in torch; without torch, one line",
    "runtime.tts.talker_backend:GraphTalker.__init__": "checking a talker graph against a torch module (host=torch)",
    "stepgraph.host:torch_inverse_frequencies": "the torch host's RoPE recipe (bit-equal to the reference)",
    "stepgraph.host:rope_cos_sin": "the torch host's RoPE recipe (bit-equal to the reference)",
}


def _module_name(path: Path) -> str:
    return ".".join(_module_parts(path)[1:])


def _on_board(module: str) -> bool:
    return (module.split(".")[0] in BOARD_PACKAGES or module in BOARD_MODULES
            or any(b.startswith(module + ".") for b in BOARD_MODULES))  # a board module's parent package


def _resolve(parts: list[str]) -> str | None:
    """The rkspeech module ``parts`` names (``from a.b import c``: a.b.c when it is a module, else a.b)."""
    for n in range(len(parts), 1, -1):
        p = PACKAGE.parent.joinpath(*parts[:n])
        if p.with_suffix(".py").is_file() or (p / "__init__.py").is_file():
            return ".".join(parts[1:n])
    return None


@lru_cache(maxsize=1)
def torch_imports() -> tuple[dict, list]:
    """``({module: rkspeech modules it imports at module level}, [(module, function or "", imported,
    line)])``: every import of torch or of an rkspeech module, with the function it stands in."""
    top: dict[str, set] = {}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if len(path.relative_to(PACKAGE.parent).parts) < 3:
            continue
        name = _module_name(path)
        top[name] = set()

        def visit(node, scope):
            for child in ast.iter_child_nodes(node):
                inner = scope
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    inner = scope + [(child.name, not isinstance(child, ast.ClassDef))]
                for target in _imported_modules(child, path):
                    function = ".".join(n for n, _ in scope) if any(f for _, f in scope) else ""
                    if target[0] in TORCH:
                        found.append((name, function, target[0], child.lineno))
                    elif target[0] == "rkspeech" and (module := _resolve(target)) is not None:
                        found.append((name, function, module, child.lineno))
                        if not function:  # importing a.b.c imports a.b and a.b.c
                            parts = module.split(".")
                            top[name].update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
                visit(child, inner)

        visit(ast.parse(path.read_text(encoding="utf-8")), [])
    return top, found


def _torch_at_import(top: dict) -> set[str]:
    """Modules whose import loads torch: torch at module level, or a module (or package) that does."""
    _, found = torch_imports()
    heavy = {m for m, f, imported, _ in found if not f and imported in TORCH}
    while more := {m for m, deps in top.items() if m not in heavy and deps & heavy}:
        heavy |= more
    return heavy


def test_board_path_imports_no_torch():
    top, found = torch_imports()
    heavy = _torch_at_import(top)
    board = sorted(m for m in top if _on_board(m))
    assert set(BOARD_MODULES) <= set(top), f"BOARD_MODULES names no module: {sorted(set(BOARD_MODULES) - set(top))}"
    loads_torch = [m for m in board if m in heavy]
    assert not loads_torch, f"board-path modules that load torch when imported: {loads_torch}"
    off_board = sorted({f"{m} -> {d}" for m in board for d in top[m] if not _on_board(d)})
    assert not off_board, ("a board-path module imports at module level a module not on the board path; "
                           "add it to BOARD_MODULES (then it must be torch-free too) or import it lazily:\n  "
                           + "\n  ".join(off_board))
    doors = defaultdict(list)
    for module, function, imported, line in found:
        if _on_board(module) and function and (imported in TORCH or imported in heavy):
            doors[f"{module}:{function}"].append(f"{module.replace('.', '/')}.py:{line} imports {imported}")
    new = {k: v for k, v in doors.items() if k not in TORCH_DOORS}
    assert not new, ("a board-path module imports torch (or a module that loads it) where TORCH_DOORS does not "
                     "say why:\n  " + "\n  ".join(w for v in new.values() for w in v))
    gone = sorted(set(TORCH_DOORS) - set(doors))
    assert not gone, f"these TORCH_DOORS no longer import torch; delete them (the list only shrinks): {gone}"


def test_board_packages_import_nothing_the_board_install_lacks():
    """``pip install .[board]`` has no safetensors (tests/board/test_board_extra.py): a board package
    importing it, even inside a function, fails there (the aarch64 rehearsal's ``voices save`` did)."""
    import ast

    root = Path(__file__).resolve().parents[1] / "rkspeech"
    absent = ("safetensors",)
    bad = []
    for package in BOARD_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                bad += [f"{path.relative_to(root)}:{node.lineno} {n}" for n in names if n.split(".")[0] in absent]
    assert not bad, "board-path code imports what the board install lacks:\n  " + "\n  ".join(bad)
