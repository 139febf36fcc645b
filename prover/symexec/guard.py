"""A bounds-checked Triton interpreter: tensors inside one guarded buffer, every access checked before it happens.

The Triton interpreter reads and writes raw host addresses and checks nothing
(``create_masked_load``/``create_masked_store`` hand them to C++). ``guarded()`` wraps those two
builder methods: each unmasked lane's address is looked up among the registered tensors; a lane that
hits none is recorded as a ``GuardHit`` and masked off before the access, so it never touches host
memory (a load gets 0 there). The tensors of a replay are carved out of one buffer with poison
margins around each, checked after the run, so a write the hook could not see (an unhooked path)
still shows up instead of corrupting a neighbour. ``kvtable.conformance.sanitize`` runs every launch of a
``--sanitize`` run under ``guarded()``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import FrameType

import numpy as np
import torch

from kvtable.internals import private

POISON = -0x5A5A5A5B
"""What a margin holds (as int64 words): recognisable, and no page id or location."""
MARGIN_BYTES = 4096


@dataclass(frozen=True)
class Region:
    """A tensor's bytes: ``[start, start + nbytes)``, its element size, sizes and strides."""

    name: str
    start: int
    nbytes: int
    itemsize: int
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    def element(self, address: int) -> int | None:
        """The flat element offset of ``address`` if it lies in this region's bytes."""
        if self.start <= address < self.start + self.nbytes:
            return (address - self.start) // self.itemsize
        return None

    def index(self, flat: int) -> tuple[int, ...] | None:
        """The logical index of flat element ``flat`` in a row-major layout (None if strides are not)."""
        out = []
        for stride in self.strides:
            if stride <= 0:
                return None
            out.append(flat // stride)
            flat %= stride
        return tuple(out) if flat == 0 else None


@dataclass(frozen=True)
class GuardHit:
    """An access outside every registered tensor: blocked before it happened."""

    kind: str
    program: tuple[int, int, int]
    number: int
    """The access's place in its program's order (the symbolic trace numbers accesses the same way)."""
    lane: int
    address: int
    nearest: str
    """The tensor whose bytes are closest, and how far outside them (in elements)."""
    offset: int
    """The address as an element offset from that tensor's first byte (negative before it)."""
    lanes: int
    """How many lanes the access has (1 for a scalar load or store, which every lane shares)."""
    site: str = ""
    """``FILE:LINE`` of the kernel's ``tl.load``/``tl.store`` call (the symbolic access's ``site``)."""


@dataclass(frozen=True)
class Touch:
    """An access inside a registered tensor: which tensor, which flat element, from which program and lane."""

    kind: str
    program: tuple[int, int, int]
    number: int
    lane: int
    tensor: str
    flat: int
    lanes: int
    site: str = ""


@dataclass
class GuardLog:
    """Everything the guarded interpreter saw."""

    regions: list[Region] = field(default_factory=list)
    hits: list[GuardHit] = field(default_factory=list)
    touches: list[Touch] = field(default_factory=list)
    _program: tuple[int, int, int] | None = None
    _number: int = 0

    def next_access(self, program: tuple[int, int, int]) -> int:
        """The number of the access about to happen in ``program`` (0 for its first)."""
        if program != self._program:
            self._program, self._number = program, 0
        self._number += 1
        return self._number - 1

    def locate(self, address: int) -> tuple[Region | None, int]:
        for region in self.regions:
            flat = region.element(address)
            if flat is not None:
                return region, flat
        return None, 0

    def nearest(self, address: int) -> tuple[str, int]:
        """The closest tensor and how far outside it ``address`` lies, and its element offset from that tensor."""
        def distance(r: Region) -> int:
            return r.start - address if address < r.start else address - (r.start + r.nbytes) + 1
        if not self.regions:
            return "no tensor registered", address
        region = min(self.regions, key=distance)
        offset = (address - region.start) // region.itemsize
        if address < region.start:
            return f"{-offset} element(s) before {region.name}", offset
        return f"{offset - region.nbytes // region.itemsize + 1} element(s) past the end of {region.name}", offset


def region_of(name: str, tensor: torch.Tensor) -> Region:
    """The bytes a (possibly strided) tensor may legitimately touch."""
    if tensor.numel() == 0:
        extent = 0
    else:
        extent = 1 + sum((s - 1) * st for s, st in zip(tensor.shape, tensor.stride(), strict=True))
    return Region(name, tensor.data_ptr(), extent * tensor.element_size(), tensor.element_size(),
                  tuple(tensor.shape), tuple(tensor.stride()))


_TRITON = os.sep + "triton" + os.sep


def call_site() -> str:
    """``FILE:LINE`` of the innermost frame outside triton and this package: the kernel line being run."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if _TRITON not in name and not name.startswith(os.path.dirname(__file__)):
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return ""


def check_access(log: GuardLog, kind: str, ptrs: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, list[Touch]]:
    """Record one load or store of the running program: the mask with every lane outside all tensors turned
    off (a ``GuardHit`` each), and a ``Touch`` for each lane that lands in a tensor."""
    interpreter_builder = private("interpreter_builder")
    program = tuple(interpreter_builder.grid_idx or (0, 0, 0))
    number, site = log.next_access(program), call_site()
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), ptrs.shape).copy()
    flat_ptrs, flat_mask = ptrs.reshape(-1), mask.reshape(-1)
    touched = []
    for lane in np.flatnonzero(flat_mask):
        address = int(flat_ptrs[lane])
        region, flat = log.locate(address)
        if region is None:
            log.hits.append(GuardHit(kind, program, number, int(lane), address, *log.nearest(address), ptrs.size,
                                     site))
            flat_mask[lane] = False
        else:
            touched.append(Touch(kind, program, number, int(lane), region.name, flat, ptrs.size, site))
    log.touches += touched
    return mask, touched


@contextmanager
def guarded(tensors: dict[str, torch.Tensor]) -> Iterator[GuardLog]:
    """Run Triton interpreter launches inside with every load and store checked against ``tensors``."""
    TensorHandle, interpreter_builder = private("TensorHandle"), private("interpreter_builder")

    log = GuardLog([region_of(name, t) for name, t in tensors.items()])
    load, store = interpreter_builder.create_masked_load, interpreter_builder.create_masked_store

    def checked_load(ptrs, mask, other, cache_policy, is_volatile):  # noqa: ANN001, ANN202 (Triton's hook)
        allowed, _ = check_access(log, "load", ptrs.data, mask.data)
        return load(ptrs, TensorHandle(allowed, mask.dtype), other, cache_policy, is_volatile)

    def checked_store(ptrs, value, mask, cache_policy):  # noqa: ANN001, ANN202
        allowed, _ = check_access(log, "store", ptrs.data, mask.data)
        return store(ptrs, value, TensorHandle(allowed, mask.dtype), cache_policy)

    interpreter_builder.create_masked_load = checked_load
    interpreter_builder.create_masked_store = checked_store
    try:
        yield log
    finally:
        del interpreter_builder.create_masked_load
        del interpreter_builder.create_masked_store


class GuardBuffer:
    """One int64 buffer; each tensor carved from it between poison margins."""

    def __init__(self, specs: Sequence[tuple[str, torch.dtype, tuple[int, ...]]]) -> None:
        margin = MARGIN_BYTES // 8
        words = [margin]
        for _, dtype, shape in specs:
            nbytes = int(np.prod(shape, dtype=np.int64)) * torch.empty(0, dtype=dtype).element_size()
            words.append(-(-nbytes // 8) + margin)
        self.buffer = torch.full((sum(words),), POISON, dtype=torch.int64)
        self.tensors: dict[str, torch.Tensor] = {}
        self._spans: list[tuple[int, int]] = []
        offset = margin
        for (name, dtype, shape), size in zip(specs, words[1:], strict=True):
            used = size - margin
            view = self.buffer[offset: offset + used].view(dtype)
            count = int(np.prod(shape, dtype=np.int64))
            self.tensors[name] = view[:count].view(shape) if count else view[:0].view(shape)
            self.tensors[name].zero_()
            self._spans.append((offset + used, offset + size))
            offset += size

    def margins_intact(self) -> bool:
        """No margin word changed (a stray write the access hook did not block)."""
        first = self.buffer[: MARGIN_BYTES // 8]
        rest = [self.buffer[a:b] for a, b in self._spans]
        return all(bool((m == POISON).all()) for m in (first, *rest))
