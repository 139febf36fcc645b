"""W1-W4: write locations from torch tables, every group of a batch in one fused kernel call.

Each function validates what it can see without a device sync (impl/validate.py), stacks the tables
into one ``[G, R, Wmax]`` tensor and hands it to the ``Kernels`` (torch by default, Triton when given);
kernels with the ``GroupedLocs`` / ``GroupedExtendLocs`` fast paths get the tables unstacked.
Locations are int32; the arithmetic behind them is int64. In debug mode the result is checked
against the full contract and the strong write checker.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from kvtable.contract import DEFAULT_TAIL_PAD, Batch, GroupSpec, Mode, Specs
from kvtable.impl import validate
from kvtable.impl.debug import debug_check, debug_check_device
from kvtable.impl.groups import check_group_ids, shed_state_groups, specs_by_id
from kvtable.impl.kernels import Kernels
from kvtable.impl.tokens import extend_tokens, host_ints, int32_mirror, int64_mirror, upload
from kvtable.impl.torch_kernels import INT32_END, TORCH_KERNELS

NUMPY_BOUNDS_FROM = 32
"""Rows from which the length bounds are taken by numpy (below it Python's ``min``/``max`` are cheaper)."""
LONE = "table"
"""The group name a lone table goes by in errors and debug checks."""


def stack_tables(tables: Sequence[torch.Tensor], rows: int, page_sizes: Sequence[int]
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The first ``rows`` rows of each table in one zero-padded int32 ``[G, rows, Wmax]`` stack, with the
    groups' widths and page sizes as int32 ``[G]`` device tensors (one upload for both)."""
    device = tables[0].device
    widths = [t.shape[1] for t in tables]
    if len(tables) == 1:
        stack = tables[0][:rows].contiguous().unsqueeze(0)
    else:
        stack = torch.zeros(len(tables), rows, max(widths), dtype=torch.int32, device=device)
        for i, table in enumerate(tables):
            stack[i, :, : widths[i]] = table[:rows]
    sizes = upload([*widths, *page_sizes], device)
    return stack, sizes[: len(tables)], sizes[len(tables):]


def fixed_group_locs(tables: Mapping[str, torch.Tensor], page_sizes: Mapping[str, int],
                     seq_lens: torch.Tensor, n: int, *, kernels: Kernels = TORCH_KERNELS,
                     longest: int | None = None, shortest: int | None = None) -> dict[str, torch.Tensor]:
    """W1/W2/W4 for already-validated tables: ``bs*n`` clamped positions per group, one kernel call.

    Kernels with the ``GroupedLocs`` fast path get the tables as they are (validation already gave
    them what it needs); otherwise the tables are stacked. ``seq_lens`` may live on the device;
    nothing here reads it back. Kernels that declare ``host_bounds`` (the torch ones) get int64 lengths as they
    are and ``longest`` and ``shortest``, bounds on the lengths read off their CPU mirrors (they skip the column
    sink when every table holds the longest, the clamp at 0 when the shortest is at least n); other kernels get
    int32 lengths.
    """
    bs = seq_lens.shape[0]
    gids = sorted(tables)
    if not gids:
        return {}
    ordered, block_sizes = [tables[g] for g in gids], [page_sizes[g] for g in gids]
    grouped = getattr(kernels, "grouped_locs", None)
    if grouped is not None:
        device = ordered[0].device
        out = torch.empty(len(gids), bs * n, dtype=torch.int32, device=device)
        if getattr(kernels, "host_bounds", False):  # int32 or int64 lengths
            seq = seq_lens if seq_lens.device == device else upload(seq_lens, device, seq_lens.dtype)
            grouped(ordered, block_sizes, seq, out, bs, n, longest=longest, shortest=shortest)
        else:
            grouped(ordered, block_sizes, upload(seq_lens, device), out, bs, n)
        return dict(zip(gids, out.unbind(), strict=True))
    stack, widths, sizes = stack_tables(ordered, bs, block_sizes)
    out = torch.empty(len(gids), bs * n, dtype=torch.int32, device=stack.device)
    kernels.stacked_locs(stack, widths, sizes, upload(seq_lens, stack.device), out, bs, n)
    return dict(zip(gids, out, strict=True))


def extend_group_locs(tables: Mapping[str, torch.Tensor], page_sizes: Mapping[str, int],
                      prefix_lens: Sequence[int] | np.ndarray, extend_lens: Sequence[int] | np.ndarray, *,
                      kernels: Kernels = TORCH_KERNELS) -> dict[str, torch.Tensor]:
    """W3 for already-validated tables: positions ``[prefix, prefix + extend)`` per request, one kernel call.

    Kernels with the ``GroupedExtendLocs`` fast path get the tables as they are when every write is
    inside every table (read off the host mirrors); otherwise the tables are stacked. Kernels that declare
    ``host_bounds`` get the runs as int64 numpy arrays, others as python ints (as the protocol says).
    """
    gids = sorted(tables)
    if not gids:
        return {}
    ordered, block_sizes = [tables[g] for g in gids], [page_sizes[g] for g in gids]
    grouped = getattr(kernels, "grouped_extend_locs", None)
    if grouped is not None:
        prefix, extend = int64_mirror(prefix_lens), int64_mirror(extend_lens)
        total = None if prefix is None or extend is None else _inside_tables(ordered, block_sizes, prefix, extend)
        if total is not None and prefix is not None and extend is not None:
            out = torch.empty(len(gids), total, dtype=torch.int32, device=ordered[0].device)
            if getattr(kernels, "host_bounds", False):
                grouped(ordered, block_sizes, prefix, extend, out)
            else:
                grouped(ordered, block_sizes, host_ints(prefix), host_ints(extend), out)
            return dict(zip(gids, out, strict=True))
    prefix_lens, extend_lens = host_ints(prefix_lens), host_ints(extend_lens)
    stack, widths, sizes = stack_tables(ordered, len(extend_lens), block_sizes)
    rows, positions = extend_tokens(prefix_lens, extend_lens, stack.device)
    out = torch.empty(len(gids), rows.shape[0], dtype=torch.int32, device=stack.device)
    kernels.stacked_extend_locs(stack, widths, sizes, rows, positions, out)
    return dict(zip(gids, out, strict=True))


def _inside_tables(tables: Sequence[torch.Tensor], page_sizes: Sequence[int], prefix: np.ndarray,
                   extend: np.ndarray) -> int | None:
    """``GroupedExtendLocs``' precondition, on the host: int32 2-D tables on one device, a row for every
    request, and every written position in ``[0, width * ps)`` of every table (no lengths below 0; the
    bound is taken over every row, writing or not). The tokens written when it holds, else None."""
    if prefix.shape != extend.shape or (extend.size and np.minimum(prefix, extend).min() < 0):
        return None
    reach = int((prefix + extend).max()) if extend.size else 0
    total = int(extend.sum())
    if total >= INT32_END:
        return None
    inside = all(isinstance(ps, int) and ps >= 1 and t.dtype == torch.int32 and t.dim() == 2
                 and t.device == tables[0].device and t.shape[0] >= len(extend) and reach <= t.shape[1] * ps
                 for t, ps in zip(tables, page_sizes, strict=True))
    return total if inside else None


def group_locs(specs: Specs, tables: Mapping[str, torch.Tensor], batch: Batch, *,
               kernels: Kernels = TORCH_KERNELS, debug: bool | None = None,
               tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
    """W1-W4 for every non-state group of ``batch`` at its own block granularity (T6: state groups shed).

    ``tail_pad`` is the pad value the debug-mode contract check accepts; ``kernels=None`` means the torch ones.
    """
    kernels, debug = kernels or TORCH_KERNELS, validate.debug_enabled(debug)
    validate.check_tail_pad(tail_pad)
    validate.check_batch_form(batch)
    fixed = batch.mode != "extend"
    mirror = int32_mirror(batch.seq_lens) if fixed else None
    runs = None if fixed else _extend_runs(batch)
    if fixed:
        shortest, longest = _bounds(batch.seq_lens, mirror)
        # every row at least 1 (W2: N) long passes T9 and W2 at once; anything else is checked row by row, before
        # the tables in debug mode too (the reference's order: T9/W2 ahead of T1)
        checked = shortest >= (batch.n if batch.mode == "verify" else 1)
    else:
        checked, longest = runs is not None, max(batch.seq_lens, default=0) if runs is None else runs[2]
    if not checked:
        validate.check_lengths(batch)
    by_id, live = _live_tables(specs, tables, batch.bs)
    sizes = validate.check_group_page_sizes(by_id, live)
    if not debug:  # debug mode checks T8 on the device, in the contract's order
        widths = {gid: t.shape[1] for gid, t in live.items()}
        if longest > min((widths[gid] * sizes[gid] for gid in widths), default=longest):
            validate.check_width(batch, widths, sizes)  # unless every row, live or not, fits every group
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        prefix, extend = (batch.prefix_lens, list(map(operator.sub, batch.seq_lens, batch.prefix_lens))) \
            if runs is None else runs[:2]
        locs = extend_group_locs(live, sizes, prefix, extend, kernels=kernels)
    else:
        seq = upload(batch.seq_lens, "cpu", torch.int64) if mirror is None else torch.from_numpy(mirror)
        locs = fixed_group_locs(live, sizes, seq, batch.tokens_per_row, kernels=kernels, longest=longest,
                                shortest=shortest)
    if debug:
        debug_check(by_id, live, batch, locs, tail_pad=tail_pad)
    return locs


def group_seq_locs(specs: Specs, tables: Mapping[str, torch.Tensor], seq_lens: torch.Tensor, n: int = 1, *,
                   mode: Mode = "decode", actual_bs: int | None = None, kernels: Kernels = TORCH_KERNELS,
                   debug: bool | None = None, tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, torch.Tensor]:
    """W1/W2/W4 of every non-state group from a lengths tensor, which may live on the device.

    CPU lengths go through ``group_locs`` and all its checks; device lengths get only the shape checks
    (the kernels sink what those cannot see), and in debug mode the device-side validator, which checks
    them along with the tables in the same readback.
    """
    if mode == "extend":
        raise ValueError("mode 'extend': extend lengths are CPU mirrors; use group_locs with Batch.extend")
    if mode not in ("decode", "verify", "reanchor"):
        raise ValueError(f"mode {mode!r} is none of 'decode', 'verify', 'reanchor' (group_seq_locs' modes)")
    validate.check_n(n, "W4" if mode == "reanchor" else "W2")
    validate.check_seq_tensor(seq_lens)
    bs = seq_lens.shape[0]
    validate.check_actual_bs(actual_bs, bs)
    lengths = validate.cpu_lengths(seq_lens)
    if lengths is not None:
        batch = Batch(tuple(lengths), mode=mode, n=n, actual_bs=actual_bs)
        return group_locs(specs, tables, batch, kernels=kernels, debug=debug, tail_pad=tail_pad)
    if mode == "decode" and n != 1:
        raise ValueError(f"decode writes one token per request, got n={n}; use mode='verify'")
    validate.check_tail_pad(tail_pad)
    by_id, live = _live_tables(specs, tables, bs)
    if live:
        validate.check_same_device(seq_lens, validate.one_device(live))
    sizes = validate.check_group_page_sizes(by_id, live)
    locs = fixed_group_locs(live, sizes, seq_lens, n, kernels=kernels or TORCH_KERNELS)
    if validate.debug_enabled(debug):
        live_rows = bs if actual_bs is None else actual_bs
        debug_check_device(by_id, live, seq_lens, mode, n, live_rows, locs, tail_pad=tail_pad)
    return locs


def decode_locs(table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, *, actual_bs: int | None = None,
                kernels: Kernels = TORCH_KERNELS, debug: bool | None = None) -> torch.Tensor:
    """W1 decode-loc: int32 ``[bs]``, the location of position ``seq_len - 1`` of each request (rows
    ``>= actual_bs`` are padding)."""
    return group_seq_locs([lone_spec(page_size)], {LONE: table}, seq_lens, actual_bs=actual_bs, kernels=kernels,
                          debug=debug)[LONE]


def verify_locs(table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, n: int, *,
                actual_bs: int | None = None, kernels: Kernels = TORCH_KERNELS,
                debug: bool | None = None) -> torch.Tensor:
    """W2 verify-loc: int32 ``[bs*n]`` token-major, positions ``seq_len-n .. seq_len-1`` clamped at 0.

    Rows ``>= actual_bs`` are padding; a real row needs ``seq_len >= n`` (checked when the lengths
    are on the CPU, or in debug mode).
    """
    return group_seq_locs([lone_spec(page_size)], {LONE: table}, seq_lens, n, mode="verify",
                          actual_bs=actual_bs, kernels=kernels, debug=debug)[LONE]


def reanchor_locs(table: torch.Tensor, frontier: torch.Tensor, page_size: int, n: int, *,
                  kernels: Kernels = TORCH_KERNELS, debug: bool | None = None) -> torch.Tensor:
    """W4 reanchor-loc: int32 ``[bs*n]``, positions ``frontier-n .. frontier-1`` clamped at 0 for all rows."""
    return group_seq_locs([lone_spec(page_size)], {LONE: table}, frontier, n, mode="reanchor",
                          kernels=kernels, debug=debug)[LONE]


def extend_locs(table: torch.Tensor, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                page_size: int, *, kernels: Kernels = TORCH_KERNELS, debug: bool | None = None
                ) -> torch.Tensor:
    """W3 extend-loc: int32 ``[sum(extend_lens)]`` in request order; the lengths are CPU mirrors."""
    spec = lone_spec(page_size)
    return group_locs([spec], {LONE: table}, validate.extend_batch(prefix_lens, extend_lens), kernels=kernels,
                      debug=debug)[LONE]


def lone_spec(page_size: int) -> GroupSpec:
    """The spec a lone table goes by: its family is unknown, so a window-1 sliding group asks only for its writes.

    (Window 1 makes the debug check demand real pages at the written columns and nothing before them.)
    """
    return GroupSpec(LONE, "sliding", validate.check_page_size(page_size, group=LONE), window=1)


def _bounds(values: Sequence[int], mirror: np.ndarray | None) -> tuple[int, int]:
    """The shortest and the longest length (1 and 0 for no rows): from the int32 mirror when the batch is
    large enough for numpy's reductions to beat two passes of Python's ``min`` and ``max``."""
    if mirror is not None and mirror.size >= NUMPY_BOUNDS_FROM:
        return int(mirror.min()), int(mirror.max())
    return min(values, default=1), max(values, default=0)


def _extend_runs(batch: Batch) -> tuple[np.ndarray, np.ndarray, int] | None:
    """An extend batch's prefix and extend lengths as int64 arrays and its longest row, when every length is an
    int64 and every row passes T9 (``0 <= prefix <= seq_len``, read off numpy's reductions); else None."""
    seq, prefix = int64_mirror(batch.seq_lens), int64_mirror(batch.prefix_lens or ())
    if seq is None or prefix is None or seq.shape != prefix.shape:
        return None
    extend = seq - prefix
    if seq.size and (prefix.min() < 0 or extend.min() < 0):
        return None
    return prefix, extend, int(seq.max()) if seq.size else 0


def _live_tables(specs: Specs, tables: Mapping[str, torch.Tensor], bs: int
                 ) -> tuple[dict[str, GroupSpec], Mapping[str, torch.Tensor]]:
    """T6 then T1: the specs by id and the non-state tables, each an int32 2-D tensor on one device.

    Tables for exactly the declared attention groups (the usual step) need no shedding: they are the live ones.
    """
    by_id, attention = _checked_specs(specs)
    if isinstance(tables, Mapping) and tables.keys() == attention:
        live: Mapping[str, torch.Tensor] = tables
    else:
        check_group_ids(by_id, tables)
        live = shed_state_groups(by_id, tables)
    for gid in sorted(live):
        validate.check_table(live[gid], bs, group=gid)
    if live:
        validate.one_device(live)
    return by_id, live


_checked: dict[tuple[int, ...] | None, tuple[object, dict[str, GroupSpec], frozenset[str]]] = {}
SPECS_CACHE_SIZE = 16
"""Checked spec sets remembered (an engine declares its groups once)."""


def _checked_specs(specs: Specs) -> tuple[dict[str, GroupSpec], frozenset[str]]:
    """``specs_by_id(specs)`` and the attention groups' ids, checked once per set of spec objects: a call with
    the same ``GroupSpec`` objects (frozen, so unchanged) under the same ids reuses the first call's verdict.
    Anything else is checked anew."""
    members = specs if type(specs) in (list, tuple) else [*specs, *specs.values()] if isinstance(specs, Mapping) \
        else None
    key = None if members is None else tuple(map(id, members))
    hit = _checked.get(key)
    if hit is not None:  # the same objects as a checked set (which held only specs and ids): the same verdict
        return hit[1], hit[2]
    if members is None or not all(type(spec) is GroupSpec or type(spec) is str for spec in members):
        by_id = specs_by_id(specs)
        return by_id, _attention(by_id)
    by_id = specs_by_id(specs)
    if len(_checked) >= SPECS_CACHE_SIZE:
        _checked.clear()
    _checked[key] = (list(members), by_id, _attention(by_id))  # the members stay alive: their ids name them
    return by_id, _attention(by_id)


def _attention(by_id: Mapping[str, GroupSpec]) -> frozenset[str]:
    return frozenset(gid for gid, spec in by_id.items() if not spec.is_state)
