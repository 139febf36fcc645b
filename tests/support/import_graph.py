"""kvtable's first-party import graph, read from the source (the AST of every module), for the architecture tests."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE_DIRS = {"kvtable.spec": "spec", "kvtable.prover": "prover", "kvtable.reference": "reference",
                "kvtable.impl": "impl", "kvtable.bench": "bench", "kvtable": "kvtable"}
"""pyproject's package-dir: where each first-party package's modules live."""


def path_of(module: str) -> Path | None:
    """The source file of a first-party module, or None for a third-party one."""
    for package, folder in sorted(PACKAGE_DIRS.items(), key=lambda kv: -len(kv[0])):
        if module == package or module.startswith(package + "."):
            base = ROOT / folder / Path(*module[len(package):].lstrip(".").split(".") if module != package else ())
            for candidate in (base.with_suffix(".py"), base / "__init__.py"):
                if candidate.is_file():
                    return candidate
    return None


def modules_of(folder: str, package: str) -> list[str]:
    """The modules directly in ``folder`` (package ``package``), its ``__init__`` as the package itself."""
    return sorted(f"{package}.{p.stem}" if p.stem != "__init__" else package for p in (ROOT / folder).glob("*.py"))


def all_modules() -> list[str]:
    """Every first-party module, subpackages included."""
    found = set()
    for package, folder in PACKAGE_DIRS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            dotted = ".".join([package, *parts])
            found.add(dotted.removesuffix(".__init__"))
    return sorted(m for m in found if path_of(m) is not None and not m.endswith(".__main__"))


def _statements(tree: ast.Module, *, deferred: bool, typing: bool = True) -> list[ast.AST]:
    """The import statements of a module: those run when it is imported (its top level, outside ``if
    TYPE_CHECKING:``), which are what an import cycle is made of; with ``deferred`` those inside its functions
    too; with ``typing`` (and ``deferred``) those only a type checker reads as well."""
    found: list[ast.AST] = []
    todo: list[ast.AST] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        elif isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            todo += (node.body if typing and deferred else []) + node.orelse
        elif deferred or isinstance(node, ast.If | ast.Try | ast.excepthandler):
            todo += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt | ast.excepthandler)]
    return found


@cache
def direct_imports(module: str, *, deferred: bool = True, typing: bool = True) -> frozenset[str]:
    """Every module named by an import statement of ``module`` (``from a import b`` names ``a`` and ``a.b``),
    with the packages above each one, which importing it runs too (``_statements`` says which statements)."""
    path = path_of(module)
    assert path is not None, module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    named: set[str] = set()
    for node in _statements(ast.parse(path.read_text()), deferred=deferred, typing=typing):
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


def closure(module: str) -> set[str]:
    """Every module importing ``module`` runs, first-party ones followed, third-party ones listed."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        for name in direct_imports(current):
            if name not in seen:
                seen.add(name)
                if path_of(name) is not None:
                    todo.append(name)
    return seen
