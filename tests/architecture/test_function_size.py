"""No function in the conformance tester runs past 50 lines: a longer one mixes steps that each deserve a name."""

from __future__ import annotations

import ast

from import_graph import ROOT

LIMIT = 50
"""Lines from ``def`` to the function's last line, its docstring included."""
FOLDER = ROOT / "kvtable" / "conformance"


def _lengths() -> dict[str, int]:
    """Every function and method under kvtable/conformance, nested ones too, by ``path:line name``."""
    found = {}
    for path in sorted(FOLDER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                found[f"{path.relative_to(ROOT)}:{node.lineno} {node.name}"] = node.end_lineno - node.lineno + 1
    return found


def test_no_conformance_function_is_longer_than_the_limit() -> None:
    lengths = _lengths()
    assert len(lengths) > 300  # the walk reached the properties too
    assert {where: n for where, n in lengths.items() if n > LIMIT} == {}


def test_run_property_stays_under_forty_lines() -> None:
    """The one function every property goes through reads as its steps: applies, searches, verdict."""
    [length] = [n for where, n in _lengths().items() if where.endswith(" run_property")]
    assert 10 < length < 40
