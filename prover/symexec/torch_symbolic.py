"""A symbolic run of impl/torch_kernels.py's formulas: torch functions on z3 terms, one element at a time.

``SymTensor`` is a tensor-like (torch's ``__torch_function__`` protocol sends ``torch.div``, ``torch.add``,
``torch.addcmul``, ``torch.arange``, ``torch.where`` here): a shape whose sizes are ints or 0-d SymTensors
(symbolic sizes), and an element function giving the z3 term of the element at symbolic indices. Elementwise
operations broadcast (a size-1 dimension reads index 0); ``view`` only adds or drops size-1 dimensions;
indexing with tensors reads the indexed tensor's elements and records each index with its dimension, so an
obligation can ask that each lies inside it (torch raises on any other index: a refusal, never a wrong read).
Integer semantics are torch's: int64 arithmetic wraps, ``torch.div(..., rounding_mode="floor")`` and ``%``
round toward minus infinity, a negative index counts from the end, ``.to(torch.int32)`` keeps the low bits.
A Python ``if`` is taken only on a condition that simplifies to a constant (a size compared with itself).
Anything else raises ``KernelNotSupported`` naming it (as prover/symexec/values.py does for Triton).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import z3

from kvtable.prover.symexec.values import KernelNotSupported

Index = tuple[z3.ExprRef, ...]
Size = "int | SymTensor"
BITS = {torch.int32: 32, torch.int64: 64}


class Reads:
    """The indices every tensor read used, with the size of the dimension each indexes."""

    def __init__(self) -> None:
        self.indices: list[tuple[z3.BitVecRef, z3.BitVecRef]] = []

    def inside(self) -> z3.BoolRef:
        return z3.And(*[z3.And(-size <= i, i < size) for i, size in self.indices])


def _term(value: Any, bits: int) -> z3.ExprRef:
    """A Python int or 0-d SymTensor as a term of ``bits`` (a size is an int64 value)."""
    if isinstance(value, SymTensor):
        return _cast(value.at(()), value.dtype, bits)
    if isinstance(value, bool) or not isinstance(value, int):
        raise KernelNotSupported(f"a {type(value).__name__} operand in a symbolic torch run")
    return z3.BitVecVal(value, bits)


def _cast(term: z3.ExprRef, dtype: torch.dtype, bits: int) -> z3.ExprRef:
    if dtype == torch.bool:
        return z3.If(term, z3.BitVecVal(1, bits), z3.BitVecVal(0, bits))
    have = BITS[dtype]
    return term if have == bits else z3.SignExt(bits - have, term) if have < bits else z3.Extract(bits - 1, 0, term)


def _dtype(*operands: Any) -> torch.dtype:
    """torch's promotion among int32 and int64 tensors: a tensor with dimensions outranks a 0-d one, and a
    Python int takes the tensors' type."""
    tensors = [o for o in operands if isinstance(o, SymTensor) and o.dtype != torch.bool]
    ranked = [o.dtype for o in tensors if o.shape] or [o.dtype for o in tensors]
    return torch.int32 if ranked and all(d == torch.int32 for d in ranked) else torch.int64


def _broadcast(operands: Sequence[Any]) -> tuple[Any, ...]:
    rank = max((len(o.shape) for o in operands if isinstance(o, SymTensor)), default=0)
    shape: list[Any] = [1] * rank
    for o in operands:
        if isinstance(o, SymTensor):
            for d, size in enumerate(o.shape, rank - len(o.shape)):
                if not (isinstance(size, int) and size == 1):
                    shape[d] = size
    return tuple(shape)


def _element(o: Any, index: Index, bits: int) -> z3.ExprRef:
    """Operand ``o``'s element at the broadcast ``index`` (a size-1 dimension reads 0), as ``bits``."""
    if not isinstance(o, SymTensor):
        return _term(o, bits)
    own = index[len(index) - len(o.shape):] if o.shape else ()
    own = tuple(z3.BitVecVal(0, 64) if isinstance(s, int) and s == 1 else i for i, s in zip(own, o.shape, strict=True))
    term = o.at(own)
    return term if o.dtype == torch.bool else _cast(term, o.dtype, bits)


