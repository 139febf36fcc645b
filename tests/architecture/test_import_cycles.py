"""No import cycle among kvtable's modules: each layer imports only the layers below it (ARCHITECTURE.md).

Counted on the imports a module runs when it is imported (top level, outside ``TYPE_CHECKING``); an import
deferred into a function is how a lower layer calls up without a cycle, and is listed apart.
"""

from __future__ import annotations

from import_graph import all_modules, direct_imports, path_of


def _cycles(deferred: bool) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    modules = all_modules()
    edges = {m: sorted(n for n in direct_imports(m, deferred=deferred)
                       if path_of(n) is not None and not m.startswith(n + "."))  # its package runs first
             for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for nxt in edges.get(module, ()):
            if nxt not in index:
                visit(nxt)
                low[module] = min(low[module], low[nxt])
            elif nxt in stack:
                low[module] = min(low[module], index[nxt])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


def test_the_walk_sees_every_layer() -> None:
    modules = all_modules()
    assert {"kvtable.contract", "kvtable.reference.locs", "kvtable.impl.locs", "kvtable.prover.prove",
            "kvtable.conformance.runner", "kvtable.trace.check"} <= set(modules)
    assert "kvtable.contract" in direct_imports("kvtable.impl.locs", deferred=False)


def test_no_module_imports_itself_back_when_imported() -> None:
    assert _cycles(deferred=False) == []
