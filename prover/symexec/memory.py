"""A sparse virtual memory behind the Triton interpreter's loads and stores: tensors of any extent, at the cost
of the elements touched.

A counterexample whose addresses are computed below 64 bits (an int32 product of a stride) shows only with its
own strides, and those make its tensors span more than 2^31 elements. A ``VirtualTensor`` has the model's sizes
and strides at a virtual base address, with no storage behind it: a dict of the elements set or stored, a
default value elsewhere. Inside ``virtual_memory()`` the interpreter serves every load and store from those
dicts and never from host memory: each unmasked lane's address is looked up among the tensors' byte ranges
(prover/symexec/guard.py's ``check_access``); a lane inside none is a blocked ``GuardHit`` (a load gets ``other``,
or 0), and no address is ever dereferenced. The kernel's own arithmetic, its int32 wraps included, is the
interpreter's.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

from kvtable.internals import private
from kvtable.prover.symexec.guard import GuardLog, Region, check_access

FIRST_BASE = 1 << 40
"""Where the first virtual tensor starts: a virtual address, never dereferenced."""
GAP_BYTES = 1 << 44
"""Space between two virtual tensors: more than a replayable launch's addresses stray from their tensor (its
offsets, wrapped or not, stay within 3 dimensions x 64 x 2^31 elements of 8 bytes, under 2^42 bytes), so a
wrapped address lands in no neighbour by accident."""
ADDRESS_LIMIT = 1 << 62


@dataclass
class VirtualTensor:
    """A tensor with sizes and strides but no storage: the elements set or stored, ``default`` elsewhere."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    base: int
    default: int = 0
    values: dict[int, int] = field(default_factory=dict)

    @property
    def itemsize(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()

    @property
    def extent(self) -> int:
        """Elements from the first to one past the last (the view's span in its storage)."""
        if any(s == 0 for s in self.shape):
            return 0
        return 1 + sum((s - 1) * st for s, st in zip(self.shape, self.strides, strict=True))

    def stride(self, dim: int) -> int:
        return self.strides[dim]

    def region(self) -> Region:
        return Region(self.name, self.base, self.extent * self.itemsize, self.itemsize, self.shape, self.strides)

    def offset(self, index: Sequence[int]) -> int:
        return sum(i * s for i, s in zip(index, self.strides, strict=True))

    def fill_(self, value: int) -> None:
        self.default, self.values = value, {}

    def read(self, offset: int) -> int:
        return self.values.get(offset, self.default)

    def write(self, offset: int, value: int) -> None:
        bits = 8 * self.itemsize
        self.values[offset] = (int(value) + 2 ** (bits - 1)) % 2**bits - 2 ** (bits - 1)  # the element's width

    def __getitem__(self, index: tuple[int, ...]) -> int:
        return self.read(self.offset(index))


def virtual_tensors(specs: Sequence[tuple[str, torch.dtype, tuple[int, ...], tuple[int, ...]]]
                    ) -> dict[str, VirtualTensor]:
    """One virtual tensor per ``(name, dtype, shape, strides)``, each at its own base, ``GAP_BYTES`` apart."""
    tensors, base = {}, FIRST_BASE
    for name, dtype, shape, strides in specs:
        tensor = VirtualTensor(name, dtype, shape, strides, base)
        tensors[name] = tensor
        base += -(-(tensor.extent * tensor.itemsize + GAP_BYTES) // 4096) * 4096
    if base > ADDRESS_LIMIT:
        raise ValueError(f"the tensors span {base - FIRST_BASE} bytes: more than a virtual address space holds")
    return tensors


@contextmanager
def virtual_memory(tensors: Mapping[str, VirtualTensor]) -> Iterator[GuardLog]:
    """Launches inside take ``VirtualTensor`` arguments and read and write only them (every access logged)."""
    import triton.language as tl

    interpreter, TensorHandle = private("triton_interpreter"), private("TensorHandle")
    interpreter_builder, mangle_type = private("interpreter_builder"), private("mangle_type")

    log = GuardLog([t.region() for t in tensors.values()])
    convert = interpreter._implicit_cvt

    def as_pointer(arg: object) -> object:
        if not isinstance(arg, VirtualTensor):
            return convert(arg)
        ty = tl.str_to_ty(mangle_type(torch.empty(0, dtype=arg.dtype)), None)
        return tl.tensor(TensorHandle(np.array([arg.base], dtype=np.uint64), ty), ty)

    def load(ptrs, mask, other, cache_policy, is_volatile):  # noqa: ANN001, ANN202 (Triton's hook)
        element = ptrs.get_element_ty()
        dtype = interpreter._get_np_dtype(element)
        _, touched = check_access(log, "load", ptrs.data, mask.data)
        fill = 0 if other is None else other.data
        data = np.array(np.broadcast_to(fill, ptrs.data.shape), dtype=dtype)
        flat = data.reshape(-1)
        for touch in touched:
            flat[touch.lane] = tensors[touch.tensor].read(touch.flat)
        return TensorHandle(data, element)

    def store(ptrs, value, mask, cache_policy):  # noqa: ANN001, ANN202
        _, touched = check_access(log, "store", ptrs.data, mask.data)
        values = np.broadcast_to(value.data, ptrs.data.shape).reshape(-1)
        for touch in touched:
            tensors[touch.tensor].write(touch.flat, int(values[touch.lane]))

    interpreter._implicit_cvt = as_pointer
    interpreter_builder.create_masked_load, interpreter_builder.create_masked_store = load, store
    try:
        yield log
    finally:
        interpreter._implicit_cvt = convert
        del interpreter_builder.create_masked_load
        del interpreter_builder.create_masked_store
