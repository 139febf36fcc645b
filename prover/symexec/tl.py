"""A stand-in for ``triton.language`` that records what one symbolic program does: its lanes, loads and stores.

Only what the location kernels use is modelled (program ids, ``arange``, masked ``load``/``store`` with
``other``, ``where``, ``maximum``, ``minimum``, ``full``, ``zeros``, ``cdiv``, casts and the integer
dtypes); anything else raises ``KernelNotSupported`` naming it, never a silent guess.
"""

from __future__ import annotations

import builtins
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import z3

from kvtable.prover.symexec.loops import check_independent, one_iteration
from kvtable.prover.symexec.values import (
    BRANCHES,
    DTYPES,
    INT1,
    INT32,
    Address,
    DeadPath,
    Division,
    IntType,
    KernelNotSupported,
    Pointer,
    PointerType,
    Sym,
    as_sym,
    extremum,
    fresh,
    mentions,
    select,
)

MAX_NUMEL = 1 << 20
"""Triton's largest block (``TRITON_MAX_TENSOR_NUMEL``)."""
MAX_SUM_LANES = 256
"""The widest block ``tl.sum`` adds up lane by lane."""


class NotCompilable(KernelNotSupported):
    """The kernel as bound is one Triton refuses to compile (a block length that is not a power of two)."""

    def __init__(self, message: str, length: int) -> None:
        super().__init__(message)
        self.length = length


@dataclass(frozen=True)
class Access:
    """One ``tl.load`` or ``tl.store``: where (per-dimension decomposition), under which mask, what."""

    kind: str
    """``"load"`` or ``"store"``."""
    number: int
    """Its place in its program's order (on its path through the kernel's Python branches), from 0: the same
    number the guarded interpreter gives it (prover/symexec/guard.py)."""
    pointer: Pointer
    mask: z3.BoolRef
    value: Sym
    """The value loaded (for the lane, ``other`` where masked off) or stored."""
    site: str = ""
    """``FILE:LINE`` of the ``tl.load``/``tl.store`` call."""
    path: int = 0
    """Which run of the kernel (one per path through its Python branches) made it."""

    @property
    def label(self) -> str:
        """``"load 3 block_table_ptr"``; on a second path, ``"load 3 block_table_ptr@path1"``."""
        return f"{self.kind} {self.number} {self.pointer.tensor}" + (f"@path{self.path}" if self.path else "")


@dataclass
class Trace:
    """What one run of the kernel on symbolic arguments did; ``read`` gives a loaded tensor's contents."""

    read: Callable[[str, Pointer], z3.BitVecRef]
    grid: tuple[z3.BitVecRef, ...]
    """The program ids, int32."""
    sizes: tuple[z3.BitVecRef, ...] = ()
    """The number of programs on each grid axis, int32 (``tl.num_programs``)."""
    entries: Callable[[Pointer], list[tuple[z3.BoolRef, object]] | None] = lambda _: None
    """For a load from a table of pointers: each entry (a named tensor's pointer, or a stride) under the
    condition that the load's index selects it; None for an ordinary tensor."""
    masked_zero: bool = False
    """A masked-off lane of a load without ``other=`` reads 0 (the binding's ``masked_loads = "zero"``), else
    a fresh undefined value."""
    facts: Callable[[], list[z3.BoolRef]] = list
    """The launch's facts (parameter ranges, host checks, program ids in the grid): what bounds a loop whose
    trip count is a program id or a parameter when it is unrolled (``Language.range``)."""
    accesses: list[Access] = field(default_factory=list)
    lanes: dict[int, z3.BitVecRef] = field(default_factory=dict)
    """One int32 lane per block length."""
    divisions: list[Division] = field(default_factory=list)
    products: list[tuple[str, z3.ExprRef]] = field(default_factory=list)
    """Each product of two non-constant values below 64 bits, with its kernel line (values.PRODUCTS)."""
    path: list[z3.BoolRef] = field(default_factory=list)
    """The conditions of the loops now running (prover/symexec/loops.py): every access is guarded by them."""
    assumptions: list[z3.BoolRef] = field(default_factory=list)
    """What defines the loops' symbolic iterations."""

    @property
    def loads(self) -> list[Access]:
        return [a for a in self.accesses if a.kind == "load"]

    @property
    def stores(self) -> list[Access]:
        return [a for a in self.accesses if a.kind == "store"]

    def lane(self, length: int) -> z3.BitVecRef:
        if length not in self.lanes:
            self.lanes[length] = z3.BitVec(f"lane{length}", 32)
        return self.lanes[length]

    def lane_ranges(self) -> list[z3.BoolRef]:
        """Each lane inside its block, each loop iteration defined."""
        return [*(z3.And(lane >= 0, lane < length) for length, lane in self.lanes.items()), *self.assumptions]


