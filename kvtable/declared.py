"""Names a registry declares, read from its source without running it, so the CLI can refuse a misspelt
``--property`` or zoo entry before torch and Hypothesis load (tests check each reading against the registry)."""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path


def declared(package: str, call: str, fields: int = 1) -> list[tuple[str, ...]]:
    """The first ``fields`` arguments of every ``call(...)`` written in ``package``'s own modules, in file and
    line order, where each of them is a string literal (as every registry entry's name is)."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.submodule_search_locations, f"{package} is no package"
    found = []
    for path in sorted(Path(spec.submodule_search_locations[0]).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == call:
                head = [a.value for a in node.args[:fields] if isinstance(a, ast.Constant) and isinstance(a.value, str)]
                if len(head) == fields:  # each of the first ``fields`` arguments a string literal
                    found.append(tuple(head))
    return found
