"""Loops with symbolic bounds (``for i in range(start, end, BLOCK)``, vLLM's loop over a request's tokens) as one
symbolic iteration that stands for every iteration, the way one symbolic lane stands for every lane.

The loop variable is a fresh value ``i = start + k * step`` (``k >= 0``, exact: no wrap), and everything the body
loads or stores is guarded by ``i < end``: an iteration that does not run touches nothing. That is sound only
when iterations do not depend on each other, so the loop's source is checked first: no ``break`` or
``return`` in the body, every name the body assigns is assigned before the body reads it (no value carried from
one iteration to the next, ``acc += x`` included; an ``if`` defines what both its branches define; an induction
variable ``x += BLOCK`` is set from the iteration's index instead, prover/symexec/induction.py), and no name the
body assigns is read after the loop before it is assigned again. A loop
that fails the check, or a step that is not a positive constexpr, is refused naming the line.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Iterator

import z3

from kvtable.prover.symexec.values import INT64, KernelNotSupported, Sym, as_sym, fresh


def _names(node: ast.AST, ctx: type) -> set[str]:
    found = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ctx)}
    if ctx is ast.Load:  # ``x += 1`` reads x too
        found |= {n.target.id for n in ast.walk(node) if isinstance(n, ast.AugAssign)
                  and isinstance(n.target, ast.Name)}
    return found


def _loop_at(code: types.CodeType, line: int) -> tuple[ast.For, ast.AST]:
    """The ``for`` statement of ``code`` on source line ``line``, and the function it is in."""
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        raise KernelNotSupported(f"a loop with symbolic bounds in {code.co_name}, whose source is not available"
                                 f" to check") from None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    loops = [n for n in ast.walk(tree) if isinstance(n, ast.For) and n.lineno + first - 1 == line]
    if len(loops) != 1:
        raise KernelNotSupported(f"a symbolic range() outside a for statement, at {code.co_filename}:{line}")
    return loops[0], tree


def _defined(statements: list[ast.stmt], defined: set[str], assigned: set[str], where: str) -> set[str]:
    """The names defined after ``statements`` run in order from ``defined``; refuses a read of a name the loop
    body assigns before this iteration assigned it (a value carried from the last iteration). An ``if`` is
    followed into each branch: after it, a name is defined if both branches define it."""
    for statement in statements:
        if isinstance(statement, ast.If):
            _defined([ast.Expr(statement.test)], defined, assigned, where)
            defined = (_defined(statement.body, set(defined), assigned, where)
                       & _defined(statement.orelse, set(defined), assigned, where))
            continue
        carried = (_names(statement, ast.Load) & assigned) - defined
        if carried:
            raise KernelNotSupported(f"a loop with symbolic bounds carries {sorted(carried)} from one iteration to the"
                                     f" next ({where}): only independent iterations are modelled")
        defined = defined | _names(statement, ast.Store)
    return defined


def _plain(node: ast.AST) -> bool:
    """No call in ``node`` (evaluating it again loads and stores nothing)."""
    return not any(isinstance(n, ast.Call) for n in ast.walk(node))


def induction_steps(loop: ast.For) -> dict[str, ast.AugAssign]:
    """The loop's induction variables: names its body only advances, once, at its top level, by an amount the
    body does not change (``ld_offset += BLOCK``), in a ``for NAME in range(...)`` loop. Iteration ``k`` sees
    the value before the loop plus ``k`` amounts (prover/symexec/induction.py sets it so): nothing carried."""
    call = loop.iter
    if not (isinstance(call, ast.Call) and (getattr(call.func, "id", None) == "range"
                                            or getattr(call.func, "attr", None) == "range")
            and isinstance(loop.target, ast.Name) and not call.keywords and 1 <= len(call.args) <= 3
            and all(_plain(a) for a in (call.args[::2] if len(call.args) > 1 else ()))):  # start, step: read again
        return {}
    assigned = set().union(*(_names(s, ast.Store) for s in loop.body)) | {loop.target.id}
    stores = [n.id for s in loop.body for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)]
    return {s.target.id: s for s in loop.body
            if isinstance(s, ast.AugAssign) and isinstance(s.target, ast.Name) and isinstance(s.op, (ast.Add, ast.Sub))
            and s.target.id != loop.target.id and stores.count(s.target.id) == 1
            and not _names(s.value, ast.Load) & assigned and _plain(s.value)}


def check_independent(code: types.CodeType, line: int) -> None:
    """Refuse the loop on ``line`` unless its iterations are independent (see the module docstring)."""
    loop, function = _loop_at(code, line)
    where = f"at {code.co_filename}:{line}"
    if any(isinstance(n, (ast.Break, ast.Return)) for s in loop.body for n in ast.walk(s)):
        raise KernelNotSupported(f"a `break` or `return` inside a loop with symbolic bounds ({where})")
    assigned = set().union(*(_names(s, ast.Store) for s in loop.body))
    defined = _defined(loop.body, _names(loop.target, ast.Store) | set(induction_steps(loop)), assigned, where)
    end = loop.end_lineno or loop.lineno
    after = sorted((n.lineno, isinstance(n.ctx, ast.Store), n.id) for n in ast.walk(function)
                    if isinstance(n, ast.Name) and n.lineno > end and n.id in assigned | defined)
    first: dict[str, bool] = {}
    for _, store, name in after:  # a load first (on a line, loads count first): the loop's value is read
        first.setdefault(name, store)
    later = [name for name, store in first.items() if not store]
    if later:
        raise KernelNotSupported(f"{sorted(set(later))} assigned in a loop with symbolic bounds is read after it"
                                 f" ({where})")


def one_iteration(start: object, end: object, step: object, path: list[z3.BoolRef],
                  assumptions: list[z3.BoolRef]) -> Iterator[Sym]:
    """Yield the symbolic iteration ``i``; while the body runs, ``i < end`` is on ``path``."""
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise KernelNotSupported(f"range(..., step={step!r}) with symbolic bounds: the step must be a positive "
                                 f"constexpr int")
    low, high = as_sym(start), as_sym(end)
    dtype = (low + high).dtype  # Triton's promotion of the two bounds
    i, k = Sym(fresh("iteration", dtype), dtype), fresh("k", INT64)
    signed = lambda x: z3.BV2Int(x, is_signed=True)  # noqa: E731
    assumptions += [signed(k) >= 0, signed(i.term) == signed(low.to(dtype).term) + signed(k) * step]
    path.append(signed(i.term) < signed(high.to(dtype).term))
    try:
        yield i
    finally:
        path.pop()
