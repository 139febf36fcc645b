"""The Triton kernels against the torch kernels and the pure-Python reference, element for element.

Without CUDA they run in the Triton interpreter on CPU tensors (impl/triton_kernels.py sets
TRITON_INTERPRET=1); with CUDA and TRITON_INTERPRET unset they run compiled (bench/gpu_check.sh).
Outputs start as sentinels, and every element a kernel must not write is checked to keep it.
"""

from __future__ import annotations

import random
import subprocess
import sys

import pytest
import torch

from kvtable.impl import triton_kernels  # first: it sets TRITON_INTERPRET before triton is imported

if not triton_kernels.triton_available():
    pytest.skip("triton is not installed; the Triton kernels are optional", allow_module_level=True)

from hand_vectors import FULL, SLIDING  # noqa: E402

from kvtable.impl.torch_kernels import TORCH_KERNELS  # noqa: E402
from kvtable.reference import (  # noqa: E402
    NULL_PAGE,
    expand_table,
    extend_locs,
    page_slots,
    row_slots,
    verify_locs,
)

TRITON = triton_kernels.TRITON_KERNELS
DEVICE = "cpu" if triton_kernels.interpreting() else "cuda"
SENTINEL = -7
POISON = 999
"""Stack columns past a group's width: a kernel that reads them instead of sinking gets page 999."""

Table = list[list[int]]


def i32(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=DEVICE)


def i64(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64, device=DEVICE)


def stack(tables: list[Table], rows: int, cols: int) -> torch.Tensor:
    """int32 ``[G, rows, cols]``: each table in its corner, POISON everywhere else."""
    out = torch.full((len(tables), rows, cols), POISON, dtype=torch.int32)
    for g, table in enumerate(tables):
        if table:
            out[g, : len(table), : len(table[0])] = torch.tensor(table, dtype=torch.int32)
    return out.to(DEVICE)


def sink_loc(row: list[int], width: int, ps: int, pos: int) -> int:
    """The reference slot of ``pos`` in the row's first ``width`` columns; a pad or a column past the
    width sinks into the null page at the in-page offset (the kernels' defined sink case)."""
    slots = row_slots(row[:width], ps)
    slot = slots[pos] if pos < len(slots) else None
    return slot if slot is not None else page_slots(NULL_PAGE, ps)[pos % ps]


def run_locs(kernels: object, tables: torch.Tensor, widths: list[int], page_sizes: list[int],
             seq_lens: list[int], bs: int, n: int, cap: int) -> torch.Tensor:
    out = torch.full((tables.shape[0], cap), SENTINEL, dtype=torch.int32, device=DEVICE)
    kernels.stacked_locs(tables, i32(widths), i32(page_sizes), i32(seq_lens), out, bs, n)
    return out


def run_extend(kernels: object, tables: torch.Tensor, widths: list[int], page_sizes: list[int],
               prefix: list[int], extend: list[int], cap: int) -> torch.Tensor:
    rows = [b for b, e in enumerate(extend) for _ in range(e)]
    positions = [p for b, e in enumerate(extend) for p in range(prefix[b], prefix[b] + e)]
    out = torch.full((tables.shape[0], cap), SENTINEL, dtype=torch.int32, device=DEVICE)
    kernels.stacked_extend_locs(tables, i32(widths), i32(page_sizes), i64(rows), i64(positions), out)
    return out


def run_fill(kernels: object, sources: list[Table], ratios: list[int], max_bs: int, width: int, bs: int,
             actual_bs: int, tail_pad: int) -> torch.Tensor:
    """Pack ``sources`` (``actual_bs`` rows each) back to back and fill a sentinel-filled stack."""
    packed = [v for table in sources for row in table for v in row]
    offsets = [sum(len(t) * len(t[0]) for t in sources[:g]) for g in range(len(sources))]
    meta = [[offsets[g], len(sources[g][0]), ratios[g]] for g in range(len(sources))]
    dst = torch.full((len(sources), max_bs, width), SENTINEL, dtype=torch.int32, device=DEVICE)
    kernels.replay_fill(i32(packed), i32(meta), dst, bs, actual_bs, tail_pad)
    return dst