class constexpr:  # noqa: N801 (the name kernels annotate with)
    """``tl.constexpr``: a compile-time value; the executor passes constexprs as plain Python values."""

    def __init__(self, value: Any) -> None:
        self.value = value


def _mask(mask: object) -> z3.BoolRef:
    if mask is None:
        return z3.BoolVal(True)
    m = as_sym(mask)
    return (m if m.dtype.bits == 1 else m.to(INT1)).term


MAX_UNROLLED = 8
"""The most iterations a loop that carries a value (SGLang's ``for i in range(pid): start += len[i]``) is run
one by one, each ``i < end`` a branch of the path, where the launch's facts bound its trip count."""


def _unrolled(start: object, end: object, step: object, refused: KernelNotSupported) -> Iterator[object]:
    """The loop run as Python runs it, iteration by iteration (a value carried, a ``break``, a ``return`` as
    written), while ``i < end`` may hold on the path; refused as ``refused`` past ``MAX_UNROLLED`` iterations."""
    if not isinstance(step, int) or isinstance(step, bool) or step <= 0:
        raise refused
    i: Any = start  # an int or a symbolic value: both add
    for _ in builtins.range(MAX_UNROLLED + 1):
        if not as_sym(i) < end:  # a Python branch on the symbolic bound: one path per trip count
            return
        yield i
        i = i + step
    raise KernelNotSupported(f"{refused} (nor does the launch bound its trip count by {MAX_UNROLLED}, to run it"
                             " iteration by iteration)")


