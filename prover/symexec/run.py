"""Run a ``@triton.jit`` function's own Python code on symbolic arguments and return what it did.

The function's code object is rebuilt with new globals: ``triton.language`` (whatever name the module
imported it as) becomes the recording stand-in of prover/symexec/tl.py, ``triton`` a stand-in with
``cdiv``, and every other ``@triton.jit`` function it calls is rebuilt the same way, so nested calls are
inlined the way the Triton compiler inlines them. Nothing is compiled and no GPU or interpreter runs.
Triton need not be installed: the names a kernel's module binds by importing ``triton`` or
``triton.language`` are read from its source and bound to the stand-ins, and where that import failed
(``@jit`` as the identity) the module's plain functions a kernel calls are inlined as its jit helpers.
"""

from __future__ import annotations

import ast
import functools
import inspect
import linecache
import sys
import types
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import z3

from kvtable.prover.symexec.induction import ADVANCE, advance, with_induction
from kvtable.prover.symexec.tl import Language, Trace, TritonStandIn
from kvtable.prover.symexec.values import (
    BRANCHES,
    DIVISIONS,
    PRODUCTS,
    DeadPath,
    KernelNotSupported,
    extremum,
    restart_names,
)


def python_function(kernel: Any) -> types.FunctionType:
    """The plain Python function behind a ``JITFunction`` (``.fn``), an autotuner or a wrapper."""
    seen = 0
    while not isinstance(kernel, types.FunctionType):
        inner = getattr(kernel, "fn", None) or getattr(kernel, "__wrapped__", None)
        if inner is None or seen > 8:
            raise KernelNotSupported(f"{kernel!r} is not a Python or @triton.jit function")
        kernel, seen = inner, seen + 1
    return kernel


def is_jit(value: Any) -> bool:
    """A ``JITFunction``, its interpreter twin ``InterpretedFunction``, an autotuner or heuristics wrapper."""
    return type(value).__module__.startswith("triton.") and hasattr(value, "fn")


def _is_triton_language(value: Any) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__ == "triton.language"


def _is_triton(value: Any) -> bool:
    return isinstance(value, types.ModuleType) and value.__name__ == "triton"


@functools.cache
def _triton_imports(module_name: str) -> dict[str, str]:
    """The names module ``module_name`` binds by its imports of ``triton`` (-> ``"triton"``) and
    ``triton.language`` (-> ``"triton.language"``), read from its source (try/except imports included)."""
    module = sys.modules.get(module_name)
    try:
        tree = ast.parse(inspect.getsource(module)) if module is not None else None
    except (OSError, TypeError, SyntaxError):
        tree = None
    names: dict[str, str] = {}
    for node in ast.walk(tree) if tree is not None else ():
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in ("triton", "triton.language"):
                    names[alias.asname or "triton"] = alias.name if alias.asname else "triton"
        elif isinstance(node, ast.ImportFrom) and node.module == "triton":
            names.update({a.asname or a.name: "triton.language" for a in node.names if a.name == "language"})
    return names


class _Rebinder:
    """Rebuilds functions with the stand-in namespaces, once each (nested jit functions included)."""

    def __init__(self, language: Language) -> None:
        self.language = language
        self.triton = TritonStandIn(language)
        self.done: dict[int, types.FunctionType] = {}
        self.inlined: set[str] = set()
        """Modules whose import of triton failed: their plain functions are the kernels' jit helpers."""

    def rebuild(self, fn: types.FunctionType) -> types.FunctionType:
        hit = self.done.get(id(fn))
        if hit is not None:
            return hit
        scope = dict(fn.__globals__)
        cells = [types.CellType() for _ in fn.__closure__ or ()]  # a kernel defined in a function: its free names
        code = with_induction(fn.__code__)
        if code is None:
            rebuilt = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, tuple(cells) or None)
        else:  # rebuilt from its source at top level: its free names become names of its scope
            scope[ADVANCE] = advance
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True):
                try:
                    scope[name] = self.stand_in(cell.cell_contents)
                except ValueError:  # a free name not bound yet stays unbound
                    pass
            rebuilt = types.FunctionType(code, scope, fn.__name__, fn.__defaults__)
        self.done[id(fn)] = rebuilt
        imported = _triton_imports(fn.__module__)
        for name, what in imported.items():
            if not isinstance(scope.get(name), types.ModuleType):  # the import failed: triton is not installed
                self.inlined.add(fn.__module__)
                scope[name] = self.language if what == "triton.language" else self.triton
        for name in rebuilt.__code__.co_names:
            if name in scope:
                scope[name] = self.stand_in(scope[name])
        if "range" in rebuilt.__code__.co_names and "range" not in scope:  # the builtin, for symbolic bounds
            scope["range"] = self.language.range
        for name, larger in (("min", False), ("max", True)):  # Triton compiles the builtins to minimum/maximum
            if name in rebuilt.__code__.co_names and name not in scope:
                scope[name] = lambda a, b, larger=larger: extremum(a, b, larger=larger)
        for cell, old in zip(cells, fn.__closure__ or (), strict=True) if code is None else ():
            try:
                cell.cell_contents = self.stand_in(old.cell_contents)
            except ValueError:  # a free name not bound yet stays unbound
                pass
        return rebuilt

    def stand_in(self, value: Any) -> Any:
        """What a name the kernel reads becomes: the recording ``tl``, ``triton``'s stand-in, a rebuilt jit
        function, or itself."""
        if _is_triton_language(value) or isinstance(value, Language):
            return self.language
        if _is_triton(value):
            return self.triton
        if is_jit(value) or (isinstance(value, types.FunctionType) and value.__module__ in self.inlined):
            return self.rebuild(python_function(value))
        return value


