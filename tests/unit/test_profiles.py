"""Engine profiles: each convention field maps the reference's values as the engine it models does."""

from __future__ import annotations

import pytest
import torch
from hand_vectors import FULL, SLIDING, SPECS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvtable import ContractViolation
from kvtable.backends.profiles import ALIASES, ANY_DOMAIN, PROFILES, Profile, get_profile
from kvtable.reference import GraphModel, GroupSpec
from kvtable.strategies import cases
from kvtable.strategies.domain import drawing
from kvtable.strategies.kernels import Layout, fill_cases
from kvtable.strategies.unsafe import UNSAFE_KINDS, unsafe_cases

TABLES = {"sliding_attention": SLIDING, "full_attention": FULL}


def test_every_engine_has_a_profile_and_the_old_names_still_resolve() -> None:
    assert sorted(PROFILES) == ["kvtable", "sglang", "tokenspeed", "transformers", "trtllm", "vllm"]
    assert get_profile("vllm-pad-slot") is PROFILES["vllm"]
    assert get_profile("tokenspeed") is PROFILES["tokenspeed"]
    assert set(ALIASES) == {"vllm-pad-slot"}
    with pytest.raises(KeyError, match="aliases"):
        get_profile("vllm-v3")


@pytest.mark.parametrize("name", ["vllm", "sglang", "tokenspeed", "trtllm", "transformers"])
def test_every_engine_profile_names_the_code_it_models(name: str) -> None:
    details = PROFILES[name].details
    assert ".py" in details and "``" in details


def test_a_field_outside_its_choices_is_refused() -> None:
    with pytest.raises(ValueError, match="loc_dtype must be one of"):
        Profile("x", "y", loc_dtype="int16")  # type: ignore[arg-type]


def test_the_vllm_profile_states_vllms_conventions() -> None:
    vllm = PROFILES["vllm"]
    assert (vllm.loc_dtype, vllm.tail_pad, vllm.pad_slot, vllm.loc_buffer_tail) == ("int64", 0, -1, -1)
    assert not vllm.backend_validates and not vllm.scrubs_dummy_rows
    assert vllm.accepts_loc_dtype(torch.int64) and vllm.accepts_loc_dtype(torch.int32)
    assert not PROFILES["kvtable"].accepts_loc_dtype(torch.int64)


def test_pad_slot_replaces_only_padded_rows_tokens() -> None:
    padded = [FULL[0], [0, 0, 0, 0]]
    assert PROFILES["vllm"].verify_locs(padded, [4, 1], 2, 2, actual_bs=1) == [4, 5, -1, -1]
    assert PROFILES["kvtable"].verify_locs(padded, [4, 1], 2, 2, actual_bs=1) == [4, 5, 0, 0]


def test_a_short_verify_row_clamps_under_tokenspeed_and_is_refused_by_kvtable() -> None:
    assert PROFILES["tokenspeed"].verify_locs([[5, 6]], [1], 2, 3) == [10, 10, 10]
    with pytest.raises(ContractViolation, match="W2"):
        PROFILES["kvtable"].verify_locs([[5, 6]], [1], 2, 3)


def test_subpage_expansion_maps_holes_and_pads_to_sub_pages_and_the_tail_to_0() -> None:
    """tokenspeed's ``page_table`` vectors: G 128, K 64 (r 2), six kernel columns."""
    ts = PROFILES["tokenspeed"]
    assert ts.expand_table([[3, 5, -1], [0, -1, -1]], 2, max_kernel_pages=6) == [[6, 7, 10, 11, 0, 1],
                                                                               [0, 1, 0, 1, 0, 1]]
    assert ts.expand_table([[0, 1, 3, -1]], 2) == [[0, 1, 2, 3, 6, 7, 0, 1]]
    assert ts.expand_table([[3]], 4, max_kernel_pages=6) == [[12, 13, 14, 15, 0, 0]]
    assert PROFILES["kvtable"].expand_table([[3]], 4, max_kernel_pages=6) == [[12, 13, 14, 15, -1, -1]]
    assert ts.expand_table([[3, -1]], 1) == [[3, -1]]  # ratio 1 copies as it stands ...
    assert ts.expand_table([[3, -1]], 1, max_kernel_pages=4) == [[3, -1, 0, 0]]  # ... and leaves the rest 0


