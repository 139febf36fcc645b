"""What a binding says its kernel trusts (``assumes``), as z3 facts: part of every kernel obligation's verdict.

A verdict that needs them is "holds under the stated assumptions", printed with them; a counterexample is
only ever one that satisfies all of them, so a bug is hidden only by an assumption the binding states.
Three forms:

- ``"<tensor or role> entries >= 0"``: every value the kernel loads from that tensor (from the tensors behind it,
  for a table of pointers) is >= 0 (vLLM's block ids: the null block is 0, a -1 is outside what its block
  tables can hold);
- ``"positions < width * page_size"``: every position the kernel loads has its block inside the table's
  width (the scheduler never sends a token past the table);
- any other text: a comparison over the parameters, the stride arguments, the program ids ``pid0``..``pid2``
  and tensor elements ``name[i, ...]``, all exact integers, ``/`` their integer division (``"R * W < 2**31"``,
  ``"kv_indptr[pid0] + lens[pid0] <= T"``).
"""

from __future__ import annotations

import re
from typing import Any

import z3

from kvtable.prover.bindings.binding import Launch
from kvtable.prover.symexec.tl import Trace
from kvtable.prover.symexec.values import KernelNotSupported

_ENTRIES = re.compile(r"^(?P<name>\w+) entries >= 0$")
POSITIONS_FIT = "positions < width * page_size"


def _signed(x: z3.BitVecRef) -> z3.ArithRef:
    return z3.BV2Int(x, is_signed=True)


class _Elements:
    """A tensor in an assumption: ``name[i, ...]`` is its element, as an integer."""

    def __init__(self, launch: Launch, tensor: str) -> None:
        self.launch, self.tensor = launch, tensor

    def __getitem__(self, index: Any) -> z3.ArithRef:
        index = index if isinstance(index, tuple) else (index,)
        rank = len(self.launch.binding.tensors[self.tensor].sizes)
        if len(index) != rank:
            raise KernelNotSupported(f"{self.tensor}[...] in an assumption needs {rank} index(es)")
        return _signed(self.launch.element(self.tensor, tuple(z3.IntVal(i) if isinstance(i, int) else i
                                                              for i in index)))


def _expression(launch: Launch, text: str) -> z3.BoolRef:
    """An assumption written as a comparison, over exact integers."""
    b = launch.binding
    scope: dict[str, Any] = {name: _signed(v) for name, v in {**launch.params, **launch.stride_vars}.items()}
    scope.update({f"pid{axis}": _signed(pid) for axis, pid in enumerate(launch.pids)})
    scope.update({name: _Elements(launch, name) for name in b.tensors})
    scope.update(min=lambda a, c: z3.If(a < c, a, c), max=lambda a, c: z3.If(a > c, a, c))
    try:
        fact = eval(text, {"__builtins__": {}}, scope)  # noqa: S307 (the user's own binding)
    except TypeError as exc:  # an operator z3's integers lack (``//``, ``%`` of a term by a term)
        raise KernelNotSupported(f"assumption {text!r}: {exc} (over exact integers '/' is "
                                 "z3's integer division; '//' is not defined)") from None
    except Exception as exc:  # a name the binding lacks, a syntax error: one line naming the assumption
        raise KernelNotSupported(f"assumption {text!r}: {type(exc).__name__}: {exc}") from None
    if not z3.is_bool(fact):
        raise KernelNotSupported(f"assumption {text!r} is not a comparison")
    return fact


def _tensor(launch: Launch, name: str, text: str) -> str:
    tensor = launch.binding.roles.get(name, name)
    if tensor not in launch.binding.tensors:
        raise KernelNotSupported(f"assumption {text!r}: {name} is neither a tensor nor a role naming one")
    return tensor


def _positions_fit(launch: Launch, trace: Trace) -> list[z3.BoolRef]:
    roles = launch.binding.roles
    table, positions = roles.get("table"), roles.get("positions")
    if table is None or positions is None or table not in launch.binding.tensors \
            or positions not in launch.binding.tensors or "page_sizes" not in roles:
        raise KernelNotSupported(f"assumption {POSITIONS_FIT!r} needs the roles table, positions and page_sizes")
    width = _signed(launch.sizes(table)[-1])
    page_size = _signed(launch.expr(roles["page_sizes"]))
    return [z3.Implies(load.mask, _signed(launch.read(positions, load.pointer)) < width * page_size)
            for load in trace.loads if load.pointer.tensor == positions]


def _facts(launch: Launch, trace: Trace, text: str) -> list[z3.BoolRef]:
    found = _ENTRIES.match(text)
    if found:  # a table of pointers stands for the tensors behind it (vLLM V2's per-group tables)
        tensor = _tensor(launch, found["name"], text)
        behind = {t for t in launch.binding.pointer_tables.get(tensor, (tensor,)) if t in launch.binding.tensors}
        return [z3.Implies(load.mask, _signed(launch.read(load.pointer.tensor, load.pointer)) >= 0)
                for load in trace.loads if load.pointer.tensor in behind]
    if text == POSITIONS_FIT:
        return _positions_fit(launch, trace)
    return [_expression(launch, text)]


def check_assumption(launch: Launch, text: str) -> None:
    """Refuse (``ValueError``, one line) an assumption no proof could read: an unknown tensor or role, a name the
    binding lacks, an operator the integers have no meaning for (``//``: write ``/``, integer division)."""
    try:
        found = _ENTRIES.match(text)
        if found:
            _tensor(launch, found["name"], text)
        elif text != POSITIONS_FIT:
            _expression(launch, text)
    except KernelNotSupported as exc:
        raise ValueError(f"assumes: {exc}") from None


def stated(launch: Launch, trace: Trace) -> tuple[tuple[str, z3.BoolRef], ...]:
    """Each of the binding's assumptions and its fact about this run (the named ones at every load they are
    about)."""
    return tuple((text, z3.And(*_facts(launch, trace, text))) for text in launch.binding.assumes)
