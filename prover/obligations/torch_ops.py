"""The torch implementation's location formula, run symbolically, against the hand encoding the kernels match.

impl/torch_kernels.py's ``stacked_locs`` and ``stacked_extend_locs`` compute every location with
``_fixed_positions`` (W1/W2/W4's clamped positions) and ``_gather_locs`` (the table read, the sink, and
``_slots``' rewrite ``(max(page, 0) - col) * ps + pos`` of W0's ``max(page, 0) * ps + pos % ps``). These
obligations run those helpers themselves on prover/symexec/torch_symbolic.py's tensors of z3 terms, with every size,
table entry, length, row and position symbolic, and prove that each location they produce (kept to int32 as
``out`` keeps it) is prover/solver/encoding.py's lane on the same table, and that every index torch reads is inside
its dimension. The Triton kernels are proved to store the same lanes (``W0.kernel-*-is-the-encoding``), so the
formula obligations about those lanes hold for the torch code too. SPEC.md section 7.1 says what stays outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import z3

from kvtable.prover.obligations.base import Obligation
from kvtable.prover.solver import encoding as encoding
from kvtable.prover.solver.discharge import Query

if TYPE_CHECKING:
    from kvtable.prover.symexec.torch_symbolic import Reads, SymTensor

INT32_MAX = 2**31 - 1
TABLE = "torch_tables"


def _size(name: str, low: int) -> tuple[z3.BitVecRef, z3.BoolRef]:
    size = z3.BitVec(name, 64)
    return size, z3.And(size >= low, size <= INT32_MAX)


def _table_read(g: z3.BitVecRef) -> encoding.TableRead:
    """Group ``g``'s table as the encoding reads it: the same function the symbolic tables are read through."""
    tables = z3.Function(TABLE, *[z3.BitVecSort(64)] * 3, z3.BitVecSort(32))
    return lambda row, col: tables(g, row, col)


def _low32(term: z3.BitVecRef) -> z3.BitVecRef:
    return z3.Extract(31, 0, term)


def _stack(reads: Reads, sizes: dict[str, z3.BitVecRef]) -> tuple[SymTensor, SymTensor, SymTensor]:
    """The table stack ``[G, R, W]`` int32, widths ``[Gw]`` and page sizes ``[Gp]`` (int32)."""
    import torch

    from kvtable.prover.symexec.torch_symbolic import SymTensor

    def size(name: str) -> SymTensor:
        return SymTensor.scalar(sizes[name])
    return (SymTensor.leaf(TABLE, (size("G"), size("R"), size("W")), torch.int32, reads),
            SymTensor.leaf("torch_widths", (size("Gw"),), torch.int32, reads),
            SymTensor.leaf("torch_page_sizes", (size("Gp"),), torch.int32, reads))


def _group_facts(g: z3.BitVecRef, sizes: dict[str, z3.BitVecRef], ps: z3.BitVecRef,
                 width: z3.BitVecRef) -> list[z3.BoolRef]:
    """Group ``g`` of the stack; the layout facts the stacking guarantees: page size >= 1, width within W."""
    return [g >= 0, g < sizes["G"], sizes["Gw"] >= sizes["G"], sizes["Gp"] >= sizes["G"], ps >= 1, width >= 0,
            encoding.widen(width) <= sizes["W"]]