class Language:
    """The namespace a kernel sees as ``tl`` while it runs symbolically; it writes into one ``Trace``."""

    constexpr = constexpr

    def __init__(self, trace: Trace) -> None:
        self._trace = trace
        for name, dtype in DTYPES.items():
            setattr(self, name, dtype)

    # Program geometry ------------------------------------------------------------------------------
    def program_id(self, axis: int) -> Sym:
        return Sym(self._trace.grid[axis], INT32)

    def num_programs(self, axis: int) -> Sym:
        if axis >= len(self._trace.sizes):
            raise KernelNotSupported(f"tl.num_programs({axis}): the binding's grid has no axis {axis}")
        return Sym(self._trace.sizes[axis], INT32)

    def arange(self, start: int, end: int) -> Sym:
        if not isinstance(start, int) or not isinstance(end, int) or end <= start:
            raise KernelNotSupported(f"tl.arange({start}, {end}): bounds must be constexpr ints, start < end")
        length = end - start
        if length & (length - 1) or length > MAX_NUMEL:  # Triton's own rules: the kernel would not compile
            raise NotCompilable(f"tl.arange({start}, {end}): Triton compiles only a power-of-two length up to"
                                f" {MAX_NUMEL}, and {length} is not one", length)
        return as_sym(start) + Sym(self._trace.lane(length), INT32)

    # Memory -----------------------------------------------------------------------------------------
    def load(self, pointer: Pointer, mask: object = None, other: object = None, **_: Any) -> Any:
        if isinstance(pointer, Address):
            raise KernelNotSupported(f"tl.load through the loaded address of {pointer.target.tensor} without a cast"
                                     " to a pointer type (Triton loads through pointers only)")
        if not isinstance(pointer, Pointer):
            raise KernelNotSupported(f"tl.load of {pointer!r}: only pointer arguments plus offsets are modelled")
        m = _mask(mask)
        choices = self._trace.entries(pointer)
        if choices is not None:
            return self._entry(pointer, m, choices)
        value = self._trace.read(pointer.tensor, pointer)
        if other is None:
            masked = z3.BitVecVal(0, pointer.dtype.bits) if self._trace.masked_zero else fresh("undefined",
                                                                                                pointer.dtype)
        else:
            masked = as_sym(other, pointer.dtype).to(pointer.dtype).term
        loaded = Sym(z3.If(m, value, masked), pointer.dtype)
        self._record("load", pointer, m, loaded)
        return loaded

    def store(self, pointer: Pointer, value: object, mask: object = None, **_: Any) -> None:
        if not isinstance(pointer, Pointer):
            raise KernelNotSupported(f"tl.store to {pointer!r}: only pointer arguments plus offsets are modelled")
        stored = as_sym(value, pointer.dtype).to(pointer.dtype)  # the store converts to the element type
        self._record("store", pointer, _mask(mask), stored)

    def _entry(self, pointer: Pointer, mask: z3.BoolRef, choices: list[tuple[z3.BoolRef, object]]) -> object:
        """A load from a table of pointers: the entry its index selects, one path per entry (the path that
        selects none is not followed: its read is outside the table's named entries)."""
        if not z3.is_true(z3.simplify(mask)):
            raise KernelNotSupported(f"a masked load from the table of pointers {pointer.tensor}")
        self._record("load", pointer, mask, Sym(fresh(pointer.tensor, pointer.dtype), pointer.dtype), depth=3)
        decide = BRANCHES.get()
        if decide is None:
            raise KernelNotSupported(f"a load from the table of pointers {pointer.tensor} outside a forking run")
        for condition, entry in choices:
            if decide(condition):
                return Address(entry) if isinstance(entry, Pointer) else entry
        raise DeadPath(pointer.tensor)

    def _record(self, kind: str, pointer: Pointer, mask: z3.BoolRef, value: Sym, depth: int = 2) -> None:
        guarded = z3.And(mask, *self._trace.path) if self._trace.path else mask
        caller = sys._getframe(depth)
        site = f"{caller.f_code.co_filename}:{caller.f_lineno}"
        self._trace.accesses.append(Access(kind, len(self._trace.accesses), pointer, guarded, value, site))

    # Loops ------------------------------------------------------------------------------------------
    def range(self, *args: object) -> Iterator[object]:
        """``range``/``tl.range``: Python's for int bounds; one symbolic iteration for symbolic bounds."""
        ints = [a for a in args if isinstance(a, int)]
        if len(ints) == len(args):
            return iter(builtins.range(*ints))
        start, end, step = (0, *args, 1)[-3:] if len(args) == 1 else (*args, 1)[:3]
        caller = sys._getframe(1)
        try:
            check_independent(caller.f_code, caller.f_lineno)
        except KernelNotSupported as refused:
            return _unrolled(start, end, step, refused)
        return one_iteration(start, end, step, self._trace.path, self._trace.assumptions)

    # Element-wise ----------------------------------------------------------------------------------
    @staticmethod
    def where(cond: object, a: object, b: object) -> Sym:
        return select(cond, a, b)

    @staticmethod
    def maximum(a: object, b: object, **_: Any) -> Sym:
        return extremum(a, b, larger=True)

    @staticmethod
    def minimum(a: object, b: object, **_: Any) -> Sym:
        return extremum(a, b, larger=False)

    @staticmethod
    def full(shape: object, value: object, dtype: IntType) -> Sym:
        del shape  # one symbolic lane stands for every element
        return as_sym(value, dtype).to(dtype)

    @staticmethod
    def zeros(shape: object, dtype: IntType) -> Sym:
        return Language.full(shape, 0, dtype)

    @staticmethod
    def cdiv(a: Any, b: Any) -> Any:  # ints or symbolic values: both divide
        return (a + b - 1) // b

    @staticmethod
    def pointer_type(dtype: IntType) -> PointerType:
        return PointerType(dtype)

    @staticmethod
    def cast(value: object, dtype: object, bitcast: bool = False) -> object:
        """``tl.cast``: as ``value.to(dtype)`` (an integer conversion, or a loaded address taken as a pointer)."""
        if isinstance(value, Pointer | Address):
            return value.to(dtype, bitcast)
        return as_sym(value).to(dtype, bitcast)

    @staticmethod
    def multiple_of(value: object, *_: Any) -> object:
        """An alignment hint for the compiler: the value itself."""
        return value

    max_contiguous = multiple_of

    def sum(self, block: object, axis: object = None, **_: Any) -> Sym:
        """``tl.sum`` of a 1-D block: its one symbolic lane taken at every lane in turn, added up."""
        x = as_sym(block)
        lanes = [(n, v) for n, v in self._trace.lanes.items() if mentions(x.term, v)]
        if len(lanes) != 1 or axis not in (None, 0):
            raise KernelNotSupported("tl.sum of a block that is not 1-D along one tl.arange")
        length, lane = lanes[0]
        if length > MAX_SUM_LANES:
            raise KernelNotSupported(f"tl.sum over {length} lanes (at most {MAX_SUM_LANES} are added up)")
        wide = x if x.dtype.bits > 1 else x.to(INT32)
        return Sym(z3.Sum(*[z3.substitute(wide.term, (lane, z3.BitVecVal(k, 32))) for k in range(length)]),
                   wide.dtype)

    @staticmethod
    def static_assert(cond: object, msg: str = "") -> None:
        if cond is False:
            raise AssertionError(msg)

    @staticmethod
    def device_assert(*_: Any, **__: Any) -> None:
        """Runs only under TRITON_DEBUG=1 on a GPU; it constrains nothing the kernel does otherwise."""

    def __getattr__(self, name: str) -> Any:
        raise KernelNotSupported(f"tl.{name} is not modelled by the symbolic executor")


class TritonStandIn:
    """What a kernel sees as ``triton`` (``triton.cdiv``, ``triton.language``) while it runs symbolically."""

    def __init__(self, language: Language) -> None:
        self.language = language
        self.cdiv = Language.cdiv

    def __getattr__(self, name: str) -> Any:
        raise KernelNotSupported(f"triton.{name} inside a kernel is not modelled")
