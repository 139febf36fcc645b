"""No import cycle among kvtable's modules: each layer imports only the layers below it (ARCHITECTURE.md).

Counted twice: on the imports a module runs when it is imported (top level, outside ``TYPE_CHECKING``), and on
every import it runs, those deferred into a function included: a deferred import that calls back up is a cycle
too, hidden from the interpreter, not from the reader.
"""

from __future__ import annotations

from import_graph import all_modules, direct_imports, path_of


def _cycles(deferred: bool, within: str = "kvtable", depth: int | None = None) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: among the modules under
    ``within``, or among its subpackages (each module cut to ``depth`` dotted parts); imports a type checker alone
    reads (``if TYPE_CHECKING:``) never run, so they make no cycle."""
    def node(module: str) -> str:
        return ".".join(module.split(".")[:depth]) if depth else module

    def inside(module: str) -> bool:
        return module == within or module.startswith(within + ".")

    modules = sorted({node(m) for m in all_modules() if inside(m)})
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for m in all_modules():
        if not inside(m):
            continue
        edges[node(m)] |= {node(n) for n in direct_imports(m, deferred=deferred, typing=False)
                           if inside(n) and path_of(n) is not None
                           and not m.startswith(n + ".")  # its package runs first
                           and node(n) != node(m)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for nxt in sorted(edges.get(module, ())):
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


def test_no_module_imports_itself_back_even_from_a_function() -> None:
    assert _cycles(deferred=True) == []


def test_a_deferred_import_back_is_seen_as_a_cycle() -> None:
    """The walk follows imports inside functions: ``reproduce`` imports ``execute`` at its top, and nothing
    ``execute`` runs imports ``reproduce`` back, at any depth."""
    assert "kvtable.conformance.execute" in direct_imports("kvtable.conformance.reproduce", deferred=False)
    assert "kvtable.conformance.runner" in direct_imports("kvtable.conformance.conform", deferred=True)
    assert "kvtable.conformance.runner" not in direct_imports("kvtable.conformance.conform", deferred=False)


def test_the_prover_subpackages_import_one_way_even_inside_functions() -> None:
    """bindings -> symexec -> (values, tl), never back, and no two prover modules reach each other through a
    function-level import either (a deferred import hides a cycle; it does not remove it)."""
    assert _cycles(deferred=True, within="kvtable.prover", depth=3) == []
    assert _cycles(deferred=True, within="kvtable.prover") == []
