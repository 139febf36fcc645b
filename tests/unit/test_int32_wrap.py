"""W5 outside debug mode: a page whose slots pass 2^31 - 1 never becomes a wrapped (negative or foreign) slot.

The built-in kernels take such a page as page 0, the sink (SPEC W5); the reference backend refuses it
naming W5. Every location path is checked with hand values: decode, verify, re-anchor and extend (both
the grouped fast paths and the stacked kernels), graph replay, the replay fill and ``expand_table``.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from kvtable import ContractViolation
from kvtable.backends import load
from kvtable.conformance.levels import LATENT
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.impl import triton_kernels
from kvtable.impl.torch_kernels import TORCH_KERNELS, StackedTorchKernels
from kvtable.reference import Batch, GroupSpec, batch_locs
from kvtable.reference.model import write_positions
from kvtable.strategies.unsafe import UNSAFE_KINDS, unsafe_cases, wrapping_pages

E = 2**31
KERNELS = [TORCH_KERNELS, StackedTorchKernels()] + (
    [triton_kernels.TRITON_KERNELS] if triton_kernels.triton_available() else [])
BUILT_IN = ["torch"] + (["triton"] if triton_kernels.triton_available() else [])


def i32(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def test_wrapping_pages_are_past_w5_and_one_lands_on_a_live_slot() -> None:
    assert wrapping_pages(2, 7) == (2**30, 2**30 + 3, E - 1)
    pages = wrapping_pages(8, 7)
    assert pages == (2**28, 2**28 + 3, E - 1, 2**29 + 7)
    assert all((p + 1) * 8 > E and p < E for p in pages)
    assert (pages[-1] * 8) % 2**32 == 7 * 8  # the int32 store of its first slot is page 7's first slot


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
def test_stacked_kernels_sink_a_page_past_w5(kernels: object) -> None:
    # page size 2: 2^30 - 1 is W5's last page (slots up to 2^31 - 1), 2^30 the first past it
    tables = i32([[[2**30 - 1, 2**30], [5, E - 1]]])
    out = torch.full((1, 6), -7, dtype=torch.int32)
    kernels.stacked_locs(tables, i32([2]), i32([2]), i32([4, 4]), out, 2, 3)
    assert out.tolist() == [[E - 1, 0, 1, 11, 0, 1]]
    out = torch.full((1, 4), -7, dtype=torch.int32)
    kernels.stacked_extend_locs(tables, i32([2]), i32([2]), torch.tensor([0, 0, 1, 1]), torch.tensor([1, 2, 1, 3]),
                                out)
    assert out.tolist() == [[E - 1, 0, 11, 1]]


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
def test_a_page_that_would_wrap_onto_a_live_page_sinks(kernels: object) -> None:
    """Page 2^29 + 3 at page size 8: its first slot is 2^32 + 24, which an int32 store makes page 3's slot 24."""
    tables = i32([[[2**29 + 3], [3]]])
    out = torch.full((1, 2), -7, dtype=torch.int32)
    kernels.stacked_locs(tables, i32([1]), i32([8]), i32([2, 2]), out, 2, 1)
    assert out.tolist() == [[1, 25]]


@pytest.mark.parametrize("fixed_locs, extend_locs", [(TORCH_KERNELS.grouped_locs, TORCH_KERNELS.grouped_extend_locs)],
                         ids=["torch"])
def test_torch_fast_paths_sink_a_page_past_w5(fixed_locs: object, extend_locs: object) -> None:
    tables = [i32([[2**30 - 1, 2**30], [5, E - 1]]), i32([[2**28 + 1], [2**28 - 1]])]
    out = torch.full((2, 2), -7, dtype=torch.int32)
    fixed_locs(tables, [2, 8], i32([4, 1]), out, 2, 1)
    assert out.tolist() == [[1, 10], [3, E - 8]]
    # int32 arithmetic here (every spot fits): page 2^29 + 6 at page size 4 would wrap onto page 6's slot 0
    extend = [i32([[2**30 - 1, 2**30, 3], [5, E - 1, 4]]), i32([[9, 2**29], [6, 2**29 + 6]])]
    out = torch.full((2, 3), -7, dtype=torch.int32)
    extend_locs(extend, [2, 4], [3, 4], [2, 1], out)
    assert out.tolist() == [[1, 6, 8], [39, 0, 0]]


@pytest.mark.parametrize("kernels", KERNELS, ids=lambda k: k.name)
def test_replay_fill_makes_a_block_past_int32_a_hole(kernels: object) -> None:
    """Ratio 4: block 2^29 - 1's sub-pages end at 2^31 - 1; block 2^29's would wrap to -2^31."""
    packed = i32([2**29 - 1, 2**29, -1, E - 1])
    dst = torch.full((1, 1, 16), -7, dtype=torch.int32)
    kernels.replay_fill(packed, i32([[0, 4, 4]]), dst, 1, 1, -1)
    top = 4 * (2**29 - 1)
    assert dst.tolist() == [[[top, top + 1, top + 2, E - 1, 0, 0, 0, 0, -1, -1, -1, -1, 0, 0, 0, 0]]]


