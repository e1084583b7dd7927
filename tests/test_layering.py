"""Imports point downward: a package may import the packages below it in LAYERS, never above.

Reads every `import` / `from ... import` in rkspeech/ with the standard library's `ast` (module
level and inside functions; relative imports resolved), without importing the package, and maps
each to (importing top-level package, imported top-level package). The root module
(`rkspeech/__init__.py`, only `__version__`) and `rkspeech/__main__.py` are outside the layers.

UPWARD_ALLOWED is a ratchet: today's upward imports, each with its reason. The test fails on an
upward import not in it, and on an entry that no longer exists, so the list only shrinks
(CONVENTIONS.md, "Layers"; issue 25).
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
