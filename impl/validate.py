"""Input checks for impl/: the cheap ones that need no device sync, and debug mode's full check.

The cheap checks read only shapes, dtypes, python ints and the CPU mirrors of the lengths, with a few
C-level passes (``min``, ``map``) per call and no Python loop over rows. What they cannot see (page
contents, lengths that live on the device) the kernels turn into null-page sink writes; debug mode
(``KVTABLE_DEBUG=1`` or ``debug=True``) runs impl's own vectorized table validator and the strong write
checker on the tables' device and reads every verdict back in one transfer (a breach's entry in a second).
"""

from __future__ import annotations

import numbers
import operator
import os
from collections.abc import Iterable, Mapping, Sequence
from itertools import compress, repeat
from typing import Any, TypeGuard

import torch

from kvtable.contract import INT32_MAX, MODES, Batch, GroupSpec
from kvtable.errors import ContractViolation

__all__ = [
    "DEBUG_ENV", "check_actual_bs", "check_batch", "check_batch_form", "check_group_page_sizes", "check_lengths",
    "check_n", "check_page_size", "check_same_device", "check_seq_tensor", "check_table",
    "check_tail_pad", "check_width", "cpu_lengths", "debug_enabled", "extend_batch", "host_lengths", "one_device",
    "page_ratio",
]

DEBUG_ENV = "KVTABLE_DEBUG"
_MAX_PAGE_SIZE = (INT32_MAX + 1) // 2
"""W5: the largest page size whose page 1 still has int32 slots (``(1 + 1) * ps <= 2^31``)."""


DEBUG_VALUES = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False,
                "off": False, "": False}
"""What ``KVTABLE_DEBUG`` may say (any case); anything else is refused, never read as off."""


def debug_enabled(debug: bool | None = None) -> bool:
    """An explicit ``debug`` (True, False) wins; ``None`` defers to the ``KVTABLE_DEBUG`` environment variable
    (1/true/yes/on, or 0/false/no/off/unset). Anything else is a TypeError or ValueError naming it."""
    if debug is not None:
        if not isinstance(debug, bool):
            raise TypeError(f"debug must be True, False or None, got {debug!r}")
        return debug
    value = os.environ.get(DEBUG_ENV, "")
    if value.strip().lower() not in DEBUG_VALUES:
        raise ValueError(f"{DEBUG_ENV}={value!r}: use 1 (debug checks on) or 0 (off)")
    return DEBUG_VALUES[value.strip().lower()]


def _is_int(value: object) -> TypeGuard[int]:
    """A python or numpy integer, never a bool (an exact int is answered without the slower ABC check)."""
    return type(value) is int or (isinstance(value, numbers.Integral) and not isinstance(value, bool))


def check_table(table: object, bs: int, *, group: str | None = None) -> None:
    """T1 table-shape: an int32 2-D tensor with at least ``bs`` rows and (for a non-empty batch) a column.

    A table on the meta device passes: like any torch op, the result is then a meta tensor of the right
    shape (shape inference); only debug mode, which reads page ids, refuses it.
    """
    if not isinstance(table, torch.Tensor):
        raise ContractViolation("T1", f"a table is an int32 torch tensor, got {type(table).__name__}",
                                group=group)
    if table.dtype != torch.int32:
        raise ContractViolation("T1", f"tables are int32, got dtype {table.dtype}", group=group)
    if table.dim() != 2:
        raise ContractViolation("T1", f"a table is 2-D [bs, max_pages], got shape {tuple(table.shape)}",
                                group=group)
    if table.shape[0] < bs:
        raise ContractViolation("T1", f"table has {table.shape[0]} rows for a batch of {bs}", group=group)
    if bs and table.shape[1] < 1:
        raise ContractViolation("T1", "table has no columns; col 0 must exist for dummy rows", group=group)


def one_device(tables: Mapping[str, torch.Tensor]) -> torch.device:
    """T1: the tables of one batch live on one device (they are stacked for the fused kernels)."""
    devices = {gid: t.device for gid, t in tables.items()}
    if len(set(devices.values())) > 1:
        raise ContractViolation("T1", f"tables of one batch must share a device, got {devices}")
    return next(iter(devices.values()))


def check_page_size(page_size: object, *, group: str | None = None) -> int:
    """E1 page-ratio (a positive int; a numpy integer is one) and W5 int32-locs (page 1's last slot,
    ``2 * ps - 1``, is an int32); returns it as a python int."""
    if not _is_int(page_size) or page_size < 1:
        raise ContractViolation("E1", f"page size must be a positive int, got {page_size!r}", group=group)
    if page_size > _MAX_PAGE_SIZE:
        raise ContractViolation("W5", f"page size {page_size} leaves no real page int32 slots (page 1 ends at "
                                f"{2 * page_size - 1} > 2^31 - 1)", group=group)
    return int(page_size)