def expected_fill(source: Table, ratio: int, width: int, bs: int, actual_bs: int, tail_pad: int) -> Table:
    """The reference expansion of rows ``[:bs]`` (rows ``>= actual_bs`` are dummy rows, all 0)."""
    padded = source[:bs] + [[NULL_PAGE] * len(source[0])] * (bs - min(len(source), bs))
    return expand_table(padded, ratio, max_kernel_pages=width, tail_pad=tail_pad, actual_bs=actual_bs)


WITHOUT_TRITON = """
import sys
sys.modules["triton"] = None  # import triton now raises ImportError
from kvtable.impl import triton_kernels
from kvtable.backends.triton_backend import TritonBackend
assert not triton_kernels.triton_available()
for build in (triton_kernels.TritonKernels, TritonBackend):
    try:
        build()
    except ImportError as e:
        assert "needs triton" in str(e)
    else:
        raise AssertionError(build)
print("ok")
"""



def test_module_surface() -> None:
    assert triton_kernels.triton_available()
    assert isinstance(TRITON, triton_kernels.TritonKernels) and TRITON.name == "triton"
    with pytest.raises(ValueError, match="out has 1 columns"):
        run_locs(TRITON, stack([FULL], 2, 4), [4], [2], [5, 4], 2, 1, cap=1)


