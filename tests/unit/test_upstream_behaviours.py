"""The documented behaviours of upstream's cache_groups.py, reproduced through ``CacheGroupsMixin``.

Vectors come from tokenspeed's own tests of its group write locations and per-group CUDA-graph buffers. Where our
contract deliberately differs, the test says so and asserts our value:
- block expansion keeps holes (0) and pads (< 0) as themselves; upstream maps them to sub-pages
  0..r-1 of dummy block 0;
- a real verify row with seq_len < N is a W2 violation; upstream clamps and writes one slot twice;
- expansion writes only the columns it names (upstream's fused path zeroes the rest of ``out``);
- the debug checker is the strong one (own row, own column, own offset, unique slots).
"""

from __future__ import annotations

import pytest
import torch
from hand_vectors import FULL, SLIDING

from kvtable import ContractViolation, StaleGraphState
from kvtable.impl import TORCH_KERNELS, CacheGroupsMixin, TorchKernels, expand_table
from kvtable.impl.validate import page_ratio
from kvtable.reference import GroupSpec

PAGE2 = (GroupSpec("sliding_attention", "sliding", 2, window=2), GroupSpec("full_attention", "full", 2))


def i32(values: object) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


class MHA(CacheGroupsMixin):
    """Views each group's cache at its own block granularity: consumer page size B, never expands."""

    expand_tables = False

    def __init__(self, specs=PAGE2, *, kernel_page_size: int = 2, max_num_pages: int = 4, **kw) -> None:
        self.kernel_page_size, self.max_num_pages = kernel_page_size, max_num_pages
        for name, value in kw.items():
            setattr(self, name, value)
        self.learn_cache_groups(specs)


class TRT(MHA):
    """Kernels see kernel pages (consumer page size K) over full-width tables, so the tail pad is 0."""

    expand_tables = True
    table_tail_pad = 0


# 7.1 test_group_write_locations -------------------------------------------------------------------------
def test_identity_when_no_group_expands() -> None:
    tables = {"full_attention": i32([[3, 5]])}
    backend = MHA([GroupSpec("full_attention", "full", 4)])
    assert backend.kernel_page_tables(tables) is tables


def test_decode_and_extend_metadata() -> None:
    backend = MHA()
    md = backend.init_decode_metadata({"sliding_attention": i32(SLIDING), "full_attention": i32(FULL)}, i32([5, 4]))
    assert md.out_cache_locs is not None and md.page_tables is not None
    assert md.out_cache_locs["sliding_attention"].tolist() == [14, 13]  # the front hole is never touched
    assert md.out_cache_locs["full_attention"].tolist() == [6, 17]
    assert md.out_cache_locs["full_attention"].dtype == torch.int32
    assert md.page_tables["full_attention"].tolist() == FULL
    md = backend.init_extend_metadata({"full_attention": i32(FULL), "sliding_attention": i32(SLIDING)}, [2, 0], [3, 2])
    assert md.out_cache_locs is not None and md.out_cache_locs["full_attention"].tolist() == [4, 5, 6, 8, 9]
    assert md.seq_lens is not None and md.seq_lens.tolist() == [5, 2]


def test_no_tables_means_no_per_group_metadata() -> None:
    backend = MHA()
    md = backend.init_decode_metadata(None, i32([5, 4]))
    assert md.page_tables is None and md.out_cache_locs is None
    md = backend.init_extend_metadata(None, [2, 0], [3, 2])
    assert md.page_tables is None and md.out_cache_locs is None


def test_each_group_at_its_own_granularity() -> None:
    backend = MHA([GroupSpec("small", "full", 2), GroupSpec("large", "full", 4)])
    md = backend.init_decode_metadata({"small": i32([[1, 2, 3]]), "large": i32([[6, 7]])}, i32([5]))
    assert md.out_cache_locs["small"].tolist() == [6] and md.out_cache_locs["large"].tolist() == [28]
    md = backend.init_extend_metadata({"small": i32([[10, 11, 12]]), "large": i32([[20, 21]])}, [3], [3])
    assert md.out_cache_locs["small"].tolist() == [23, 24, 25]
    assert md.out_cache_locs["large"].tolist() == [83, 84, 85]


class OffByKernels(TorchKernels):
    """A broken location kernel: every extend location shifted by ``shift`` slots."""

    grouped_extend_locs = None  # the optional fast path would bypass the stacked kernel this class changes

    def __init__(self, shift: int) -> None:
        self.shift = shift

    def stacked_extend_locs(self, tables, widths, page_sizes, rows, positions, out) -> None:
        super().stacked_extend_locs(tables, widths, page_sizes, rows, positions, out)
        out[:, : rows.shape[0]] += self.shift


