"""Induction variables of a loop (``ld_offset += BLOCK`` once per iteration, SGLang's older kv-index copy) for
the one symbolic iteration that stands for all: the kernel's code is rebuilt with ``x = x_before + k * BLOCK`` at
the top of each such loop's body, ``k`` the iteration's index from the loop variable, computed in x's own dtype
(so it wraps exactly as ``k`` additions would). prover/symexec/loops.py says which names qualify; its check then
counts them as set by each iteration, not carried."""

from __future__ import annotations

import ast
import functools
import inspect
import textwrap
import types

from kvtable.prover.symexec.loops import induction_steps
from kvtable.prover.symexec.values import INT64, KernelNotSupported, Pointer, as_sym, promote

ADVANCE = "__kvtable_advance__"
"""The name the rebuilt code calls ``advance`` by (the rebinder puts it in the kernel's scope)."""


def advance(before: object, count: object, amount: object, sign: int) -> object:
    """``before`` advanced ``count`` times by ``sign * amount``, in ``before``'s own type."""
    if isinstance(before, int) and isinstance(count, int) and isinstance(amount, int):
        return before + sign * count * amount
    if isinstance(before, Pointer):
        return before + as_sym(count).to(INT64) * amount * sign
    start, step, dtype = promote(before, amount)
    if not isinstance(before, int) and dtype != start.dtype:
        raise KernelNotSupported(f"an induction variable of {start.dtype!r} advanced by {dtype!r} changes type")
    total = as_sym(count).to(dtype) * step
    return start + total if sign > 0 else start - total


def _setup(loop: ast.For, steps: dict[str, ast.AugAssign]) -> list[ast.stmt]:
    """The assignments before ``loop`` (start, step, each variable's value before it); puts the per-iteration
    ones at the top of its body."""
    assert isinstance(loop.iter, ast.Call) and isinstance(loop.target, ast.Name)  # induction_steps' loops only
    line, args = loop.lineno, loop.iter.args
    start = args[0] if len(args) > 1 else ast.Constant(0)
    step = args[2] if len(args) > 2 else ast.Constant(1)
    name = f"__kvtable_{line}"
    before: list[ast.stmt] = [ast.Assign([ast.Name(f"{name}_start", ast.Store())], start),
              ast.Assign([ast.Name(f"{name}_step", ast.Store())], step)]
    index = ast.Name(loop.target.id, ast.Load())
    offset = ast.BinOp(index, ast.Sub(), ast.Name(f"{name}_start", ast.Load()))
    count = ast.BinOp(offset, ast.FloorDiv(), ast.Name(f"{name}_step", ast.Load()))
    top = []
    for var, increment in steps.items():
        before.append(ast.Assign([ast.Name(f"{name}_{var}", ast.Store())], ast.Name(var, ast.Load())))
        sign = ast.Constant(1 if isinstance(increment.op, ast.Add) else -1)
        call = ast.Call(ast.Name(ADVANCE, ast.Load()), [ast.Name(f"{name}_{var}", ast.Load()), count,
                                                        increment.value, sign], [])
        top.append(ast.Assign([ast.Name(var, ast.Store())], call))
    loop.body[:0] = top
    for node in (*before, *top):
        ast.copy_location(node, loop)
        ast.fix_missing_locations(node)
    return before


@functools.cache
def with_induction(code: types.CodeType) -> types.CodeType | None:
    """``code`` rebuilt with its loops' induction variables set per iteration; None if it has none."""
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    tree = ast.parse(textwrap.dedent("".join(lines)))
    ast.increment_lineno(tree, first - 1)
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef) or function.name != code.co_name:
        return None
    function.decorator_list = []
    changed = False
    for parent in list(ast.walk(function)):
        for field in ("body", "orelse"):
            statements = getattr(parent, field, None)
            if not isinstance(statements, list):
                continue
            rebuilt: list[ast.stmt] = []
            for statement in statements:
                steps = induction_steps(statement) if isinstance(statement, ast.For) else {}
                if steps:
                    rebuilt += _setup(statement, steps)
                    changed = True
                rebuilt.append(statement)
            statements[:] = rebuilt
    if not changed:
        return None
    module = compile(ast.Module([function], []), code.co_filename, "exec")
    return next(c for c in module.co_consts if isinstance(c, types.CodeType) and c.co_name == code.co_name)
