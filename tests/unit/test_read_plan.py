"""The torch kernels' cached read plans and group_locs' cached spec
checks: what is kept across calls is only what the tables' metadata and the spec objects decide, so a changed
table or spec is read or checked anew; and the W5 sink of pages past int32 (power-of-two page sizes take the
wrap-and-mask route, others the compare)."""

from __future__ import annotations

import pytest
import torch

from kvtable import ContractViolation
from kvtable.contract import Batch, GroupSpec
from kvtable.impl import TORCH_KERNELS, group_locs
from kvtable.impl.read_plan import INT32_END, read_plan

ROUTES = pytest.mark.parametrize("fixed_locs, extend_locs",
                                 [(TORCH_KERNELS.grouped_locs, TORCH_KERNELS.grouped_extend_locs)], ids=["torch"])
"""The torch kernels' grouped paths (the route of every device, impl/routes.py)."""
EXTEND_ROUTES = pytest.mark.parametrize("extend_locs", [TORCH_KERNELS.grouped_extend_locs], ids=["torch"])
FIXED_ROUTES = pytest.mark.parametrize("fixed_locs", [TORCH_KERNELS.grouped_locs], ids=["torch"])

INT32_MAX = INT32_END - 1


def i32(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def model_loc(page: int, pos: int, ps: int, width: int) -> int:
    """One token's slot by hand: a pad, a page past W5's top or a column past the width sinks to page 0."""
    col = pos // ps
    if col >= width or page < 0 or page > INT32_END // ps - 1:
        page = 0
    return page * ps + pos % ps


@pytest.mark.parametrize("ps", [1, 2, 3, 16, 2**30])
@ROUTES
def test_pages_at_and_past_the_w5_top_in_decode_and_extend(ps: int, fixed_locs: object, extend_locs: object) -> None:
    top = INT32_END // ps - 1
    row = [top, top + 1, INT32_MAX, -1, 0, 5]
    table = i32([[p for p in row if p <= INT32_MAX]])
    width = table.shape[1]
    positions = [col * ps + (ps - 1 if col % 2 else 0) for col in range(width)]
    want = [model_loc(table[0, pos // ps].item(), pos, ps, width) for pos in positions]
    assert all(0 <= loc <= INT32_MAX for loc in want)
    got = []
    for pos in positions:  # decode: one request per position, the same row repeated
        out = torch.empty(1, 1, dtype=torch.int32)
        seq = torch.tensor([pos + 1], dtype=torch.int32 if pos < INT32_MAX else torch.int64)
        fixed_locs([table], [ps], seq, out, 1, 1)
        got.append(out.item())
    assert got == want
    out = torch.empty(1, len(positions), dtype=torch.int32)
    for i, pos in enumerate(positions):  # extend: one token each
        extend_locs([table], [ps], [pos], [1], out[:, i:])
    assert out[0].tolist() == want


@ROUTES
def test_mixed_page_sizes_share_one_call(fixed_locs: object, extend_locs: object) -> None:
    """A power-of-two group beside a non-power-of-two one: each group sinks its own pages past its own top."""
    tables = [i32([[INT32_END // 4, 7]]), i32([[INT32_END // 3, 7]])]
    out = torch.empty(2, 2, dtype=torch.int32)
    fixed_locs(tables, [4, 3], i32([1]), out, 1, 1)
    assert out[:, 0].tolist() == [0, 0]
    extend_locs(tables, [4, 3], [0], [2], out)
    assert out.tolist() == [[0, 1], [0, 1]]


@FIXED_ROUTES
def test_a_table_written_in_place_is_read_anew(fixed_locs: object) -> None:
    table = i32([[3, 4], [5, 6]])
    out = torch.empty(1, 2, dtype=torch.int32)
    fixed_locs([table], [4], i32([1, 5]), out, 2, 1)
    assert out.tolist() == [[12, 24]]
    table[1, 1] = 9
    table[0, 0] = -1
    fixed_locs([table], [4], i32([1, 5]), out, 2, 1)
    assert out.tolist() == [[0, 36]]


@FIXED_ROUTES
def test_a_resized_or_restrided_table_gets_a_new_plan(fixed_locs: object) -> None:
    table = i32([[3, 4], [5, 6]])
    first = read_plan([table], [4], table.device, torch.int32)
    assert read_plan([table], [4], table.device, torch.int32) is first
    table.resize_(2, 3).copy_(i32([[3, 4, 7], [5, 6, 8]]))
    assert read_plan([table], [4], table.device, torch.int32) is not first
    out = torch.empty(1, 2, dtype=torch.int32)
    fixed_locs([table], [4], i32([9, 12]), out, 2, 1)
    assert out.tolist() == [[28, 35]]
    fixed_locs([table.t().contiguous().t()], [4], i32([9, 12]), out, 2, 1)
    assert out.tolist() == [[28, 35]]


@pytest.mark.parametrize("page_sizes", [(3, 6), (12, 6, 18), (2, 8), (5,), (1, 4)])
@EXTEND_ROUTES
def test_extend_blocks_at_any_unit_match_a_hand_model(page_sizes: tuple[int, ...], extend_locs: object) -> None:
    """The extend kernel's unit (the gcd of the page sizes; a power of two or not) and its blocks: every token's
    location as the hand model gives it, requests of every length (0 and 1 too) starting mid-page, a table read
    through a column stride, pads and pages past W5 in the written pages."""
    prefix, extend = [0, 7, 5, 3, 0, 11], [5, 0, 13, 1, 2, 9]
    width = max(-(-(p + e) // min(page_sizes)) for p, e in zip(prefix, extend, strict=True))
    gen = torch.Generator().manual_seed(sum(page_sizes))
    tables = []
    for ps in page_sizes:
        table = torch.randint(1, 1000, (len(prefix), 2 * width), generator=gen, dtype=torch.int32)[:, ::2]
        table[0, 0], table[2, 1], table[5, 2] = -1, min(INT32_END // ps, INT32_MAX), INT32_MAX
        tables.append(table)
    total = sum(extend)
    out = torch.full((len(page_sizes), total + 1), 99, dtype=torch.int32)
    extend_locs(tables, list(page_sizes), prefix, extend, out)
    for g, (table, ps) in enumerate(zip(tables, page_sizes, strict=True)):
        want = [model_loc(table[i, pos // ps].item(), pos, ps, table.shape[1])
                for i, (p, e) in enumerate(zip(prefix, extend, strict=True)) for pos in range(p, p + e)]
        assert out[g, :total].tolist() == want
        assert out[g, total].item() == 99


@ROUTES
def test_views_of_one_storage_and_separate_tables_read_the_same(fixed_locs: object, extend_locs: object) -> None:
    pool = torch.arange(1, 25, dtype=torch.int32)
    views = [pool[:8].view(2, 4), pool[8:14].view(2, 3), pool[14:24].view(2, 5)]
    copies = [v.clone() for v in views]
    seq = i32([7, 3])
    got, want = torch.empty(3, 4, dtype=torch.int32), torch.empty(3, 4, dtype=torch.int32)
    fixed_locs(views, [2, 2, 1], seq, got, 2, 2)
    fixed_locs(copies, [2, 2, 1], seq, want, 2, 2)
    assert torch.equal(got, want)
    extend_locs(views, [2, 2, 1], [1, 0], [2, 2], got)
    extend_locs(copies, [2, 2, 1], [1, 0], [2, 2], want)
    assert torch.equal(got, want)


@FIXED_ROUTES
def test_host_bound_skips_only_what_it_proves(fixed_locs: object) -> None:
    """``longest`` within every table: the same values; a stale bound is never trusted past the tables' reach."""
    table = i32([[3, 4], [5, 6]])
    got, want = torch.empty(1, 4, dtype=torch.int32), torch.empty(1, 4, dtype=torch.int32)
    fixed_locs([table], [4], i32([8, 6]), got, 2, 2, longest=8)
    fixed_locs([table], [4], i32([8, 6]), want, 2, 2)
    assert torch.equal(got, want)
    fixed_locs([table], [4], i32([20, 6]), got, 2, 2, longest=20)  # past the reach: sinks
    assert got[0, :2].tolist() == [2, 3]


@EXTEND_ROUTES
def test_extend_requests_that_write_nothing_anywhere_in_the_batch(extend_locs: object) -> None:
    table = i32([[1, 2, 3], [4, 5, 6], [7, 8, 9], [10, 11, 12]])
    prefix, extend = [0, 2, 5, 1], [0, 3, 0, 2]
    out = torch.full((1, 5), -7, dtype=torch.int32)
    extend_locs([table], [2], prefix, extend, out)
    want = [model_loc(table[i, p // 2].item(), p, 2, 3) for i, (a, e) in enumerate(zip(prefix, extend, strict=True))
            for p in range(a, a + e)]
    assert out[0].tolist() == want


def test_specs_are_checked_again_when_they_change() -> None:
    tables = {"full": i32([[1, 2]])}
    specs = [GroupSpec("full", "full", 4)]
    assert group_locs(specs, tables, Batch((3,)))["full"].tolist() == [6]
    specs[0] = GroupSpec("full", "full", 0)
    with pytest.raises(ContractViolation, match="E1"):
        group_locs(specs, tables, Batch((3,)))
    with pytest.raises(ContractViolation, match="T1"):
        group_locs({"full": GroupSpec("full", "full", 4), "swa": GroupSpec("swa", "sliding", 4, window=2)},
                   tables, Batch((3,)))


def test_lengths_outside_the_bounds_are_still_refused_row_by_row() -> None:
    specs, tables = [GroupSpec("full", "full", 4)], {"full": i32([[1, 2]] * 40)}
    with pytest.raises(ContractViolation, match="T9") as err:
        group_locs(specs, tables, Batch((3,) * 37 + (0, 3, 3)))
    assert err.value.row == 37
    with pytest.raises(ContractViolation, match="W2") as err:
        group_locs(specs, tables, Batch((3,) * 39 + (1,), mode="verify", n=2))
    assert err.value.row == 39
    with pytest.raises(ContractViolation, match="T8") as err:
        group_locs(specs, tables, Batch((3,) * 38 + (9, 3)))
    assert err.value.row == 38
    padded = Batch((3,) * 39 + (9,), actual_bs=39)  # a dummy row past the width: no T8, and it sinks
    assert group_locs(specs, tables, padded)["full"][39].item() == 0
    assert group_locs(specs, tables, Batch((2**31,) + (3,) * 39, actual_bs=0))["full"].shape == (40,)


def test_kernels_that_override_grouped_locs_get_int32_lengths_and_no_host_bound() -> None:
    """Only kernels that declare ``host_bounds`` get ``longest`` (and int64 lengths); an override that declares
    none keeps the protocol's six arguments and int32 lengths."""
    seen = []

    class Overriding(type(TORCH_KERNELS)):
        host_bounds = False

        def grouped_locs(self, tables, page_sizes, seq_lens, out, bs, n):  # noqa: ANN001, ANN202
            seen.append(seq_lens.dtype)
            super().grouped_locs(tables, page_sizes, seq_lens, out, bs, n)

    specs, tables = [GroupSpec("full", "full", 4)], {"full": i32([[1, 2], [3, 4]])}
    got = group_locs(specs, tables, Batch((3, 6)), kernels=Overriding())
    assert got["full"].tolist() == [6, 17] and seen == [torch.int32]
    assert group_locs(specs, tables, Batch((3, 6)))["full"].tolist() == [6, 17]