MAX_PATHS = 64
"""The most paths (Python ``if`` outcomes on symbolic scalars) a kernel is run along."""
MAX_BRANCHES = 16
"""The most symbolic branches one path takes (a ``while`` on a symbolic value would never end)."""
FEASIBLE_RLIMIT = 200_000
"""z3's resource limit for asking whether a branch's side is possible on the path so far (deterministic)."""


def _possible(condition: z3.BoolRef) -> bool:
    """Whether ``condition`` may hold (unknown counts as possible: the path is run, never dropped)."""
    solver = z3.Solver()
    solver.set("rlimit", FEASIBLE_RLIMIT)
    solver.add(condition)
    return solver.check() != z3.unsat


class _Path:
    """One run's decisions: a prefix given, ``True`` after it; records every branch taken, and whether the
    other side was possible at all on the path (a branch decided by the ones before it forks nothing)."""

    def __init__(self, prefix: list[bool], facts: list[z3.BoolRef]) -> None:
        self.prefix = prefix
        self.taken: list[tuple[z3.BoolRef, bool]] = []
        self.forks: list[bool] = []
        self.facts = facts
        """The launch's facts: a side they rule out (a program id past the grid) is not run."""

    def __call__(self, condition: z3.BoolRef) -> bool:
        if len(self.taken) >= MAX_BRANCHES:
            raise KernelNotSupported(f"more than {MAX_BRANCHES} Python branches on symbolic values in one path")
        if len(self.taken) < len(self.prefix):
            choice, fork = self.prefix[len(self.taken)], False
        else:
            so_far = z3.And(*self.facts, self.condition())
            choice = _possible(z3.And(so_far, condition))
            fork = choice and _possible(z3.And(so_far, z3.Not(condition)))
        self.taken.append((condition, choice))
        self.forks.append(fork)
        return choice

    def condition(self) -> z3.BoolRef:
        return z3.And(*[c if choice else z3.Not(c) for c, choice in self.taken])


def run_symbolic(kernel: Any, arguments: Mapping[str, Any], trace: Trace) -> Trace:
    """Run ``kernel`` with ``arguments`` (symbolic values, pointers, constexpr ints), recording into ``trace``:
    once per path through its Python ``if``s on symbolic scalars, each access guarded by its path's condition."""
    restart_names()
    fn = python_function(kernel)
    parameters = inspect.signature(fn).parameters
    names = [n for n in parameters if n in arguments]  # an argument left unbound keeps its default
    missing = [n for n, p in parameters.items() if n not in arguments and p.default is p.empty]
    if missing:
        raise KernelNotSupported(f"{fn.__name__}: no binding for argument(s) {missing}")
    pending: list[list[bool]] = [[]]
    paths = 0
    facts = trace.facts()
    while pending:
        if paths >= MAX_PATHS:
            raise KernelNotSupported(f"{fn.__name__}: more than {MAX_PATHS} paths through Python branches")
        path = _Path(pending.pop(), facts)
        run = replace(trace, accesses=[], path=[])
        _run_once(fn, names, arguments, run, path)
        guard = path.condition()
        trace.accesses += [replace(a, path=paths, mask=z3.And(guard, a.mask) if path.taken else a.mask)
                           for a in run.accesses]
        pending += [[c for _, c in path.taken[:j]] + [False] for j in range(len(path.prefix), len(path.taken))
                    if path.forks[j]]
        paths += 1
    return trace


def _run_once(fn: types.FunctionType, names: list[str], arguments: Mapping[str, Any], trace: Trace,
              path: _Path) -> None:
    rebinder = _Rebinder(Language(trace))
    tokens = DIVISIONS.set(trace.divisions), BRANCHES.set(path), PRODUCTS.set(trace.products)
    try:
        rebinder.rebuild(fn)(**{n: arguments[n] for n in names})
    except DeadPath:  # the accesses made until the stray read of a pointer table stay (in-bounds judges it)
        pass
    except KernelNotSupported as exc:
        exc.args = (f"{exc}{_where(exc, rebinder)}",)
        raise exc.with_traceback(None) from None
    except Exception as exc:  # the kernel did what the executor does not model (an attribute a stand-in lacks)
        raise KernelNotSupported(f"the kernel raised {type(exc).__name__}: {exc} in the symbolic executor, which does"
                                 f" not model that operation{_where(exc, rebinder)}") from None
    finally:
        BRANCHES.reset(tokens[1])
        DIVISIONS.reset(tokens[0])
        PRODUCTS.reset(tokens[2])


def _where(exc: BaseException, rebinder: _Rebinder) -> str:
    """``" (at FILE:LINE in FN: SOURCE)"``: the kernel line running when ``exc`` was raised (its innermost
    frame in the kernel or a jit function it calls)."""
    codes = {f.__code__ for f in rebinder.done.values()}
    frames = [tb for tb in _tracebacks(exc.__traceback__) if tb.tb_frame.f_code in codes]
    if not frames:
        return ""
    frame = frames[-1]
    code, line = frame.tb_frame.f_code, frame.tb_lineno
    source = linecache.getline(code.co_filename, line).strip()
    return f" (at {code.co_filename}:{line} in {code.co_name}: {source})"


def _tracebacks(tb: types.TracebackType | None) -> list[types.TracebackType]:
    out = []
    while tb is not None:
        out.append(tb)
        tb = tb.tb_next
    return out
