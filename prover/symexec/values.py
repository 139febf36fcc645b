"""Symbolic Triton values: integer blocks as z3 bit-vectors of their dtype, pointers as per-stride decompositions.

One symbolic lane stands for every lane of a block, so a block and a scalar are the same thing here: a
term of the block's dtype (a z3 Bool for ``int1``). Arithmetic follows Triton's rules: a Python int
takes the dtype of the tensor it meets, two tensors promote to the wider signed type, ``//`` and ``%``
truncate toward zero (compiled code), every operation wraps at its width, ``.to()`` sign-extends or
keeps the low bits. Division by zero is undefined on the GPU: its result is a fresh value.

Address arithmetic is tracked twice. ``term`` is what the hardware computes; ``parts`` splits the same
value into one coefficient (int64) per stride argument plus a stride-free rest, so the in-bounds queries
compare each coefficient with its dimension's size (linear) instead of a product of symbolic values.
``narrow`` marks a value whose stride products or sums were computed below 64 bits, where the hardware
address may differ from the decomposition (the int32-product bug class): only then is the query asked to
prove that they agree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from itertools import count
from types import FrameType

import z3

I64 = 64


class KernelNotSupported(ValueError):
    """The kernel uses an operation the symbolic executor does not model (it names the operation)."""


class DeadPath(Exception):  # noqa: N818 (a control-flow signal, not an error)
    """The path read a table of pointers outside its named entries: nothing it does after that is followed
    (the in-bounds obligation judges that read itself)."""


@dataclass(frozen=True)
class IntType:
    """A Triton integer dtype; ``bits == 1`` is ``int1``, the type of masks and comparisons."""

    bits: int
    name: str

    def __repr__(self) -> str:
        return f"tl.{self.name}"

    @property
    def lo(self) -> int:
        return 0 if self.bits == 1 else -(2 ** (self.bits - 1))

    @property
    def hi(self) -> int:
        return 1 if self.bits == 1 else 2 ** (self.bits - 1) - 1


INT1, INT8, INT16, INT32, INT64 = (IntType(1, "int1"), IntType(8, "int8"), IntType(16, "int16"),
                                   IntType(32, "int32"), IntType(64, "int64"))
DTYPES = {t.name: t for t in (INT1, INT8, INT16, INT32, INT64)}

_fresh_ids = count()


@dataclass(frozen=True)
class Division:
    """A division whose divisor may be zero: ``undefined`` stands for the result then."""

    undefined: z3.ExprRef
    divisor: z3.BitVecRef
    exact: z3.BitVecRef


BRANCHES: ContextVar[Callable[[z3.BoolRef], bool] | None] = ContextVar("BRANCHES", default=None)
"""Decides a Python ``if`` on a symbolic scalar during a forking run (prover/symexec/run.py)."""
PRODUCTS: ContextVar[list[tuple[str, z3.ExprRef]] | None] = ContextVar("PRODUCTS", default=None)
"""Where a symbolic run collects its products of two non-constant values computed below 64 bits, with the kernel
line of each (``FILE:LINE``): the int32 products a wrapped value is explained by."""
DIVISIONS: ContextVar[list[Division] | None] = ContextVar("DIVISIONS", default=None)
"""Where a symbolic run collects its divisions (prover/bindings/queries.py drops the undefined case
wherever the query's assumptions rule out a zero divisor)."""


def free_constants(term: z3.ExprRef) -> list[z3.ExprRef]:
    """The free constants of ``term`` (each once)."""
    seen, todo, out = set(), [term], []
    while todo:
        t = todo.pop()
        if t.get_id() in seen:
            continue
        seen.add(t.get_id())
        if z3.is_const(t) and t.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.append(t)
        todo.extend(t.children())
    return out


def mentions(term: z3.ExprRef, part: z3.ExprRef) -> bool:
    """Whether ``part`` occurs in ``term`` (each shared subterm visited once)."""
    seen, todo = set(), [term]
    while todo:
        t = todo.pop()
        if t.eq(part):
            return True
        if t.get_id() not in seen:
            seen.add(t.get_id())
            todo.extend(t.children())
    return False


def restart_names() -> None:
    """Number fresh values from 0 again: a query built from one run names them the same whatever ran before (z3's
    search, and so how much of its resource limit a query spends, depends on the names)."""
    global _fresh_ids
    _fresh_ids = count()


def fresh(prefix: str, dtype: IntType) -> z3.ExprRef:
    """A new unconstrained value of ``dtype`` (an undefined result, a masked-off load without ``other``)."""
    name = f"{prefix}#{next(_fresh_ids)}"
    return z3.Bool(name) if dtype.bits == 1 else z3.BitVec(name, dtype.bits)


def _sext64(term: z3.BitVecRef) -> z3.BitVecRef:
    return term if term.size() == I64 else z3.SignExt(I64 - term.size(), term)


def _const(value: int, dtype: IntType) -> z3.ExprRef:
    if dtype.bits == 1:
        return z3.BoolVal(bool(value))
    if not dtype.lo <= value <= dtype.hi:
        raise KernelNotSupported(f"the constant {value} does not fit {dtype!r} (Triton raises here too)")
    return z3.BitVecVal(value, dtype.bits)


def _is_one(term: z3.BitVecRef) -> bool:
    return z3.is_bv_value(term) and term.as_long() == 1


def _is_zero(term: z3.BitVecRef) -> bool:
    return z3.is_bv_value(term) and term.as_long() == 0


@dataclass(frozen=True)
class Parts:
    """A value as ``sum(coeffs[s] * s) + rest`` over stride arguments ``s``; all int64 terms."""

    coeffs: tuple[tuple[str, z3.BitVecRef], ...]
    rest: z3.BitVecRef
    narrow: bool = False

    @property
    def strided(self) -> bool:
        return bool(self.coeffs)

    def coeff(self, stride: str) -> z3.BitVecRef | None:
        return dict(self.coeffs).get(stride)

    def plus(self, other: Parts, sign: int, narrow: bool) -> Parts:
        merged = dict(self.coeffs)
        for name, c in other.coeffs:
            mine = merged.get(name)
            theirs = c if sign > 0 else -c
            merged[name] = theirs if mine is None else mine + theirs
        if _is_zero(other.rest):
            rest = self.rest
        elif _is_zero(self.rest) and sign > 0:
            rest = other.rest
        else:
            rest = self.rest + other.rest if sign > 0 else self.rest - other.rest
        return Parts(tuple(sorted(merged.items())), rest, narrow or self.narrow or other.narrow)

    def scaled(self, factor: z3.BitVecRef, narrow: bool) -> Parts:
        coeffs = tuple((n, factor if _is_one(c) else c * factor) for n, c in self.coeffs)
        rest = z3.BitVecVal(0, I64) if _is_zero(self.rest) else self.rest * factor
        return Parts(coeffs, rest, narrow or self.narrow)


class Sym:
    """A symbolic integer block (or scalar): its z3 term, its dtype and its per-stride decomposition."""

    __slots__ = ("term", "dtype", "_parts", "origin")

    def __init__(self, term: z3.ExprRef, dtype: IntType, parts: Parts | None = None,
                 origin: tuple[str, z3.ExprRef, z3.ExprRef] | None = None) -> None:
        self.term, self.dtype, self._parts = term, dtype, parts
        # ("quotient", x, d) for x // d, ("multiple", x, d) for (x // d) * d: kept so that x - (x // d) * d
        # becomes x % d (vLLM's in-block offset), one division fewer for z3
        self.origin = origin

    def __repr__(self) -> str:
        return f"<symbolic {self.dtype!r} block>"

    @property
    def parts(self) -> Parts:
        """The decomposition; a value without strides is all rest."""
        if self._parts is None:
            return Parts((), _sext64(self._int_term()))
        return self._parts

    def _int_term(self) -> z3.BitVecRef:
        if self.dtype.bits == 1:
            return z3.If(self.term, z3.BitVecVal(1, 32), z3.BitVecVal(0, 32))
        return self.term

    @staticmethod
    def stride(name: str, term: z3.BitVecRef, dtype: IntType) -> Sym:
        """A stride argument: the unit of its own coefficient."""
        return Sym(term, dtype, Parts(((name, z3.BitVecVal(1, I64)),), z3.BitVecVal(0, I64)))

    # Conversions ------------------------------------------------------------------------------------
    def to(self, dtype: object, bitcast: bool = False) -> Sym:
        """Triton's ``x.to(dtype)``: sign extension, or the low bits; ``!= 0`` for ``int1``."""
        del bitcast
        if isinstance(dtype, PointerType):
            raise KernelNotSupported(f"an integer cast to {dtype!r}: only an entry loaded from one of the binding's"
                                     " pointer_tables is a pointer (name the tensor it loads from there)")
        if not isinstance(dtype, IntType):
            raise KernelNotSupported(f"cast to {dtype!r}: only integer dtypes are modelled")
        if dtype == self.dtype:
            return self
        if dtype.bits == 1:
            return Sym(self.term != 0, INT1)
        src = self._int_term()
        if dtype.bits > src.size():
            term = z3.SignExt(dtype.bits - src.size(), src)
        elif dtype.bits < src.size():
            term = z3.Extract(dtype.bits - 1, 0, src)
        else:
            term = src
        parts = self._parts
        if parts is not None and parts.strided and dtype.bits < I64:
            parts = Parts(parts.coeffs, parts.rest, True)
        return Sym(term, dtype, parts)

    def __bool__(self) -> bool:
        """A Python ``if`` on a scalar: the branch prover/symexec/run.py's current path takes (it runs the
        kernel once per path); refused outside such a run or on a block (a lane in the condition)."""
        branches = BRANCHES.get()
        condition = self.term if self.dtype.bits == 1 else self.term != 0
        if branches is None:
            raise KernelNotSupported("a Python `if`/`while` on a symbolic value (branch with tl.where and masks)")
        if any(str(c).startswith("lane") for c in free_constants(condition)):
            raise KernelNotSupported("a Python `if`/`while` on a block (a per-lane value): Triton needs a scalar")
        return branches(condition)

    def __index__(self) -> int:
        raise KernelNotSupported("a symbolic value used as a Python int (a range bound or an index)")

    def __getitem__(self, key: object) -> Sym:
        raise KernelNotSupported("indexing a block (x[:, None]): only 1-D blocks are modelled")

    # Arithmetic -------------------------------------------------------------------------------------
    def __add__(self, other: object) -> Sym:
        return _ring(self, other, lambda a, b: a + b, "add")

    def __radd__(self, other: object) -> Sym:
        return _ring(other, self, lambda a, b: a + b, "add")

    def __sub__(self, other: object) -> Sym:
        return _ring(self, other, lambda a, b: a - b, "sub")

    def __rsub__(self, other: object) -> Sym:
        return _ring(other, self, lambda a, b: a - b, "sub")

    def __mul__(self, other: object) -> Sym:
        return _ring(self, other, lambda a, b: a * b, "mul")

    def __rmul__(self, other: object) -> Sym:
        return _ring(other, self, lambda a, b: a * b, "mul")

    def __neg__(self) -> Sym:
        return _ring(0, self, lambda a, b: a - b, "sub")

    def __floordiv__(self, other: object) -> Sym:
        return _divide(self, other, quotient=True)

    def __rfloordiv__(self, other: object) -> Sym:
        return _divide(other, self, quotient=True)

    def __mod__(self, other: object) -> Sym:
        return _divide(self, other, quotient=False)

    def __rmod__(self, other: object) -> Sym:
        return _divide(other, self, quotient=False)

    def __truediv__(self, other: object) -> Sym:
        raise KernelNotSupported("`/` makes a float in Triton; only integer arithmetic is modelled")

    # Comparisons and logic --------------------------------------------------------------------------
    def __lt__(self, other: object) -> Sym:
        return _compare(self, other, lambda a, b: a < b)

    def __le__(self, other: object) -> Sym:
        return _compare(self, other, lambda a, b: a <= b)

    def __gt__(self, other: object) -> Sym:
        return _compare(self, other, lambda a, b: a > b)

    def __ge__(self, other: object) -> Sym:
        return _compare(self, other, lambda a, b: a >= b)

    def __eq__(self, other: object) -> Sym:  # type: ignore[override]  # a term, as Triton's == gives
        return _compare(self, other, lambda a, b: a == b)

    def __ne__(self, other: object) -> Sym:  # type: ignore[override]  # a term, as Triton's != gives
        return _compare(self, other, lambda a, b: a != b)

    __hash__ = None  # type: ignore[assignment]  # unhashable: == builds a term, it answers no question

    def __and__(self, other: object) -> Sym:
        return _logic(self, other, z3.And, "&")

    def __rand__(self, other: object) -> Sym:
        return _logic(other, self, z3.And, "&")

    def __or__(self, other: object) -> Sym:
        return _logic(self, other, z3.Or, "|")

    def __ror__(self, other: object) -> Sym:
        return _logic(other, self, z3.Or, "|")

    def __invert__(self) -> Sym:
        if self.dtype.bits != 1:
            raise KernelNotSupported("bitwise `~` on integers (only masks are negated)")
        return Sym(z3.Not(self.term), INT1)


def as_sym(value: object, like: IntType | None = None) -> Sym:
    """A Python int or bool as a constant of ``like`` (Triton: a scalar takes the tensor's dtype), or int32."""
    if isinstance(value, Sym):
        return value
    if isinstance(value, bool):
        return Sym(z3.BoolVal(value), INT1)
    if isinstance(value, int):
        dtype = like if like is not None and like.bits > 1 else (INT32 if -2**31 <= value < 2**31 else INT64)
        return Sym(_const(value, dtype), dtype)
    raise KernelNotSupported(f"a value of type {type(value).__name__} ({value!r}) in integer arithmetic")


def promote(a: object, b: object) -> tuple[Sym, Sym, IntType]:
    """Both operands at Triton's computation type: a Python int joins the tensor's type, else the wider."""
    if isinstance(a, Sym) and not isinstance(b, Sym):
        b = as_sym(b, a.dtype)
    elif isinstance(b, Sym) and not isinstance(a, Sym):
        a = as_sym(a, b.dtype)
    a, b = as_sym(a), as_sym(b)
    dtype = a.dtype if a.dtype.bits >= b.dtype.bits else b.dtype
    if dtype.bits == 1 and (a.dtype.bits, b.dtype.bits) != (1, 1):
        dtype = INT32
    return a.to(dtype), b.to(dtype), dtype


def _ring(a: object, b: object, op: Callable, name: str) -> Sym:
    x, y, dtype = promote(a, b)
    if dtype.bits == 1:
        raise KernelNotSupported(f"arithmetic `{name}` on masks")
    if name == "mul" and (_is_one(x.term) or _is_one(y.term)):  # x * 1: the same value (a constexpr factor of 1)
        return y if _is_one(x.term) else x
    if name == "sub" and y.origin and y.origin[0] == "multiple" and y.origin[1].eq(x.term):
        numerator, divisor = y.origin[1:]  # x - (x // d) * d is x % d exactly (x where d is 0: (undefined) * 0)
        return Sym(z3.If(divisor == 0, numerator, z3.SRem(numerator, divisor)), dtype)
    term = op(x.term, y.term)
    narrow = dtype.bits < I64
    products = PRODUCTS.get()
    if name == "mul" and narrow and products is not None and not (z3.is_bv_value(x.term) or z3.is_bv_value(y.term)):
        products.append((kernel_site(), term))
    px, py = x.parts, y.parts
    if not (px.strided or py.strided):
        return Sym(term, dtype, origin=_multiple(x, y) if name == "mul" else None)
    if name == "mul":
        if px.strided and py.strided:
            return Sym(term, dtype, _opaque(term))
        strided, factor = (px, py) if px.strided else (py, px)
        return Sym(term, dtype, strided.scaled(factor.rest, narrow))
    return Sym(term, dtype, px.plus(py, 1 if name == "add" else -1, narrow))


def kernel_site() -> str:
    """``FILE:LINE`` of the innermost frame outside this package: the kernel line running now."""
    here = os.path.dirname(os.path.dirname(__file__))
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(here):
        frame = frame.f_back
    return "" if frame is None else f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _opaque(term: z3.BitVecRef) -> Parts:
    """A value that mixes strides non-linearly: no decomposition (using it as an address is refused)."""
    return Parts((("<product of strides>", z3.BitVecVal(0, I64)),), _sext64(term))


def _divide(a: object, b: object, *, quotient: bool) -> Sym:
    if isinstance(a, int) and isinstance(b, int):
        raise AssertionError("constexpr arithmetic is plain Python")
    x, y, dtype = promote(a, b)
    if dtype.bits == 1:
        raise KernelNotSupported("division of masks")
    if x.parts.strided or y.parts.strided:
        raise KernelNotSupported("division of a value built from a stride argument")
    if _is_one(y.term):  # x // 1 is x, x % 1 is 0: no division for z3 to reason about
        return x if quotient else Sym(z3.BitVecVal(0, dtype.bits), dtype)
    exact = x.term / y.term if quotient else z3.SRem(x.term, y.term)
    origin = ("quotient", x.term, y.term) if quotient else None
    if z3.is_bv_value(y.term) and y.term.as_long() != 0:
        return Sym(exact, dtype, origin=origin)
    undefined = fresh("div0", dtype)
    divisions = DIVISIONS.get()
    if divisions is not None:
        divisions.append(Division(undefined, y.term, exact))
    return Sym(z3.If(y.term == 0, undefined, exact), dtype, origin=origin)


def _multiple(x: Sym, y: Sym) -> tuple[str, z3.ExprRef, z3.ExprRef] | None:
    """``("multiple", n, d)`` when ``x * y`` is ``(n // d) * d`` (either order)."""
    for q, d in ((x, y), (y, x)):
        if q.origin and q.origin[0] == "quotient" and q.origin[2].eq(d.term):
            return ("multiple", q.origin[1], d.term)
    return None


def _compare(a: object, b: object, op: Callable) -> Sym:
    """A comparison of the values the hardware computes (a stride's too: vLLM bounds a column by the row
    stride); a mask has no address decomposition to keep."""
    x, y, _ = promote(a, b)
    return Sym(op(x.term, y.term), INT1)


def _logic(a: object, b: object, op: Callable, name: str) -> Sym:
    x, y, dtype = promote(a, b)
    if dtype.bits != 1:
        raise KernelNotSupported(f"bitwise `{name}` on integers (only masks are combined)")
    return Sym(op(x.term, y.term), INT1)


def select(cond: object, a: object, b: object) -> Sym:
    """``tl.where``: the promoted branch values, chosen per lane."""
    c = as_sym(cond)
    if c.dtype.bits != 1:
        c = c.to(INT1)
    x, y, dtype = promote(a, b)
    if x.parts.strided or y.parts.strided:
        raise KernelNotSupported("tl.where on a value built from a stride argument")
    return Sym(z3.If(c.term, x.term, y.term), dtype)


def extremum(a: object, b: object, *, larger: bool) -> Sym:
    """``tl.maximum`` / ``tl.minimum`` on signed integers."""
    x, y, _ = promote(a, b)
    return select(Sym(x.term > y.term if larger else x.term < y.term, INT1), x, y)


@dataclass(frozen=True)
class Pointer:
    """A pointer into tensor argument ``tensor``: the hardware element offset and its decomposition."""

    tensor: str
    dtype: IntType
    offset: z3.BitVecRef
    """The element offset the hardware adds to the base (int64, each addend sign-extended)."""
    parts: Parts

    def __add__(self, other: object) -> Pointer:
        off = as_sym(other)
        if off.dtype.bits == 1:
            raise KernelNotSupported("a mask added to a pointer")
        # addptr sign-extends a narrower offset; the decomposition of that offset is kept as computed
        return Pointer(self.tensor, self.dtype, self.offset + _sext64(off.term), self.parts.plus(off.parts, 1, False))

    __radd__ = __add__

    def __sub__(self, other: object) -> Pointer:
        return self + (-as_sym(other))

    def __bool__(self) -> bool:
        """``if ptr:`` (SGLang's optional tensors): a tensor argument's pointer is never null."""
        return True


    def to(self, dtype: object, bitcast: bool = False) -> Pointer:
        """``ptr.to(tl.pointer_type(t))``: the same pointer where ``t`` is its element type (else refused)."""
        del bitcast
        if not isinstance(dtype, PointerType):
            raise KernelNotSupported(f"a pointer into {self.tensor} converted to {dtype!r}: only a cast to a pointer"
                                     " type is modelled")
        if dtype.element != self.dtype:
            raise KernelNotSupported(f"a pointer into {self.tensor} ({self.dtype!r} elements) cast to a pointer to"
                                     f" {dtype.element!r}: a reinterpretation of its elements is not modelled")
        return self


@dataclass(frozen=True)
class PointerType:
    """``tl.pointer_type(dtype)``: the target of ``tl.cast`` for an entry of a table of pointers."""

    element: IntType


@dataclass(frozen=True)
class Address:
    """An entry loaded from a table of pointers: the integer address of the tensor it names plus a whole number of
    bytes, not yet a pointer (Triton: a ``uint64``); ``tl.cast``/``.to(tl.pointer_type(t))`` makes it one."""

    target: Pointer
    """A pointer to element 0 of the named tensor."""
    bytes: int = 0

    def to(self, dtype: object, bitcast: bool = False) -> Pointer:
        """The pointer it is, to elements of ``dtype.element`` (the named tensor's own type, else refused)."""
        del bitcast
        if not isinstance(dtype, PointerType):
            raise KernelNotSupported(f"a loaded address of {self.target.tensor} converted to {dtype!r}: only a cast"
                                     " to a pointer type is modelled")
        if dtype.element != self.target.dtype:
            raise KernelNotSupported(f"the address of {self.target.tensor} ({self.target.dtype!r} elements) cast to"
                                     f" a pointer to {dtype.element!r}")
        size = max(1, dtype.element.bits // 8)
        if self.bytes % size:
            raise KernelNotSupported(f"the address of {self.target.tensor} plus {self.bytes} bytes: not a whole"
                                     f" {dtype.element!r} element")
        return self.target + self.bytes // size

    def __add__(self, other: object) -> Address:
        """Integer arithmetic on the address: bytes (a constant number of them is modelled)."""
        if isinstance(other, bool) or not isinstance(other, int):
            raise KernelNotSupported(f"a symbolic number of bytes added to the loaded address of {self.target.tensor}"
                                     " (cast it to a pointer type first, then add elements)")
        return Address(self.target, self.bytes + other)

    __radd__ = __add__

    def __sub__(self, other: object) -> Address:
        if isinstance(other, bool) or not isinstance(other, int):
            raise KernelNotSupported(f"a symbolic number of bytes taken from the loaded address of"
                                     f" {self.target.tensor}")
        return Address(self.target, self.bytes - other)

    def __bool__(self) -> bool:
        return True
