"""The package layers and their one-way arrows (docs/design.md): a module imports only from its own package or
from a package of a lower layer, lazy imports inside functions included; packages of one layer do not import each
other, so there is no circle."""

from __future__ import annotations

import ast
from pathlib import Path

from cdclake import errors

SRC = Path(errors.__file__).parent

# Lowest first; the packages of one entry are one layer.
LAYERS: list[set[str]] = [
    {"errors", "support", "native"},
    {"model"},
    {"formats", "sources"},
    {"lake"},
    {"spark"},
    {"pipeline"},
    {"simulator"},
    {"cli"},
    {"__main__"},
]
RANK = {package: rank for rank, packages in enumerate(LAYERS) for package in packages}


def _package(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if parts[0] == "cdclake" and len(parts) > 1 else None


def _imports(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "cdclake":  # from cdclake import formats
                found += [(node.lineno, f"cdclake.{alias.name}") for alias in node.names]
            else:
                found.append((node.lineno, node.module))
    return found


def violations(src: Path = SRC) -> list[str]:
    wrong = []
    for path in sorted(src.rglob("*.py")):
        relative = path.relative_to(src)
        here = relative.parts[0].removesuffix(".py")
        if here == "__init__":
            continue
        assert here in RANK, f"{relative}: package {here!r} has no layer in tests/test_layers.py"
        for line, dotted in _imports(path):
            there = _package(dotted)
            if there is None or there == here:
                continue
            assert there in RANK, f"{relative}:{line}: {dotted} is in no layer"
            if RANK[there] >= RANK[here]:
                wrong.append(f"{relative}:{line} imports {dotted} ({here} may not import {there})")
    return wrong


def test_every_import_points_down_the_layers():
    assert violations() == []


def test_an_import_up_or_across_a_layer_is_reported(tmp_path):
    package = tmp_path / "cdclake"
    (package / "model").mkdir(parents=True)
    (package / "formats").mkdir()
    (package / "model" / "events.py").write_text("def f():\n    from cdclake.pipeline import run\n")
    (package / "formats" / "x.py").write_text("from cdclake import sources\nfrom cdclake.model import events\n")
    assert violations(package) == [
        "formats/x.py:1 imports cdclake.sources (formats may not import sources)",
        "model/events.py:2 imports cdclake.pipeline (model may not import pipeline)",
    ]