@pytest.mark.parametrize("name", BUILT_IN)
def test_built_in_calls_never_return_a_wrapped_slot(name: str) -> None:
    backend = load(name, debug=False)
    spec = GroupSpec("full0", "full", 2)
    table = i32([[2**30 - 1, 2**30], [2**30, 5]])
    assert backend.decode_locs(table, i32([4, 1]), 2).tolist() == [1, 0]
    assert backend.verify_locs(table, i32([3, 4]), 2, 2).tolist() == [E - 1, 0, 10, 11]
    assert backend.reanchor_locs(table, i32([3, 2]), 2, 2).tolist() == [E - 1, 0, 0, 1]
    assert backend.extend_locs(table, [1, 0], [2, 1], 2).tolist() == [E - 1, 0, 0]
    got = backend.group_locs([spec], {"full0": table}, Batch((3, 4), "verify", n=2))
    assert got["full0"].tolist() == [E - 1, 0, 10, 11]
    assert backend.expand_table(i32([[2**30, 3]]), 2).tolist() == [[0, 0, 6, 7]]


@pytest.mark.parametrize("name", BUILT_IN)
def test_graph_replay_sinks_a_block_past_int32(name: str) -> None:
    backend = load(name, debug=False)
    runner = backend.graph([GroupSpec("full0", "full", 8)], max_bs=1, max_kernel_pages=8, kernel_page_size=2)
    tables, locs = runner.capture(1, ["full0"])
    # block 2^28 + 1 at ratio 4: kernel pages 2^30 + 4 .. 2^30 + 7 break W5 at kernel page size 2
    runner.replay(1, {"full0": i32([[2**29, 2**28 - 1]])}, i32([16]))
    top = 4 * (2**28 - 1)
    assert tables["full0"].tolist() == [[0, 0, 0, 0, top, top + 1, top + 2, top + 3]]
    assert locs["full0"].tolist() == [(top + 3) * 2 + 1]
    runner.replay(1, {"full0": i32([[2**29, 2**28 + 1]])}, i32([16]))
    assert locs["full0"].tolist() == [1]


def test_the_reference_refuses_naming_w5() -> None:
    backend = load("reference", debug=False)
    table = i32([[2**30 - 1, 2**30]])
    with pytest.raises(ContractViolation, match=r"\[W5 int32-locs\] group 'full0'"):
        backend.group_locs([GroupSpec("full0", "full", 2)], {"full0": table}, Batch((4,), "decode"))
    with pytest.raises(ContractViolation, match=r"\[W5 int32-locs\]"):
        backend.decode_locs(table, i32([3]), 2)
    with pytest.raises(ContractViolation, match=r"\[W5 int32-locs\].*expanded entry 0 is 2147483648"):
        backend.expand_table(i32([[2**30]]), 2)
    assert backend.decode_locs(i32([[2**30 - 1]]), i32([2]), 2).tolist() == [E - 1]  # the last page inside W5


@settings(max_examples=40, deadline=None, database=None)
@given(unsafe_cases(UNSAFE_KINDS[4]))
def test_the_strategy_puts_a_page_past_w5_in_a_written_column(u) -> None:
    case = u.case
    breaches = [(gid, r, c) for gid, table in case.tables.items() if not case.spec(gid).is_state
                for r, row in enumerate(table) for c, p in enumerate(row)
                if (p + 1) * case.spec(gid).block_granularity > E]
    assert breaches and u.kind == "page past int32"
    gid, row, col = breaches[0]
    block = case.spec(gid).block_granularity
    assert col in {pos // block for pos in write_positions(case.batch, row)}
    assert f"row {row}" in u.how and f"col {col} = " in u.how
    # the reference's debug mode refuses it (W5, or T7 first when one row got the same page twice)
    with pytest.raises(ContractViolation, match=r"\[(W5 int32-locs|T7 private-write-pages)\]"):
        load("reference", debug=True).group_locs(list(case.specs), case.tensors(), case.batch, tail_pad=case.tail_pad)


class WrappingBackend:
    """group_locs as vLLM before #1486: the slot computed exactly, then stored as int32 (it wraps)."""

    name, device = "wrapping", "cpu"

    def group_locs(self, specs, tables, batch, *, tail_pad=-1):
        out = {}
        for spec in specs:
            if not spec.is_state:
                locs = batch_locs(tables[spec.group_id].tolist(), batch, spec.block_granularity)
                out[spec.group_id] = torch.tensor([(v + E) % 2**32 - E for v in locs], dtype=torch.int32)
        return out


def test_the_property_catches_a_wrapping_backend_naming_group_row_and_token() -> None:
    """The wrap needs a pool of 2^31 slots: a latent failure, failing the run only with the latent tier judged."""
    report = run_conformance(WrappingBackend(), examples=60, seed=0, properties=select(["safety/int32-wrap"]),
                             level="safety+latent")
    result = report.results[0]
    assert not report.passed and result.tier == LATENT and result.clause.startswith("W5")
    assert "latent: needs >= 2^31 slots in one pool" in result.message
    assert "page past int32" in result.message and "unsafe write" in result.message
    plain = run_conformance(WrappingBackend(), examples=60, seed=0, properties=select(["safety/int32-wrap"]),
                            level="safety")
    notes = plain.results[0].notes
    assert plain.passed and notes and {f.tier for f in notes} == {LATENT}, plain.details()
    assert f"{len(notes)} latent failure(s)" in plain.summary()
    assert " row " in result.message and " token " in result.message and "wrote loc " in result.message


@pytest.mark.parametrize("name", [*BUILT_IN, "reference"])
def test_built_in_backends_pass_the_property_at_every_level(name: str) -> None:
    report = run_conformance(name, examples=30, seed=0, properties=select(["safety/int32-wrap"]), level="strict")
    assert report.passed, report.details()
    assert report.results[0].examples >= 30