def test_profile_replay_rewrites_the_location_tail_like_vllm() -> None:
    graph = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2)
    PROFILES["vllm"].replay(graph, 2, TABLES, [5, 4])
    assert graph.groups["full_attention"].locs == [6, 17, -1, -1]
    sglang = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2)
    sglang.groups["full_attention"].locs[:] = [9, 9, 9, 9]
    PROFILES["sglang"].replay(sglang, 2, TABLES, [5, 4])
    assert sglang.groups["full_attention"].locs == [6, 17, 9, 9]  # SGLang zero-fills only when bs != raw_bs
    PROFILES["sglang"].replay(sglang, 2, TABLES, [5, 4], actual_bs=1)
    assert sglang.groups["full_attention"].locs == [6, 1, 0, 0]  # padded: the padded token on the sink page 0


def test_bs0_replay_and_extra_groups_follow_the_profile() -> None:
    extra = {**TABLES, "draft_attention": FULL}
    for name in ("tokenspeed", "trtllm"):
        graph = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2)
        PROFILES[name].replay(graph, 0, TABLES, [])
        assert graph.groups["full_attention"].locs == [0, 0, 0, 0]
        PROFILES[name].replay(graph, 2, extra, [5, 4])
        assert graph.groups["full_attention"].locs[:2] == [6, 17]
    graph = GraphModel(SPECS, max_bs=4, max_kernel_pages=4, kernel_page_size=2)
    with pytest.raises(ContractViolation, match="G3"):
        PROFILES["kvtable"].replay(graph, 0, TABLES, [])
    with pytest.raises(ContractViolation, match="G5.*uncaptured"):
        PROFILES["kvtable"].replay(graph, 2, extra, [5, 4])


def test_graph_replay_under_tokenspeed_expands_with_sub_pages() -> None:
    specs = (GroupSpec("full_attention", "full", 128),)
    graph = GraphModel(specs, max_bs=2, max_kernel_pages=6, kernel_page_size=64)
    PROFILES["tokenspeed"].replay(graph, 2, {"full_attention": [[3, 5], [0, -1]]}, [129, 1], actual_bs=1)
    assert graph.groups["full_attention"].table == [[6, 7, 10, 11, 0, 0], [0] * 6]
    assert graph.groups["full_attention"].locs == [640, 0]


def test_describe_lists_every_convention() -> None:
    text = PROFILES["vllm"].describe()
    for field in ("loc_dtype = 'int64'", "tail_pad = 0", "pad_slot = -1", "validates = 'scheduler'"):
        assert field in text


def test_the_graph_model_clamps_short_live_rows_only_under_clamping_profiles() -> None:
    tables = {"sliding_attention": SLIDING, "full_attention": FULL}
    clamped = PROFILES["tokenspeed"].graph_model(SPECS, max_bs=2, max_kernel_pages=4, kernel_page_size=2, spec_n=3)
    PROFILES["tokenspeed"].replay(clamped, 2, tables, [2, 4], 3)
    assert clamped.groups["full_attention"].locs[:3] == [2, 2, 3]  # position 0 written twice, as tokenspeed does
    refusing = PROFILES["kvtable"].graph_model(SPECS, max_bs=2, max_kernel_pages=4, kernel_page_size=2, spec_n=3)
    with pytest.raises(ContractViolation, match="W2"):
        PROFILES["kvtable"].replay(refusing, 2, tables, [2, 4], 3)