def page_ratio(block_granularity: object, kernel_page_size: object, *, group: str | None = None) -> int:
    """E1 page-ratio: r = B // K, defined only when B is a positive multiple of K."""
    if not (_is_int(block_granularity) and _is_int(kernel_page_size)) or kernel_page_size < 1 \
            or block_granularity < 1 or block_granularity % kernel_page_size:
        raise ContractViolation("E1", f"block granularity {block_granularity!r} is not a positive multiple of "
                                f"kernel page size {kernel_page_size!r}", group=group)
    return int(block_granularity) // int(kernel_page_size)


def check_n(n: object, clause: str) -> None:
    """W2 / W4: tokens per request is an int >= 1."""
    if not _is_int(n) or n < 1:
        raise ContractViolation(clause, f"tokens per request must be an int >= 1, got {n!r}")


def check_actual_bs(actual_bs: object, bs: int | None) -> None:
    """T9 lengths: ``actual_bs`` (None: every row is live) is an int in ``[0, bs]`` (``bs`` None: no upper
    bound, as for a graph replay, which caps it)."""
    if actual_bs is not None and (not _is_int(actual_bs) or actual_bs < 0 or (bs is not None and actual_bs > bs)):
        raise ContractViolation("T9", f"actual_bs {actual_bs!r} outside [0, {'inf' if bs is None else bs}]")


def check_tail_pad(tail_pad: object) -> None:
    """T3 tail-pad: the pad is -1 or 0."""
    if not _is_int(tail_pad) or tail_pad not in (-1, 0):
        raise ContractViolation("T3", f"the tail pad is -1 or 0, got {tail_pad!r}")


def check_seq_tensor(seq_lens: object, clause: str = "T9") -> None:
    """T9 lengths: one integer length per row, as a 1-D tensor."""
    if not isinstance(seq_lens, torch.Tensor) or seq_lens.dim() != 1:
        what = tuple(seq_lens.shape) if isinstance(seq_lens, torch.Tensor) else type(seq_lens).__name__
        raise ContractViolation(clause, f"lengths are a 1-D integer tensor, got {what}")
    dtype = seq_lens.dtype  # read once: each read of a tensor attribute is a dispatch under a torch function mode
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise ContractViolation(clause, f"lengths are integers, got dtype {dtype}")


def check_same_device(seq_lens: torch.Tensor, device: torch.device, clause: str = "T9") -> None:
    """T9 lengths: lengths on the meta device hold no values, so they serve only tables on the meta device."""
    if seq_lens.is_meta and device.type != "meta":
        raise ContractViolation(clause, f"lengths on the meta device hold no values for tables on {device}")


def cpu_lengths(seq_lens: torch.Tensor) -> list[int] | None:
    """The lengths as python ints when reading them costs no sync (a CPU tensor), else None."""
    return seq_lens.tolist() if seq_lens.device.type == "cpu" else None


def host_lengths(values: object, what: str = "lengths", clause: str = "T9") -> tuple[int, ...]:
    """T9 lengths: CPU mirrors as a tuple of Python ints (any iterable of ints, read once; no floats): numpy
    ints become Python's, so sums of int32 mirrors (an extend's ``prefix + extend``) never wrap."""
    if isinstance(values, torch.Tensor):
        check_seq_tensor(values, clause)
        values = values.tolist()
    if not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
        raise ContractViolation(clause, f"{what} are a sequence of ints, got {type(values).__name__}")
    items = tuple(values)
    _check_ints(items, what, clause)
    return tuple(map(int, items))


def _check_ints(items: Sequence[Any], what: str, clause: str = "T9") -> None:
    """T9: every length is an integer (python or numpy). One C-level ``sum`` proves a tuple of python ints
    (a bool, an int subclass, passes there as the int it is); anything else is looked at type by type."""
    try:
        if type(sum(items)) is int:
            return
    except TypeError:
        pass
    kinds = set(map(type, items))
    bad = next((k for k in kinds if issubclass(k, bool) or not issubclass(k, numbers.Integral)), None)
    if bad is not None:
        row = list(map(type, items)).index(bad)
        raise ContractViolation(clause, f"{what} are ints, got {items[row]!r} ({bad.__name__})", row=row)


