"""Out-of-bounds reads and writes of eager torch indexing ops, caught at torch's dispatch level before they run.

An eager backend that gathers past a table's width gets an ``IndexError`` on CPU, a device-side assert or a
silent garbage read on CUDA; a property must never take that for a refusal. ``IndexGuard`` sees every aten op
a backend call runs; for the ops that take indices (``index``, ``gather``, ``index_select``, ``take``,
``embedding``, ``select``, the ``index_put``/``scatter``/``index_copy`` family) it compares the indices with
the indexed tensor's size (one min and max per index tensor) and, for an index outside ``[0, size)`` (or
``[-size, size)`` where the op wraps negative indices), reports an ``OutOfBoundsIndex`` to ``on_hit`` and
raises it instead of running the op.

A dispatch mode costs every aten op a trip through Python (about 6 us, more than most ops on a table), and most of
a backend's ops index nothing: so the guard is a function mode screening each torch call first (about 2 us). A
call of ``NO_INDEXING`` (arithmetic, comparisons, views, reductions, sorts, factories, metadata: ops whose kernels
dispatch no indexing op) runs as it is; ``index_select``, ``tensor[index]`` and ``tensor[index] = value`` with plain
integer index tensors are checked as the aten op they are (the same check, the same message); every other call runs
under ``IndexOps``, the dispatch mode that checks each aten op it dispatches. A C++ custom op is a ``torch.ops``
call, never skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["IndexGuard", "OutOfBoundsIndex"]

aten = torch.ops.aten
_DIM_INDEX = {aten.gather: "read", aten.index_select: "read", aten.scatter: "write", aten.scatter_: "write",
              aten.scatter_add: "write", aten.scatter_add_: "write", aten.scatter_reduce: "write",
              aten.scatter_reduce_: "write", aten.index_add: "write", aten.index_add_: "write",
              aten.index_copy: "write", aten.index_copy_: "write", aten.index_fill: "write",
              aten.index_fill_: "write"}
"""Ops called ``(self, dim, index, ...)``: the index tensor addresses ``self`` along ``dim``."""
_INDICES = {aten.index: "read", aten._unsafe_index: "read", aten.index_put: "write", aten.index_put_: "write",
            aten._index_put_impl_: "write", aten._unsafe_index_put: "write"}
"""Ops called ``(self, indices, ...)``: advanced indexing, one optional index tensor per leading dimension."""
_WRAPS = frozenset(op.__name__ for op in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_,
                                          aten.take, aten.index_fill, aten.index_fill_))
"""Ops that read a negative index ``i`` as ``size + i`` (the others refuse any negative index)."""
_WATCHED = frozenset(op.__name__ for op in (*_DIM_INDEX, *_INDICES, aten.take, aten.embedding))
"""Their names: a string lookup per op is the whole cost of every other op. Not ``select`` (``tensor[i]`` with an
int): a view whose index torch checks on the host on every device, so out of range it is a refusal, never a read."""

_NO_INDEXING_NAMES = (
    "add sub mul div floor_divide remainder fmod neg abs true_divide rsub eq ne lt le gt ge logical_and logical_or "
    "logical_not logical_xor bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift "
    "where clamp clamp_min clamp_max clamp_ clamp_min_ clamp_max_ minimum maximum min max amin amax aminmax sum prod "
    "cumsum cumprod cummax cummin any all argmax argmin view view_as reshape unsqueeze squeeze expand expand_as "
    "flatten unflatten permute transpose t contiguous narrow as_strided unbind cat stack long int short bool float "
    "double to type_as clone detach dim numel size stride item tolist is_contiguous storage_offset data_ptr "
    "untyped_storage element_size arange zeros ones full empty zeros_like ones_like full_like empty_like tensor "
    "as_tensor scalar_tensor device addcmul add_ sub_ mul_ bitwise_and_ bitwise_or_ masked_fill masked_fill_ fill_ "
    "zero_ copy_ new_full new_ones new_zeros new_empty new_tensor cumsum_ "
    "__add__ __radd__ __iadd__ __sub__ __rsub__ __isub__ __mul__ __rmul__ __imul__ __floordiv__ __rfloordiv__ "
    "__ifloordiv__ __mod__ __rmod__ __truediv__ __rtruediv__ __neg__ __and__ __rand__ __iand__ __or__ __ror__ "
    "__ior__ __xor__ __rxor__ __invert__ __lt__ __le__ __gt__ __ge__ __eq__ __ne__ __lshift__ __rshift__ __len__ "
    "__int__ __bool__ __index__ __hash__ sort argsort searchsorted"
).split()
NO_INDEXING = frozenset(
    [getattr(owner, name) for owner in (torch, torch.Tensor) for name in _NO_INDEXING_NAMES if hasattr(owner, name)]
    + [getattr(torch.Tensor, name).__get__ for name in ("shape", "dtype", "device", "is_meta", "is_cuda", "ndim")])
"""Torch calls whose kernels dispatch no indexing op: they run outside ``IndexOps`` (a view's bounds, like
``select``'s, torch checks on the host)."""
_GETITEM = torch.Tensor.__getitem__
_SETITEM = torch.Tensor.__setitem__
_INDEX_SELECT = frozenset({torch.Tensor.index_select, torch.index_select})
_BASIC = frozenset({int, slice, type(None), type(Ellipsis)})
"""``tensor[...]`` with only these is views (``select``, ``slice``): no indexing op."""
_INDEX_DTYPES = (torch.int64, torch.int32)
_MASK_DTYPES = frozenset({torch.bool, torch.uint8})
SMALL_INDEX = 64
"""Up to this many indices, their least and greatest are read as a list (one op) instead of ``aminmax`` (three)."""


@dataclass(eq=False)
class OutOfBoundsIndex(IndexError):
    """An indexing op asked for an element its tensor does not have: the op, the access and the first bad index."""

    op: str
    access: str
    """``read`` or ``write``."""
    index: int
    position: tuple[int, ...]
    """Where the bad index sits in its index tensor."""
    dim: int
    size: int
    shape: tuple[int, ...]
    call: str = ""
    """The backend call it ran in (``watched`` names it)."""

    def __str__(self) -> str:
        at = f" at index position {list(self.position)}" if self.position else ""
        shape = f" (tensor of shape {list(self.shape)})" if self.shape else ""
        within = f" in {self.call}" if self.call else ""
        return (f"out-of-bounds {self.access}{within}: {self.op} with index {self.index}{at} into dimension "
                f"{self.dim} of size {self.size}{shape}")


class IndexGuard(TorchFunctionMode):
    """Bounds-check the indices of every indexing op run inside; ``on_hit`` gets each ``OutOfBoundsIndex``."""

    def __init__(self, on_hit: Callable[[OutOfBoundsIndex], None]) -> None:
        super().__init__()
        self.on_hit = on_hit
        self.ops = IndexOps(on_hit)

    def __torch_function__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        if func in NO_INDEXING:
            return func(*args, **kwargs) if kwargs else func(*args)
        kwargs = kwargs or {}
        if func is _GETITEM and not kwargs and len(args) == 2:
            items = args[1] if type(args[1]) is tuple else (args[1],)
            if _BASIC.issuperset(map(type, items)):
                return func(*args)
            if _plain(items) and isinstance(args[0], torch.Tensor) and len(items) <= args[0].dim():
                return self._checked(_advanced("aten.index", "read", args[0], items), func, args)
        elif func is _SETITEM and not kwargs and len(args) == 3 and type(args[1]) is not tuple and _plain(args[1:2]) \
                and isinstance(args[0], torch.Tensor) and args[0].dim() >= 1:
            return self._checked(_advanced("aten.index_put_", "write", args[0], args[1:2]), func, args)
        elif func in _INDEX_SELECT and not kwargs and len(args) == 3 and type(args[1]) is int and _plain(args[2:]):
            return self._checked(_bounds("aten.index_select", "read", args[0], args[1], args[2]), func, args)
        with self.ops:
            return func(*args, **kwargs)

    def _checked(self, hit: OutOfBoundsIndex | None, func: Any, args: Sequence[Any]) -> Any:
        """``func(*args)`` once its one indexing op's check found nothing (else the hit, reported and raised)."""
        if hit is not None:
            self.on_hit(hit)
            raise hit
        return func(*args)


def _plain(indices: Sequence[Any]) -> bool:
    """Integer index tensors of at least one dimension: ``tensor[indices]`` is ``aten.index`` with them as they are
    (a 0-d one torch may read as an int, a mask or a list it converts: those go through ``IndexOps``)."""
    return all(type(i) is torch.Tensor and i.dtype in _INDEX_DTYPES and i.dim() >= 1 for i in indices)


class IndexOps(TorchDispatchMode):
    """Bounds-check the indices of every indexing op dispatched inside; ``on_hit`` gets each ``OutOfBoundsIndex``."""

    def __init__(self, on_hit: Callable[[OutOfBoundsIndex], None]) -> None:
        super().__init__()
        self.on_hit = on_hit

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """No dynamo wrapper around ``__torch_dispatch__``: it imports ``torch._dynamo`` (seconds) on first use and
        costs a frame per op; nothing compiles this mode's code."""
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func._opname in _WATCHED:
            hit = _check(func.overloadpacket, args, kwargs)
            if hit is not None:
                self.on_hit(hit)
                raise hit
        return func(*args, **kwargs)


def _check(packet: Any, args: Sequence[Any], kwargs: dict[str, Any]) -> OutOfBoundsIndex | None:
    """The first out-of-bounds index of an indexing op's call, or None."""
    name = f"aten.{packet.__name__}"
    if packet in _DIM_INDEX:
        self, dim, index = _arg(args, kwargs, 0, "self"), _arg(args, kwargs, 1, "dim"), _arg(args, kwargs, 2, "index")
        return _bounds(name, _DIM_INDEX[packet], self, int(dim), index)
    if packet in _INDICES:
        return _advanced(name, _INDICES[packet], _arg(args, kwargs, 0, "self"), _arg(args, kwargs, 1, "indices"))
    if packet is aten.take:
        self, index = _arg(args, kwargs, 0, "self"), _arg(args, kwargs, 1, "index")
        return _bounds(name, "read", self.reshape(-1) if self.dim() else self.reshape(1), 0, index)
    if packet is aten.embedding:
        return _bounds(name, "read", _arg(args, kwargs, 0, "weight"), 0, _arg(args, kwargs, 1, "indices"))
    return None


def _arg(args: Sequence[Any], kwargs: dict[str, Any], i: int, name: str) -> Any:
    return args[i] if i < len(args) else kwargs.get(name)


def _advanced(op: str, access: str, self: torch.Tensor, indices: Sequence[torch.Tensor | None]
              ) -> OutOfBoundsIndex | None:
    """Advanced indexing: index k addresses dimension k (a boolean mask covers as many dimensions as it has)."""
    dim = 0
    for index in indices:
        if index is None:
            dim += 1
            continue
        if index.dtype in _MASK_DTYPES:  # a mask: each of its sizes must fit the dimension it covers
            for k, size in enumerate(index.shape):
                if dim + k < self.dim() and size > self.shape[dim + k]:
                    return OutOfBoundsIndex(op, access, size - 1, (), dim + k, self.shape[dim + k], tuple(self.shape))
            dim += index.dim()
            continue
        hit = _bounds(op, access, self, dim, index)
        if hit is not None:
            return hit
        dim += 1
    return None


def _bounds(op: str, access: str, self: Any, dim: int, index: Any) -> OutOfBoundsIndex | None:
    """An index (a tensor or an int) against ``self``'s size along ``dim``: one min and max, then the first bad one."""
    if not isinstance(self, torch.Tensor) or self.is_meta:
        return None
    dim = dim % max(self.dim(), 1)
    size = self.shape[dim] if self.dim() else 1
    least = -size if op.removeprefix("aten.") in _WRAPS else 0
    if isinstance(index, int):
        return None if least <= index < size else OutOfBoundsIndex(op, access, index, (), dim, size, tuple(self.shape))
    if not isinstance(index, torch.Tensor) or index.numel() == 0 or index.is_meta or index.dtype.is_floating_point \
            or index.dtype == torch.bool:
        return None
    if index.numel() <= SMALL_INDEX:
        values = index.tolist() if index.dim() == 1 else index.reshape(-1).tolist()
        low, high = min(values), max(values)
    else:
        low, high = (int(v) for v in torch.aminmax(index))
    if least <= low and high < size:
        return None
    bad = ((index < least) | (index >= size)).nonzero()[0].tolist()
    value = int(index[tuple(bad)]) if index.dim() else int(index)
    return OutOfBoundsIndex(op, access, value, tuple(bad), dim, size, tuple(self.shape))