def test_vllms_writer_drops_every_negative_slot_and_kvtables_writes_it() -> None:
    """vLLM's ``reshape_and_cache*`` return early for a slot < 0: -8 (a -1 block at page size 8) is no write."""
    tokens = [(0, 0)]
    assert PROFILES["vllm"].unsafe_writes([[-1]], [-8], tokens, 8) == []
    [bad] = PROFILES["kvtable"].unsafe_writes([[-1]], [-8], tokens, 8)
    assert (bad.row, bad.token, bad.loc) == (0, 0, -8) and "negative slot" in bad.reason
    assert PROFILES["vllm"].unsafe_writes([[5]], [7 * 8], tokens, 8)[0].reason.startswith("another page")


def test_plus_any_keeps_the_profile_with_the_wide_domain() -> None:
    wide = get_profile("vllm+any")
    assert (wide.name, wide.domain, wide.writer, wide.pad_slot) == ("vllm+any", ANY_DOMAIN, "skips-negative", -1)
    assert PROFILES["vllm"].domain.tail_pads == (0,) and not PROFILES["vllm"].domain.negative_ids


@settings(max_examples=40, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_the_strategies_draw_no_negative_id_under_the_vllm_domain(data: st.DataObject) -> None:
    with drawing(PROFILES["vllm"].domain):
        case = data.draw(cases())
        unsafe = data.draw(unsafe_cases(UNSAFE_KINDS[data.draw(st.sampled_from([0, 1, 2]))]))
    for drawn in (case, unsafe.case):
        assert drawn.tail_pad == 0
        assert all(v >= 0 for s in drawn.attention for row in drawn.tables[s.group_id] for v in row)


def test_a_padded_decode_maps_its_dummy_rows_to_the_pad_slot() -> None:
    assert PROFILES["vllm"].decode_locs([[5], [0]], [1, 1], 2, actual_bs=1) == [10, -1]
    assert PROFILES["kvtable"].decode_locs([[5], [0]], [1, 1], 2, actual_bs=1) == [10, 0]


@settings(max_examples=30, database=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_the_fill_kernel_gets_no_strided_meta_under_the_tokenspeed_domain(data: st.DataObject) -> None:
    """tokenspeed's ``_try_packed_group_unpack`` builds a fresh contiguous ``[G, 3]`` meta every step."""
    with drawing(PROFILES["tokenspeed"].domain):
        case = data.draw(fill_cases())
    assert all(case.layouts[name] == Layout((0,) * dims) for name, dims in (("packed", 1), ("meta", 2), ("dst", 3)))


def test_the_transformers_profile_keeps_sliding_groups_as_rings_and_writes_its_trash_as_the_pad_slot() -> None:
    tf = PROFILES["transformers"]
    assert (tf.sliding_layout, tf.loc_dtype, tf.tail_pad, tf.pad_slot, tf.writer) == ("ring", "int64", 0, -1,
                                                                                       "skips-pad")
    assert {p.sliding_layout for name, p in PROFILES.items() if name != "transformers"} == {"holes"}
    assert tf.drops(-1) and not tf.drops(-2) and not tf.drops(0)
    # window 4, page size 2: a 6-token chunk from nothing stores positions 2..5 (2, 3 on page 4; 4, 5 wrap to
    # page 3); 0 and 1 go to the trash
    table, prefix, extend = [[3, 4]], [0], [6]
    assert PROFILES["kvtable"].ring_write_locs(table, prefix, extend, 2, 4) == [0, 0, 8, 9, 6, 7]
    assert tf.ring_write_locs(table, prefix, extend, 2, 4) == [-1, -1, 8, 9, 6, 7]
    assert tf.ring_read_locs(table, prefix, extend, 2, 4) == [-1] * 6
    assert tf.ring_unsafe(table, [-1, -1, 8, 9, 6, 7], [-1] * 6, prefix, extend, 2, 4) == []
    (bad,) = PROFILES["kvtable"].ring_unsafe(table, [-1, 0, 8, 9, 6, 7], [-1] * 6, prefix, extend, 2, 4)
    assert (bad.token, bad.loc) == (0, -1) and "not the pad slot" in bad.reason