def stacked_locs_is_the_encoding() -> Query:
    """``_gather_locs`` of ``_fixed_positions``, rows ``arange(bs)`` (as ``stacked_locs`` calls them): element
    (g, b, t) is ``stacked_lane``'s out for row b, length seq_lens[b], token t."""
    import torch

    from kvtable.impl import torch_kernels
    from kvtable.prover.symexec.torch_symbolic import Reads, SymTensor

    tk: Any = torch_kernels  # run on SymTensors, which the kernels' torch annotations do not name

    sizes, facts = {}, []
    for name, low in (("G", 1), ("R", 0), ("W", 1), ("Gw", 0), ("Gp", 0), ("bs", 1), ("n", 1)):
        sizes[name], fact = _size(name, low)
        facts.append(fact)
    facts.append(sizes["R"] >= sizes["bs"])
    reads = Reads()
    tables, widths, page_sizes = _stack(reads, sizes)
    bs: Any = SymTensor.scalar(sizes["bs"])  # torch.arange takes it through __torch_function__
    n = SymTensor.scalar(sizes["n"])
    # int32 lengths of exactly bs rows; a longer tensor takes the same path (_fixed_positions slices and casts)
    seq_lens = SymTensor.leaf("torch_seq_lens", (bs,), torch.int32, reads)
    positions = tk._fixed_positions(seq_lens, bs, n)
    rows = torch.arange(bs, device=tables.device).view(bs, 1)
    locs = tk._gather_locs(tables, widths, page_sizes, rows, positions)
    g, b, t = z3.BitVecs("g b t", 64)
    stored = _low32(locs.at((g, b, t)))
    ps, width = page_sizes.at((g,)), widths.at((g,))
    facts += [*_group_facts(g, sizes, ps, width), b >= 0, b < sizes["bs"], t >= 0, t < sizes["n"]]
    lane = encoding.stacked_lane(_table_read(g), _low32(b), seq_lens.at((b,)), _low32(sizes["n"]), _low32(t), ps,
                                 width)
    inside = reads.inside()
    return Query(tuple(facts), z3.And(inside, stored == lane.out),
                 (("g", g), ("b", b), ("t", t), ("stored", stored), ("encoding", lane.out), ("reads inside", inside)))


def extend_locs_is_the_encoding() -> Query:
    """``_gather_locs`` on ``rows`` and int64 ``positions`` (as ``stacked_extend_locs`` calls it): element (g, i)
    is ``lane_at``'s out for row rows[i] at position positions[i], for the rows and positions the host
    validates (a row of the table, a position >= 0: T9)."""
    import torch

    from kvtable.impl import torch_kernels
    from kvtable.prover.symexec.torch_symbolic import Reads, SymTensor

    tk: Any = torch_kernels  # run on SymTensors, which the kernels' torch annotations do not name

    sizes, facts = {}, []
    for name, low in (("G", 1), ("R", 0), ("W", 1), ("Gw", 0), ("Gp", 0), ("T", 1)):
        sizes[name], fact = _size(name, low)
        facts.append(fact)
    reads = Reads()
    tables, widths, page_sizes = _stack(reads, sizes)
    tokens = (SymTensor.scalar(sizes["T"]),)
    rows = SymTensor.leaf("torch_rows", tokens, torch.int64, reads)
    positions = SymTensor.leaf("torch_positions", tokens, torch.int64, reads)
    locs = tk._gather_locs(tables, widths, page_sizes, rows, positions.to(torch.int64))
    g, i = z3.BitVecs("g i", 64)
    stored = _low32(locs.at((g, i)))
    ps, width = page_sizes.at((g,)), widths.at((g,))
    row, pos = rows.at((i,)), positions.at((i,))
    facts += [*_group_facts(g, sizes, ps, width), i >= 0, i < sizes["T"], row >= 0, row < sizes["R"], pos >= 0]
    lane = encoding.lane_at(_table_read(g), _low32(row), pos, ps, width)
    inside = reads.inside()
    return Query(tuple(facts), z3.And(inside, stored == lane.out),
                 (("g", g), ("i", i), ("stored", stored), ("encoding", lane.out), ("reads inside", inside)))


@dataclass(frozen=True)
class TorchObligation(Obligation):
    """An obligation that runs impl/torch_kernels.py (``preload`` imports torch once, before the forks)."""


OBLIGATIONS: tuple[Obligation, ...] = (
    TorchObligation("W0.torch-stacked-locs-is-the-encoding", "W0",
                    "torch stacked_locs' formula (_fixed_positions, _gather_locs, _slots, run on z3 terms): every"
                    " location is prover/solver/encoding.py's stacked_lane(...).out on the same table, every index it"
                    " reads inside its dimension", stacked_locs_is_the_encoding),
    TorchObligation("W0.torch-extend-locs-is-the-encoding", "W0",
                    "torch stacked_extend_locs' formula (_gather_locs, _slots on z3 terms): for rows in the table and"
                    " positions >= 0, every location is lane_at(...).out, every index it reads inside its dimension",
                    extend_locs_is_the_encoding),
)
