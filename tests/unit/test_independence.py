"""Two independent sides: impl/ never runs the reference's code, and the reference never runs impl's or torch.

Read from the source (the AST of every module, following first-party imports transitively), so an import
hidden inside a function counts as much as one at the top.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"kvtable.spec": "spec", "kvtable.prover": "prover", "kvtable.reference": "reference",
                "kvtable.impl": "impl",
                "kvtable.bench": "bench", "kvtable": "kvtable"}
"""pyproject's package-dir: where each first-party package's modules live."""


def _path(module: str) -> Path | None:
    """The source file of a first-party module, or None for a third-party one."""
    for package, folder in sorted(PACKAGE_DIRS.items(), key=lambda kv: -len(kv[0])):
        if module == package or module.startswith(package + "."):
            base = ROOT / folder / Path(*module[len(package):].lstrip(".").split(".") if module != package else ())
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
    return None


def _modules_of(folder: str, package: str) -> list[str]:
    return sorted(f"{package}.{p.stem}" if p.stem != "__init__" else package for p in (ROOT / folder).glob("*.py"))


@cache
def _direct_imports(module: str) -> frozenset[str]:
    """Every module named by an import statement of ``module`` (``from a import b`` names ``a`` and ``a.b``),
    with the packages above each one, which importing it runs too."""
    path = _path(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            named.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                above = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(above + ([base] if base else []))
            named.add(base)
            named.update(f"{base}.{alias.name}" for alias in node.names)
    return frozenset(parent for name in named for parent in _parents(name))


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _closure(module: str) -> set[str]:
    """Every module importing ``module`` runs, first-party ones followed, third-party ones listed."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        for name in _direct_imports(current):
            if name not in seen:
                seen.add(name)
                if _path(name) is not None:
                    todo.append(name)
    return seen


IMPL = _modules_of("impl", "kvtable.impl")
REFERENCE = _modules_of("reference", "kvtable.reference")


def test_the_walk_sees_both_sides() -> None:
    assert "kvtable.impl.validate" in IMPL and "kvtable.reference.tables" in REFERENCE
    assert "kvtable.contract" in _closure("kvtable.impl.locs")
    assert "torch" in _closure("kvtable.impl.locs") and "kvtable.spec.clauses" in _closure("kvtable.reference")


@pytest.mark.parametrize("module", IMPL)
def test_impl_never_imports_the_reference(module: str) -> None:
    assert not {m for m in _closure(module) if m.startswith("kvtable.reference")}


@pytest.mark.parametrize("module", REFERENCE)
def test_reference_never_imports_impl_or_torch(module: str) -> None:
    forbidden = {m for m in _closure(module) if m.startswith(("kvtable.impl", "torch", "triton"))}
    assert not forbidden