def _map(fn: Callable[..., z3.ExprRef], *operands: Any, dtype: torch.dtype | None = None,
         result: torch.dtype | None = None) -> SymTensor:
    """Elementwise ``fn`` over the operands, computed at ``dtype``'s width, the result typed ``result``."""
    dtype = dtype or _dtype(*operands)
    bits = BITS.get(dtype, 64)
    now = [o.snapshot() if isinstance(o, SymTensor) else o for o in operands]  # later in-place ops don't leak in
    return SymTensor(_broadcast(now), lambda index: fn(*(_element(o, index, bits) for o in now)), result or dtype)


def floor_div(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    quotient = a / b  # truncates toward zero
    return z3.If(z3.And(a % b != 0, (a < 0) != (b < 0)), quotient - 1, quotient)


def floor_mod(a: z3.BitVecRef, b: z3.BitVecRef) -> z3.BitVecRef:
    return a - floor_div(a, b) * b


class SymTensor:
    """A tensor-like of z3 terms: ``at(index)`` is the element at symbolic int64 ``index``."""

    device = torch.device("cpu")

    def __init__(self, shape: Sequence[Any], at: Callable[[Index], z3.ExprRef], dtype: torch.dtype) -> None:
        self.shape, self.at, self.dtype = tuple(shape), at, dtype

    def snapshot(self) -> SymTensor:
        """This tensor's value now (an in-place op later replaces ``self.at``, not this one's)."""
        return SymTensor(self.shape, self.at, self.dtype)

    @classmethod
    def scalar(cls, term: z3.ExprRef, dtype: torch.dtype = torch.int64) -> SymTensor:
        return cls((), lambda _: term, dtype)

    @classmethod
    def leaf(cls, name: str, shape: Sequence[Any], dtype: torch.dtype, reads: Reads) -> SymTensor:
        """A tensor argument: its contents an uninterpreted function of its (range-checked) indices."""
        fn = z3.Function(name, *[z3.BitVecSort(64)] * len(shape), z3.BitVecSort(BITS[dtype]))
        return cls(shape, lambda index: fn(*index), dtype)._checked(reads)

    def _checked(self, reads: Reads) -> SymTensor:
        sizes = [_term(s, 64) for s in self.shape]
        at = self.at

        def read(index: Index) -> z3.ExprRef:
            reads.indices.extend(zip(index, sizes, strict=True))
            return at(tuple(z3.If(i < 0, i + s, i) for i, s in zip(index, sizes, strict=True)))
        return SymTensor(self.shape, read, self.dtype)

    # torch's protocol ----------------------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        kwargs.pop("device", None)
        dtype = kwargs.pop("dtype", None)
        if func is torch.div and kwargs.pop("rounding_mode", None) == "floor" and not kwargs:
            return _map(floor_div, *args)
        if func is torch.add and len(args) == 2 and not kwargs:
            return _map(lambda a, b: a + b, *args)
        if func is torch.addcmul and len(args) == 3 and set(kwargs) <= {"value"}:
            value = kwargs.get("value", 1)
            return _map(lambda a, b, c: a + b * c * value, *args)
        if func is torch.arange and not kwargs and len(args) in (1, 2):
            start, end = (0, *args) if len(args) == 1 else args
            steps = SymTensor((end - start,), lambda index: _term(start, 64) + index[0], torch.int64)
            return steps if dtype in (None, torch.int64) else steps.to(dtype)
        if func is torch.where and len(args) == 3 and not kwargs:
            return _map(z3.If, *args, dtype=_dtype(*args[1:]))
        raise KernelNotSupported(f"torch.{getattr(func, '__name__', func)} in a symbolic torch run")

    # shape -----------------------------------------------------------------------------------------
    def dim(self) -> int:
        return len(self.shape)

    def view(self, *shape: Any) -> SymTensor:
        """Only size-1 dimensions added or dropped: the other sizes stay, in order."""
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        def kept(sizes: Sequence[Any]) -> list[int]:
            return [d for d, s in enumerate(sizes) if not (isinstance(s, int) and s == 1)]
        old, new = kept(self.shape), kept(shape)
        if len(old) != len(new):
            raise KernelNotSupported(f"view {self.shape} -> {shape} in a symbolic torch run (only size-1 dims)")

        base, rank = self.at, len(self.shape)

        def at(index: Index) -> z3.ExprRef:
            inner = [z3.BitVecVal(0, 64)] * rank
            for o, n in zip(old, new, strict=True):
                inner[o] = index[n]
            return base(tuple(inner))
        return SymTensor(shape, at, self.dtype)

    def __getitem__(self, key: Any) -> SymTensor:
        if isinstance(key, slice) and key.start is None and key.step is None and self.shape:
            return SymTensor((key.stop, *self.shape[1:]), self.at, self.dtype)
        if isinstance(key, tuple) and len(key) == len(self.shape):
            base, key = self.at, [k.snapshot() if isinstance(k, SymTensor) else k for k in key]
            return SymTensor(_broadcast(key), lambda index: base(tuple(_element(k, index, 64) for k in key)),
                             self.dtype)
        raise KernelNotSupported(f"indexing with {key!r} in a symbolic torch run")

    # values ----------------------------------------------------------------------------------------
    def to(self, dtype: torch.dtype) -> SymTensor:
        base, have = self.at, self.dtype
        return SymTensor(self.shape, lambda index: _cast(base(index), have, BITS[dtype]), dtype)

    def _assign(self, other: SymTensor) -> SymTensor:
        """An in-place op: this tensor now holds ``other`` (computed from a snapshot; this dtype)."""
        self.at = other.to(self.dtype).at if other.dtype != self.dtype else other.at
        return self

    def clamp_min(self, low: Any) -> SymTensor:
        return _map(lambda a, b: z3.If(a < b, b, a), self, low, dtype=self.dtype)

    def clamp_max(self, high: Any) -> SymTensor:
        return _map(lambda a, b: z3.If(a > b, b, a), self, high, dtype=self.dtype)

    def clamp_min_(self, low: Any) -> SymTensor:
        return self._assign(self.clamp_min(low))

    def masked_fill_(self, mask: SymTensor, value: int) -> SymTensor:
        return self._assign(_map(z3.If, mask, value, self, dtype=self.dtype))

    def sub_(self, other: Any) -> SymTensor:
        return self._assign(self - other)

    def add_(self, other: Any) -> SymTensor:
        return self._assign(self + other)

    def __add__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a + b, self, other)

    __radd__ = __add__

    def __sub__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a - b, self, other)

    def __rsub__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a - b, other, self)

    def __mul__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a * b, self, other)

    __rmul__ = __mul__

    def __neg__(self) -> SymTensor:
        return _map(lambda a: -a, self)

    def __floordiv__(self, other: Any) -> SymTensor:
        return _map(floor_div, self, other)

    def __mod__(self, other: Any) -> SymTensor:
        return _map(floor_mod, self, other)

    def __rshift__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a >> b, self, other)

    def __lt__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a < b, self, other, result=torch.bool)

    def __le__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a <= b, self, other, result=torch.bool)

    def __gt__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a > b, self, other, result=torch.bool)

    def __ge__(self, other: Any) -> SymTensor:
        return _map(lambda a, b: a >= b, self, other, result=torch.bool)

    def __eq__(self, other: object) -> SymTensor:  # type: ignore[override]  # elementwise, as torch's == gives
        return _map(lambda a, b: a == b, self, other, result=torch.bool)

    def __ne__(self, other: object) -> SymTensor:  # type: ignore[override]  # elementwise, as torch's != gives
        return _map(lambda a, b: a != b, self, other, result=torch.bool)

    __hash__ = object.__hash__  # a key of impl's caches: by identity

    def __bool__(self) -> bool:
        """A Python ``if`` on a 0-d condition that simplifies to a constant (the same size on both sides);
        any other is refused."""
        decided = z3.simplify(self.at(())) if not self.shape else None
        if decided is None or not (z3.is_true(decided) or z3.is_false(decided)):
            raise KernelNotSupported("a Python `if` on a symbolic tensor value in a symbolic torch run")
        return z3.is_true(decided)