def check_batch_form(batch: object) -> None:
    """A batch impl can read: a known mode, prefix lengths for extend, n = 1 for decode, int lengths and
    (T9) ``actual_bs`` within ``[0, bs]``."""
    if not isinstance(batch, Batch):
        raise ContractViolation("T9", f"a batch is a kvtable Batch, got {type(batch).__name__}")
    mode = batch.mode
    if mode in ("verify", "reanchor"):
        check_n(batch.n, "W2" if mode == "verify" else "W4")
    elif mode == "decode":
        if batch.n != 1:
            raise ValueError(f"a decode step writes one token per request, not n={batch.n} (that is verify)")
    elif mode != "extend":
        raise ValueError(f"mode {mode!r} is none of {MODES}")
    elif batch.prefix_lens is None:
        raise ValueError("extend rows write [prefix, seq_len): prefix_lens is missing")
    for values, what in ((batch.seq_lens, "seq_lens"), (batch.prefix_lens or (), "prefix_lens")):
        if not isinstance(values, tuple):
            raise ContractViolation("T9", f"{what} are a sequence of ints, got {type(values).__name__}")
        _check_ints(values, what)
    check_actual_bs(batch.actual_bs, batch.bs)


def check_lengths(batch: Batch) -> None:
    """T9 lengths (seq_len >= 1; extend: 0 <= prefix <= seq_len) and W2 (a real verify row has seq_len >= N),
    the first row breaching either reported (T9 first within a row)."""
    seq = batch.seq_lens
    if batch.mode == "extend":
        prefix = batch.prefix_lens or ()
        if len(prefix) != len(seq):
            raise ContractViolation("T9", f"{len(prefix)} prefix lengths for {len(seq)} rows")
        if seq and (min(prefix) < 0 or min(map(operator.sub, seq, prefix)) < 0):
            broken = map(operator.or_, map(operator.lt, prefix, repeat(0)), map(operator.lt, seq, prefix))
            row = list(broken).index(True)
            raise ContractViolation("T9", f"prefix {prefix[row]} and extend {seq[row] - prefix[row]} must be >= 0",
                                    row=row)
        return
    t9 = _first_below(seq, 1)
    w2 = _first_below(seq[: batch.live_rows], batch.n) if batch.mode == "verify" else None
    if t9 is not None and (w2 is None or t9 <= w2):
        raise ContractViolation("T9", f"seq_len must be >= 1, got {seq[t9]}", row=t9)
    if w2 is not None:
        raise ContractViolation("W2", f"real row has seq_len {seq[w2]} < N={batch.n}", row=w2)


def _first_below(values: Sequence[int], bound: int) -> int | None:
    """The first index whose value is below ``bound``, or None (C-level passes only)."""
    if not values or min(values) >= bound:
        return None
    return list(map(operator.lt, values, repeat(bound))).index(True)


def extend_batch(prefix_lens: object, extend_lens: object) -> Batch:
    """T9 lengths: an extend batch from CPU mirrors (any iterables of ints, read once) of equal length."""
    prefix, extend = host_lengths(prefix_lens, "prefix_lens"), host_lengths(extend_lens, "extend_lens")
    if len(prefix) != len(extend):
        raise ContractViolation("T9", f"{len(prefix)} prefix lengths but {len(extend)} extend lengths")
    return Batch(tuple(map(operator.add, prefix, extend)), mode="extend", prefix_lens=prefix)


def check_batch(batch: Batch) -> None:
    """The batch's form, then T9 and W2 on its CPU mirrors."""
    check_batch_form(batch)
    check_lengths(batch)


def check_width(batch: Batch, widths: Mapping[str, int], page_sizes: Mapping[str, int]) -> None:
    """T8 table-width: every live row that writes has a column for its last position, in every group."""
    seq = batch.seq_lens[: batch.live_rows]
    longest = max(seq, default=0)
    if longest <= min((widths[gid] * page_sizes[gid] for gid in widths), default=longest):
        return  # even the longest row fits the narrowest group
    if batch.mode == "extend":  # a row that writes nothing needs no column
        longest = max(compress(seq, map(operator.gt, seq, batch.prefix_lens or ())), default=0)
    for gid in sorted(widths):
        width, ps = widths[gid], page_sizes[gid]
        if longest <= width * ps:
            continue
        over = map(operator.gt, seq, repeat(width * ps))
        if batch.mode == "extend":
            over = map(operator.and_, over, map(operator.gt, seq, batch.prefix_lens or ()))
        row = list(over).index(True)
        raise ContractViolation("T8", f"seq_len {seq[row]} needs {-(-seq[row] // ps)} columns of {ps} tokens, "
                                f"table has {width}", group=gid, row=row, col=(seq[row] - 1) // ps)


def check_group_page_sizes(specs: Mapping[str, GroupSpec], group_ids: Iterable[str]) -> dict[str, int]:
    """W5 for each attention group's block granularity (E1 is the spec's own check); the sizes by group."""
    return {gid: check_page_size(specs[gid].block_granularity, group=gid) for gid in group_ids}