def test_optional_without_triton() -> None:
    """Triton is optional: the module and the backend import without it and fail only when built."""
    done = subprocess.run([sys.executable, "-c", WITHOUT_TRITON], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


@pytest.mark.parametrize("kernels", [TRITON, TORCH_KERNELS], ids=["triton", "torch"])
def test_hand_decode_and_extend(kernels: object) -> None:
    tables = stack([SLIDING, FULL], 2, 4)
    out = run_locs(kernels, tables, [4, 4], [2, 2], [5, 4], bs=2, n=1, cap=5)
    assert out.tolist() == [[14, 13] + [SENTINEL] * 3, [6, 17] + [SENTINEL] * 3]
    ext = run_extend(kernels, tables, [4, 4], [2, 2], [2, 0], [3, 2], cap=7)
    assert ext[1].tolist() == [4, 5, 6, 8, 9, SENTINEL, SENTINEL]
    assert ext[1, :5].tolist() == extend_locs(FULL, [2, 0], [3, 2], 2)
    # the sliding row 1 writes its front hole: the reference's slots of page 0
    assert ext[0, :5].tolist() == extend_locs(SLIDING, [2, 0], [3, 2], 2) == [10, 11, 14, 0, 1]


@pytest.mark.parametrize("n", [1, 4])
def test_upstream_negative_page_routes_to_dummy(n: int) -> None:
    """Facts §7.3 test_locs_negative_page_routes_to_dummy: pads land at ``pos % ps`` of page 0."""
    table = [[5, 5] + [-1] * 14 for _ in range(8)]
    seq = [100, 1100, 30]
    tables = stack([table, table], 8, 16)
    got = run_locs(TRITON, tables, [16, 16], [256, 128], seq, bs=3, n=n, cap=16)
    want = {(256, 1): [1379, 75, 1309], (256, 4): [1376, 1377, 1378, 1379, 72, 73, 74, 75, 1306, 1307, 1308,
                                                      1309],
            (128, 1): [739, 75, 669], (128, 4): [736, 737, 738, 739, 72, 73, 74, 75, 666, 667, 668, 669]}
    for g, ps in enumerate([256, 128]):
        assert got[g, : 3 * n].tolist() == want[ps, n]
        assert got[g, : 3 * n].tolist() == [sink_loc(table[b], 16, ps, max(seq[b] - n + t, 0))
                                             for b in range(3) for t in range(n)]
        assert got[g, 3 * n:].tolist() == [SENTINEL] * (16 - 3 * n)
    assert torch.equal(got, run_locs(TORCH_KERNELS, tables, [16, 16], [256, 128], seq, 3, n, 16))


def test_columns_past_width_sink() -> None:
    """vLLM #53982: a column past the group's width is page -1, never the stale stack column beyond it,
    nor (past the stack's own width) the next row's first page."""
    narrow = [[3, 4], [6, 7]]
    tables = stack([narrow, narrow], 2, 4)  # group 0 width 2 inside a stack 4 wide: cols 2, 3 = POISON
    seq = [7, 9]  # col 3 and col 4 (past the stack)
    for kernels in (TRITON, TORCH_KERNELS):
        out = run_locs(kernels, tables, [2, 4], [2, 2], seq, bs=2, n=1, cap=2)
        assert out[0].tolist() == [sink_loc(narrow[0], 2, 2, 6), sink_loc(narrow[1], 2, 2, 8)] == [0, 0]
        assert out[1].tolist() == [POISON * 2, 0]
        ext = run_extend(kernels, tables, [2, 4], [2, 2], [3, 3], [2, 2], cap=4)
        assert ext[0].tolist() == [9, 0, 15, 0]
        assert ext[1].tolist() == [9, 2 * POISON, 15, 2 * POISON]
    # Triton alone (torch would raise): a width claimed past the stack's own is clamped to it, so
    # row 0's col 4 sinks instead of reading row 1's col 0 (or host memory, for the last row)
    out = run_locs(TRITON, tables, [2, 6], [2, 2], [9, 9], bs=2, n=1, cap=2)
    assert out[1].tolist() == [0, 0]


def test_unpack_upstream_vectors() -> None:
    """Facts §7.3 test_unpack_expands_logical_pages_per_group, plus a holed row; our contract keeps an
    in-row pad (and a hole) as itself at ratio > 1 where upstream writes sub-pages 0, 1."""
    sources = [[[3, 5, -1], [7, 9, 11]], [[13, 15, -1], [17, 19, 21]], [[0, 4, -1], [0, 0, 2]]]
    for kernels in (TRITON, TORCH_KERNELS):
        dst = run_fill(kernels, sources, [2, 1, 2], max_bs=3, width=8, bs=2, actual_bs=2, tail_pad=-1)
        assert dst[0, :2].tolist() == [[6, 7, 10, 11, -1, -1, -1, -1], [14, 15, 18, 19, 22, 23, -1, -1]]
        assert dst[1, :2].tolist() == [[13, 15, -1, -1, -1, -1, -1, -1], [17, 19, 21, -1, -1, -1, -1, -1]]
        assert dst[2, :2].tolist() == [[0, 0, 8, 9, -1, -1, -1, -1], [0, 0, 0, 0, 4, 5, -1, -1]]
        for g in range(3):
            assert dst[g, :2].tolist() == expected_fill(sources[g], [2, 1, 2][g], 8, 2, 2, -1)
        assert (dst[:, 2] == SENTINEL).all()


@pytest.mark.parametrize(("actual_bs", "bs"), [(13, 16), (1, 1)])
def test_unpack_matches_per_group(actual_bs: int, bs: int) -> None:
    """Facts §7.3 test_unpack_matches_per_group, narrowed: ratio 1, random pages, tail -1, dummy rows 0."""
    rng = random.Random(actual_bs * 100 + bs)
    widths = [32, 64, 8, 200]
    sources = [[[rng.randrange(1, 5000) for _ in range(w)] for _ in range(actual_bs)] for w in widths]
    dst = run_fill(TRITON, sources, [1] * 4, max_bs=20, width=200, bs=bs, actual_bs=actual_bs, tail_pad=-1)
    for g, w in enumerate(widths):
        assert dst[g, :actual_bs].tolist() == [row + [-1] * (200 - w) for row in sources[g]]
        assert (dst[g, actual_bs:bs] == 0).all() and (dst[g, bs:] == SENTINEL).all()
    assert torch.equal(dst, run_fill(TORCH_KERNELS, sources, [1] * 4, 20, 200, bs, actual_bs, -1))


@pytest.mark.slow
def test_views_and_pitched_strides() -> None:
    """Tables, seq_lens, metadata and outputs as strided views give the contiguous results in place."""
    tables = stack([SLIDING, FULL], 2, 4)
    wide = torch.full((4, 3, 9), POISON, dtype=torch.int32, device=DEVICE)
    wide[::2, :2, 1:5] = tables
    view = wide[::2, :2, 1:5].transpose(1, 2).contiguous().transpose(1, 2)  # column-major rows
    assert view.stride()[1:] == (1, 2)
    pitched = wide[::2, :2, 1:5]
    seq = i32([5, 99, 4, 99])[::2]
    meta_3 = i32([[4, 2, 2], [0, 2, 1]]).t().contiguous().t()
    for kernels in (TRITON, TORCH_KERNELS):
        for tbl in (view, pitched):
            big = torch.full((2, 6), SENTINEL, dtype=torch.int32, device=DEVICE)
            kernels.stacked_locs(tbl, i32([4, 4, 0])[:2], i32([2, 0, 2])[::2], seq, big[:, ::2], 2, 1)
            assert big.tolist() == [[14, SENTINEL, 13] + [SENTINEL] * 3, [6, SENTINEL, 17] + [SENTINEL] * 3]
            kernels.stacked_extend_locs(tbl, i32([4, 4]), i32([2, 2]), i64([0, 9, 0])[::2], i64([3, 9, 4])[::2],
                                        big[:, 1::2])
            assert big[:, 1::2].tolist() == [[11, 14, SENTINEL], [5, 6, SENTINEL]]
        packed = i32([21, 0, 22, 0, 31, 0, 32, 0, 41, 0, 42, 0])[::2]  # group 1 rows, then group 0 rows
        store = torch.full((2, 3, 7), SENTINEL, dtype=torch.int32, device=DEVICE)
        kernels.replay_fill(packed, meta_3, store[:, :, 2:6], 2, 1, 0)
        assert store[:, :2, 2:6].tolist() == [[[82, 83, 84, 85], [0] * 4], [[21, 22, 0, 0], [0] * 4]]
        assert (store[:, 2] == SENTINEL).all() and (store[:, :, :2] == SENTINEL).all()
        assert (store[:, :, 6] == SENTINEL).all()


def random_case(rng: random.Random) -> dict:
    """Valid per-group tables for a random verify batch: ragged widths, front holes, page sizes B."""
    groups, n = rng.randint(1, 4), rng.randint(1, 4)
    bs = rng.randint(1, 17)
    live = rng.randint(1, bs)
    blocks = [rng.choice([2, 4, 8]) for _ in range(groups)]
    widths = [rng.randint(2, 6) for _ in range(groups)]
    max_tokens = min(w * b for w, b in zip(widths, blocks, strict=True))
    seq = [rng.randint(n, max_tokens) for _ in range(live)] + [1] * (bs - live)
    pool = rng.sample(range(1, 4000), groups * bs * 6)
    tables = []
    for g in range(groups):
        rows = []
        for b in range(bs):
            if b >= live:
                rows.append([NULL_PAGE] * widths[g])
                continue
            used = -(-seq[b] // blocks[g])
            holes = rng.randint(0, (seq[b] - n) // blocks[g])
            rows.append([0] * holes + [pool.pop() for _ in range(used - holes)] + [-1] * (widths[g] - used))
        tables.append(rows)
    return {"groups": groups, "n": n, "bs": bs, "live": live, "blocks": blocks, "widths": widths, "seq": seq,
            "tables": tables}


@pytest.mark.parametrize("seed", range(5))
def test_random_locs_and_replay(seed: int) -> None:
    """Random batches: locations against the reference and the torch kernels; then the graph path
    (replay fill at ratio r, locations at the kernel page size B / r) gives the same locations."""
    rng = random.Random(seed)
    case = random_case(rng)
    g_count, n, bs, live, seq = case["groups"], case["n"], case["bs"], case["live"], case["seq"]
    tables, blocks, widths = case["tables"], case["blocks"], case["widths"]
    stacked = stack(tables, bs + 2, max(widths) + 1)
    cap = bs * n + 3
    got = run_locs(TRITON, stacked, widths, blocks, seq, bs, n, cap)
    assert torch.equal(got, run_locs(TORCH_KERNELS, stacked, widths, blocks, seq, bs, n, cap))
    for g in range(g_count):
        assert got[g, : bs * n].tolist() == verify_locs(tables[g], seq, blocks[g], n, actual_bs=live)
        assert got[g, bs * n:].tolist() == [SENTINEL] * 3

    prefix = [rng.randint(0, s) for s in seq[:live]]
    extend = [s - p for s, p in zip(seq[:live], prefix, strict=True)]
    ext = run_extend(TRITON, stacked, widths, blocks, prefix, extend, sum(extend) + 2)
    assert torch.equal(ext, run_extend(TORCH_KERNELS, stacked, widths, blocks, prefix, extend, sum(extend) + 2))
    for g in range(g_count):
        assert ext[g, : sum(extend)].tolist() == extend_locs(tables[g], prefix, extend, blocks[g])
        assert ext[g, sum(extend):].tolist() == [SENTINEL] * 2

    ratios = [rng.choice([r for r in (1, 2, 4) if b % r == 0]) for b in blocks]
    tail_pad = rng.choice([-1, 0])
    width = max(w * r for w, r in zip(widths, ratios, strict=True))
    sources = [t[:live] for t in tables]
    dst = run_fill(TRITON, sources, ratios, bs + 1, width, bs, live, tail_pad)
    assert torch.equal(dst, run_fill(TORCH_KERNELS, sources, ratios, bs + 1, width, bs, live, tail_pad))
    kernel_ps = [b // r for b, r in zip(blocks, ratios, strict=True)]
    for g in range(g_count):
        assert dst[g, :bs].tolist() == expected_fill(sources[g], ratios[g], width, bs, live, tail_pad)
        assert (dst[g, bs:] == SENTINEL).all()
    expanded_widths = [w * r for w, r in zip(widths, ratios, strict=True)]
    replayed = run_locs(TRITON, dst, expanded_widths, kernel_ps, seq, bs, n, cap)
    assert torch.equal(replayed, got)


def test_triton_backend_hand_vectors() -> None:
    """The backend wiring: TorchBackend's behaviours on the Triton kernels."""
    from kvtable.backends.triton_backend import TritonBackend

    backend = TritonBackend()
    assert backend.name == "triton" and backend.device == DEVICE
    assert isinstance(backend.kernels, triton_kernels.TritonKernels)
    assert backend.decode_locs(i32(SLIDING), i32([5, 4]), 2).tolist() == [14, 13]
    assert backend.decode_locs(i32(FULL), i32([5, 4]), 2).tolist() == [6, 17]
    assert backend.verify_locs(i32(FULL), i32([5, 4]), 2, 2).tolist() == verify_locs(FULL, [5, 4], 2, 2)
    assert backend.extend_locs(i32(FULL), [2, 0], [3, 2], 2).tolist() == [4, 5, 6, 8, 9]


def test_triton_backend_graph_replay() -> None:
    """A graph replay (ratio 2 expansion, a dummy row) through the Triton kernels equals the torch
    backend's and the reference GraphModel's, tables and locations both."""
    from kvtable.backends.torch_backend import TorchBackend
    from kvtable.backends.triton_backend import TritonBackend
    from kvtable.reference import GraphModel, GroupSpec

    specs = [GroupSpec("full", "full", 2), GroupSpec("swa", "sliding", 2, window=2), GroupSpec("ssm", "state", 1)]
    live = {"full": FULL, "swa": SLIDING}
    seq, kw = [5, 4, 1], {"max_bs": 4, "max_kernel_pages": 8, "kernel_page_size": 1, "spec_n": 2}
    model = GraphModel(specs, **kw)
    model.replay(3, live, seq, 2, actual_bs=2)
    results = []
    for backend in (TritonBackend(), TorchBackend(device=DEVICE)):
        runner = backend.graph(specs, **kw)
        runner.replay(3, {g: i32(t) for g, t in live.items()}, i32(seq), 2, actual_bs=2)
        results.append({g: (runner.table_buffers[g][:3].tolist(), runner.loc_buffers[g][:6].tolist())
                        for g in live})
    want = {g: (model.groups[g].table[:3], model.groups[g].locs[:6]) for g in live}
    assert results[0] == results[1] == want
    assert want["full"][1] == [5, 6, 16, 17, 0, 0]  # seq 5, n 2: positions 3, 4 -> pages 2, 3