def test_debug_checker_is_gated_by_the_env_var(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream: sliding [[0,2,3,-1]] at ps 2; [1] -> null page, [18] (page 9) -> escapes, [4,5,6] pass."""
    specs = [GroupSpec("sliding_attention", "sliding", 2, window=1)]
    table = {"sliding_attention": i32([[0, 2, 3, -1]])}
    monkeypatch.delenv("KVTABLE_DEBUG", raising=False)
    ok = MHA(specs).init_extend_metadata(table, [2], [3])
    assert ok.out_cache_locs["sliding_attention"].tolist() == [4, 5, 6]
    silent = MHA(specs, kernels=OffByKernels(-4)).init_extend_metadata(table, [2], [1])
    assert silent.out_cache_locs["sliding_attention"].tolist() == [0]  # gate off: the bad write passes
    monkeypatch.setenv("KVTABLE_DEBUG", "1")
    assert MHA(specs).init_extend_metadata(table, [2], [3]).out_cache_locs["sliding_attention"].tolist() == [4, 5, 6]
    with pytest.raises(ContractViolation, match=r"\[D1 own-page-write\] group 'sliding_attention'.*null page"):
        MHA(specs, kernels=OffByKernels(-3)).init_extend_metadata(table, [2], [1])
    with pytest.raises(ContractViolation, match=r"D1.*writes page 9 \(no live row\)"):
        MHA(specs, kernels=OffByKernels(14)).init_extend_metadata(table, [2], [1])


def test_strong_checker_catches_what_membership_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream passes G 4, table [[2,3]], locations [11, 15]: both pages are in the table. Ours asks
    for positions 6, 7 of a verify at seq 8 (slots 14, 15) and names the wrong slot 11 (position 6)."""
    monkeypatch.setenv("KVTABLE_DEBUG", "1")
    specs = [GroupSpec("wide", "full", 4)]
    backend = MHA(specs, kernel_page_size=4, spec_num_tokens=2)
    md = backend.init_decode_metadata({"wide": i32([[2, 3]])}, i32([8]), n=2)
    assert md.out_cache_locs["wide"].tolist() == [14, 15]
    from kvtable.impl import check_write_locs
    from kvtable.reference import Batch

    with pytest.raises(ContractViolation, match=r"\[D1 own-page-write\] row 0 col 1: position 6 writes page 2"):
        check_write_locs(i32([[2, 3]]), i32([11, 15]), Batch((8,), mode="verify", n=2), 4)


def test_selection_ladder_and_prefer_caller() -> None:
    backend = MHA()
    caller = i32([99, 100, 101])
    assert backend.select_out_cache_loc("full_attention", caller) is caller  # no metadata: the fallback
    assert backend.select_page_table("full_attention", caller) is caller
    backend.init_decode_metadata({"sliding_attention": i32(SLIDING[:1]), "full_attention": i32(FULL[:1])}, i32([5]))
    assert backend.select_out_cache_loc("full_attention", caller).tolist() == [6]
    assert backend.select_page_table("sliding_attention").tolist() == SLIDING[:1]
    with pytest.raises(KeyError, match=r"\['full_attention', 'sliding_attention'\]"):
        backend.select_out_cache_loc("zz", caller)
    single = {"only": i32([7])}
    assert backend.select_group(single, "") is single["only"]
    assert backend.select_group(single, "zz") is single["only"]
    draft = MHA(is_draft=True)
    draft.init_decode_metadata({"full_attention": i32(FULL[:1]), "sliding_attention": i32(SLIDING[:1])}, i32([5]))
    assert draft.select_out_cache_loc("full_attention", caller) is caller  # S2: drafts keep their own locations
    backend.init_decode_metadata(None, i32([5]))
    assert backend.select_out_cache_loc("full_attention", caller) is caller


def test_graph_loc_buffers() -> None:
    backend = MHA()
    runner = backend.init_graph_state(4)
    assert set(runner.loc_buffers) == {"full_attention", "sliding_attention"}
    _, locs2 = backend.capture_group_views(2, ["sliding_attention", "full_attention"])
    buffer = runner.loc_buffers["full_attention"]
    assert buffer.shape == (4,) and buffer.dtype == torch.int32
    _, locs3 = backend.capture_group_views(3, ["sliding_attention", "full_attention"])
    assert locs3["full_attention"].shape == (3,)
    assert locs2["full_attention"].data_ptr() == locs3["full_attention"].data_ptr()
    runner.table_stack.fill_(99)
    backend.replay_group_buffers(3, {"sliding_attention": i32(SLIDING + [[0] * 4]),
                                     "full_attention": i32(FULL + [[0] * 4])}, i32([5, 4, 1]))
    assert locs3["sliding_attention"].tolist() == [14, 13, 0]
    assert locs3["full_attention"].tolist() == [6, 17, 0]
    assert runner.table_buffers["full_attention"][3].tolist() == [99] * 4
    assert backend.capture_group_views(2, []) == (None, None)


# 7.2 test_cudagraph_per_group ---------------------------------------------------------------------------
def test_state_groups_are_shed() -> None:
    specs = (GroupSpec("full_attention", "full", 2), GroupSpec("state", "state", 1))
    backend = MHA(specs)
    md = backend.init_decode_metadata({"full_attention": i32([[1, 2], [3, 4]]), "state": i32([[0, 5], [0, 6]])},
                                      i32([3, 4]))
    assert set(md.out_cache_locs) == {"full_attention"} and md.out_cache_locs["full_attention"].tolist() == [4, 9]
    assert set(md.page_tables) == {"full_attention"}
    only_state = MHA((GroupSpec("state", "state", 1),))
    runner = only_state.init_graph_state(4)
    assert only_state.capture_group_views(2, ["state"]) == (None, None) and not runner.table_buffers
    with pytest.raises(StaleGraphState, match="published no cache groups"):
        only_state.replay_group_buffers(2, {"state": i32([[0, 5], [0, 6]])}, i32([3, 4]))
    with pytest.raises(StaleGraphState, match="published no cache groups"):
        MHA().replay_group_buffers(2, {"full_attention": i32(FULL)}, i32([3, 4]))


# 7.3 group tables unpack and locs kernels ---------------------------------------------------------------
def test_unpack_expands_logical_pages_per_group() -> None:
    """Deliberate difference: an in-row -1 stays -1 at ratio 2 (upstream: sub-pages 0, 1 of block 0)."""
    src = [[[3, 5, -1], [7, 9, 11]], [[13, 15, -1], [17, 19, 21]]]
    packed = i32([v for group in src for row in group for v in row])
    dst = torch.full((2, 2, 8), 7, dtype=torch.int32)
    TORCH_KERNELS.replay_fill(packed, i32([[0, 3, 2], [6, 3, 1]]), dst, 2, 2, -1)
    assert dst[0].tolist() == [[6, 7, 10, 11, -1, -1, -1, -1], [14, 15, 18, 19, 22, 23, -1, -1]]
    assert dst[1].tolist() == [[13, 15, -1, -1, -1, -1, -1, -1], [17, 19, 21, -1, -1, -1, -1, -1]]


@pytest.mark.parametrize(("actual_bs", "bs"), [(13, 13), (13, 16), (1, 1)])
def test_unpack_matches_per_group(actual_bs: int, bs: int) -> None:
    gen = torch.Generator().manual_seed(actual_bs * 100 + bs)
    widths = [32, 64, 64, 8]
    sources = [torch.randint(1, 5000, (actual_bs, w), generator=gen, dtype=torch.int32) for w in widths]
    offsets = [0]
    for s in sources[:-1]:
        offsets.append(offsets[-1] + s.numel())
    meta = i32([[o, w, 1] for o, w in zip(offsets, widths, strict=True)])
    dst = torch.full((len(widths), 32, 128), 7, dtype=torch.int32)
    TORCH_KERNELS.replay_fill(torch.cat([s.reshape(-1) for s in sources]), meta, dst, bs, actual_bs, -1)
    for g, (s, w) in enumerate(zip(sources, widths, strict=True)):
        assert torch.equal(dst[g, :actual_bs, :w], s)
        assert bool((dst[g, :actual_bs, w:] == -1).all())
        assert not dst[g, actual_bs:bs].any()
        assert bool((dst[g, bs:] == 7).all())


@pytest.mark.parametrize(("n", "want"), [
    (1, [[1379, 75, 1309], [739, 75, 669]]),
    (4, [[1376, 1377, 1378, 1379, 72, 73, 74, 75, 1306, 1307, 1308, 1309],
         [736, 737, 738, 739, 72, 73, 74, 75, 666, 667, 668, 669]]),
])
def test_locs_negative_page_routes_to_dummy(n: int, want: list[list[int]]) -> None:
    tables = torch.full((2, 8, 16), -1, dtype=torch.int32)
    tables[:, :, :2] = 5
    out = torch.full((2, 8 * 4), -7, dtype=torch.int32)
    TORCH_KERNELS.stacked_locs(tables, i32([16, 16]), i32([256, 128]), i32([100, 1100, 30]), out, 3, n)
    assert out[:, : 3 * n].tolist() == want
    assert bool((out[:, 3 * n:] == -7).all())


# 7.4 / 7.5 expansion ------------------------------------------------------------------------------------
def test_page_table_conversion() -> None:
    """Deliberate difference: holes and pads stay themselves (upstream [[6,7,10,11,0,1],[0,1,0,1,0,1]])."""
    ratio = page_ratio(128, 64)
    assert expand_table(i32([[3, 5, -1], [0, -1, -1]]), ratio, max_kernel_pages=6).tolist() == [
        [6, 7, 10, 11, -1, -1], [0, 0, -1, -1, -1, -1]]
    assert expand_table(i32([[0, 1, 3, -1]]), 2).tolist() == [[0, 0, 2, 3, 6, 7, -1, -1]]  # upstream [0,1,2,3,6,7,0,1]
    with pytest.raises(ContractViolation, match=r"\[E1 page-ratio\].*positive multiple"):
        page_ratio(96, 64)
    assert expand_table(i32([[3, 5, -1]]), page_ratio(64, 64)).tolist() == [[3, 5, -1]]


def test_narrow_expansion_writes_only_its_columns_in_place() -> None:
    """Deliberate difference: columns past max_kernel_pages keep their 99s (upstream's fused path zeroes them)."""
    buf = torch.full((3, 64), 99, dtype=torch.int32)
    table = torch.arange(1, 25, dtype=torch.int32).reshape(3, 8)
    got = expand_table(table, 4, max_kernel_pages=10, out=buf)
    assert got.shape == (3, 10) and got.data_ptr() == buf.data_ptr()
    assert got[0].tolist() == [4, 5, 6, 7, 8, 9, 10, 11, 12, 13]
    assert bool((buf[:, 10:] == 99).all())
    with pytest.raises(ContractViolation, match="alias"):
        expand_table(table, 1, out=table)


# 7.5 trtllm cache groups ----------------------------------------------------------------------------------
def test_trtllm_kernel_tables_and_eager_locations() -> None:
    specs = [GroupSpec("full_attention", "full", 128)]
    trt = TRT(specs, kernel_page_size=64, max_num_pages=6)
    assert trt.kernel_page_tables({"full_attention": i32([[3, 5, -1]])})["full_attention"].tolist() == [
        [6, 7, 10, 11, -1, -1]]  # upstream [6,7,10,11,0,1]: its pad became sub-pages of block 0
    trt = TRT(specs, kernel_page_size=64, max_num_pages=4)
    md = trt.init_decode_metadata({"full_attention": i32([[3, 5]])}, i32([129]))
    assert md.page_tables["full_attention"].tolist() == [[6, 7, 10, 11]]
    assert md.out_cache_locs["full_attention"].tolist() == [640]  # locations on the raw table: 5*128 + 0
    wide = TRT(specs, kernel_page_size=64, max_num_pages=6)
    md = wide.init_decode_metadata({"full_attention": i32([[3, 5]])}, i32([129]))
    assert md.page_tables["full_attention"].tolist() == [[6, 7, 10, 11, 0, 0]]  # TRT's tail pad 0


def test_trtllm_decode_extend_and_verify() -> None:
    specs = [GroupSpec("full_attention", "full", 64), GroupSpec("sliding_attention", "sliding", 64, window=64)]
    trt = TRT(specs, kernel_page_size=64, max_num_pages=2, spec_num_tokens=4)
    tables = {"full_attention": i32([[11, 12], [13, -1]]), "sliding_attention": i32([[21, 22], [23, -1]])}
    md = trt.init_decode_metadata(tables, i32([65, 3]))
    assert md.out_cache_locs["full_attention"].tolist() == [768, 834]
    assert md.out_cache_locs["sliding_attention"].tolist() == [1408, 1474]
    md = trt.init_extend_metadata({"full_attention": i32([[5, 6]]), "sliding_attention": i32([[5, 6]])}, [64], [2])
    assert md.out_cache_locs["full_attention"].tolist() == [384, 385]
    md = trt.init_decode_metadata(tables, i32([65, 64]), n=4)
    assert md.out_cache_locs["full_attention"].tolist() == [765, 766, 767, 768, 892, 893, 894, 895]
    # Deliberate difference: upstream clamps the seq-3 row and writes slot 832 twice; W2 forbids it.
    with pytest.raises(ContractViolation, match=r"\[W2 verify-loc\] row 1: real row has seq_len 3 < N=4"):
        trt.init_decode_metadata(tables, i32([65, 3]), n=4)


def test_trtllm_graph_replay_pads_tails_with_zero() -> None:
    trt = TRT([GroupSpec("full_attention", "full", 64)], kernel_page_size=64, max_num_pages=4, spec_num_tokens=4)
    runner = trt.init_graph_state(4)
    _, locs = trt.capture_group_views(4, ["full_attention"])
    src = {"full_attention": i32([[11, 12], [0, -1]])}
    trt.replay_group_buffers(4, src, i32([65, 1, 1, 1]))
    assert runner.table_buffers["full_attention"].tolist() == [[11, 12, 0, 0], [0, -1, 0, 0], [0] * 4, [0] * 4]
    assert locs["full_attention"][:2].tolist() == [768, 0]
    trt.replay_group_buffers(2, src, i32([65, 1]), 4, actual_bs=1)  # row 1 is padding: a live one would break W2
    assert runner.loc_buffers["full_attention"][:8].tolist() == [765, 766, 767, 768, 0, 0, 0, 0]
    big = TRT([GroupSpec("full_attention", "full", 128)], kernel_page_size=64, max_num_pages=4)
    runner = big.init_graph_state(2)
    big.replay_group_buffers(2, {"full_attention": i32([[3, 5], [0, -1]])}, i32([129, 1]))
    assert runner.table_buffers["full_attention"][0].tolist() == [6, 7, 10, 11]
    assert runner.table_buffers["full_attention"][1].tolist() == [0, 0, -1, -1]  # upstream [0, 1, 0, 1]
    assert runner.loc_buffers["full_attention"][:2].tolist() == [640, 0]


def test_tail_pad_is_minus_one_by_default_and_zero_for_trtllm() -> None:
    assert CacheGroupsMixin.table_tail_pad == -1 and TRT.table_tail_pad == 0
    for cls, pad in ((MHA, -1), (TRT, 0)):
        backend = cls([GroupSpec("full_attention", "full", 2)], max_num_pages=4)
        runner = backend.init_graph_state(2)
        backend.replay_group_buffers(1, {"full_attention": i32([[3]])}, i32([1]))
        assert runner.table_buffers["full_attention"][0].tolist() == [3, pad, pad, pad]


def test_stale_guard_messages() -> None:
    backend = MHA()
    backend.init_graph_state(4)
    with pytest.raises(StaleGraphState, match=r"\[G5 stale-guard\].*stale page tables"):
        backend.replay_group_buffers(2, None, i32([5, 4]))
    with pytest.raises(StaleGraphState, match=r"missing captured groups \['sliding_attention'\]"):
        backend.replay_group_buffers(2, {"full_attention": i32(FULL)}, i32([5, 4]))


def test_draft_frontier_reanchor() -> None:
    """Inkling MTP: k 4, G 2, table [7,8,9], frontier 6 -> positions 2..5 -> [16, 17, 18, 19]."""
    backend = MHA([GroupSpec("full_attention", "full", 2)], spec_num_tokens=4, is_draft=True)
    backend.init_decode_metadata({"full_attention": i32([[7, 8, 9]])}, i32([3]))
    md = backend.update_draft_forward_metadata(i32([6]))
    assert md.out_cache_locs["full_attention"].tolist() == [16, 17, 18, 19] and md.seq_lens.tolist() == [6]


def test_reanchor_over_expanded_tables_uses_the_consumer_page_size() -> None:
    """Upstream's latent bug (section 2.4): it divides kernel-unit tables by G. Ours divides by K, so a
    G 4 / K 2 draft re-anchored to frontier 6 writes block slots 7*4+2 .. 8*4+1 either way (E3)."""
    backend = TRT([GroupSpec("full_attention", "full", 4)], kernel_page_size=2, max_num_pages=6, spec_num_tokens=4)
    md = backend.init_decode_metadata({"full_attention": i32([[7, 8, 9]])}, i32([3]))
    assert md.page_tables["full_attention"].tolist() == [[14, 15, 16, 17, 18, 19]]
    md = backend.update_draft_forward_metadata(i32([6]))
    assert md.out_cache_locs["full_attention"].tolist() == [30, 31, 32, 33]
