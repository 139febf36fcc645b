"""The safety oracle judges any output for any input: hand-derived tokens and verdicts, mode by mode."""

from __future__ import annotations

import pytest
from hand_vectors import FULL, SLIDING

from kvtable.reference import (
    UnsafeWrite,
    decode_locs,
    extend_locs,
    reanchor_locs,
    token_positions,
    unsafe_writes,
    verify_locs,
)

# Page size 4. Row 0 owns pages 3, 5; row 1 owns page 7; row 2 is a padded (dummy) row.
TABLE = [[3, 5, -1], [7, -1, -1], [0, 0, 0]]
DECODE = token_positions("decode", [6, 3, 1], actual_bs=2)  # row 0 pos 5, row 1 pos 2, row 2 padding


def _reasons(locs: list[int], tokens=DECODE, table=TABLE, **kwargs) -> list[str]:
    return [w.reason for w in unsafe_writes(table, locs, tokens, 4, **kwargs)]


def test_decode_positions_are_seq_len_minus_1_and_padded_rows_have_none() -> None:
    assert DECODE == [(0, 5), (1, 2), (2, None)]
    assert token_positions("decode", [0]) == [(0, -1)]


def test_verify_positions_are_token_major_clamped_and_padding_has_none() -> None:
    assert token_positions("verify", [65, 1], n=4, actual_bs=1) == [
        (0, 61), (0, 62), (0, 63), (0, 64), (1, None), (1, None), (1, None), (1, None)]
    # A live row shorter than N is not refused here: its positions clamp at 0 (W2's formula).
    assert token_positions("verify", [2], n=4) == [(0, 0), (0, 0), (0, 0), (0, 1)]


def test_reanchor_positions_end_at_the_frontier() -> None:
    assert token_positions("reanchor", [6, 1], n=4) == [(0, 2), (0, 3), (0, 4), (0, 5), (1, 0), (1, 0), (1, 0),
                                                         (1, 0)]


def test_extend_positions_follow_the_cpu_mirrors_even_when_broken() -> None:
    assert token_positions("extend", [5, 2], prefix_lens=[2, 0], extend_lens=[3, 2]) == [
        (0, 2), (0, 3), (0, 4), (1, 0), (1, 1)]
    assert token_positions("extend", [5], prefix_lens=[3]) == [(0, 3), (0, 4)]
    assert token_positions("extend", [0, 0], prefix_lens=[-2, 4], extend_lens=[1, -3]) == [(0, -2)]


def test_unknown_mode_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown mode 'prefill'"):
        token_positions("prefill", [1])


def test_own_slots_sink_and_pad_slot_are_allowed() -> None:
    assert _reasons([21, 30, 0]) == []  # 5*4 + 1, 7*4 + 2, the dummy row's slot 0 of page 0
    assert _reasons([3, 0, 2]) == []  # any slot of page 0 is the sink
    assert _reasons([-1, -1, -1], pad_slot=-1) == []


def test_a_write_into_another_rows_page_names_that_row() -> None:
    [write] = unsafe_writes(TABLE, [28, 30, 0], DECODE, 4, group="full")
    assert write == UnsafeWrite("full", 0, 0, 5, 28, "another page: wrote page 7 (row 1 col 0), its own page is 5")


def test_the_wrong_column_or_offset_of_the_own_row_is_unsafe() -> None:
    assert _reasons([13, 30, 0]) == ["another page: wrote page 3 (row 0 col 0), its own page is 5"]
    assert _reasons([22, 30, 0]) == ["wrong offset: wrote offset 2 of its own page 5, expected 1"]


def test_negative_slots_other_than_the_pad_are_unsafe() -> None:
    assert _reasons([-2, 30, 0], pad_slot=-1) == ["negative slot -2, not the pad slot"]
    assert _reasons([-1, 30, 0]) == ["negative slot -1, not the pad slot"]


def test_slots_past_the_pool_are_unsafe_even_in_the_own_page() -> None:
    assert _reasons([21, 30, 0], pool_pages=6) == ["past the pool: page 7 of a pool of 6 pages"]


def test_a_garbage_dummy_row_may_not_send_its_write_to_a_real_page() -> None:
    garbage = [[3, 5, -1], [7, -1, -1], [5, 0, 0]]
    assert _reasons([21, 30, 20], table=garbage) == ["a padded row writes page 5; padded rows own no slot"]
    assert _reasons([21, 30, 1], table=garbage) == []


def test_a_stale_seq_len_on_the_tail_pad_owns_no_slot() -> None:
    stale = token_positions("decode", [6, 6])  # row 1 position 5: column 1 is the tail pad -1
    assert _reasons([21, -3], tokens=stale) == ["negative slot -3, not the pad slot"]  # -1*4 + 1
    assert _reasons([21, 21], tokens=stale) == [
        "position 5 falls on entry -1 (a hole or pad, no own slot); it wrote page 5"]
    assert _reasons([21, 0], tokens=stale) == []  # masked into the sink


def test_positions_past_the_row_or_below_zero_own_no_slot() -> None:
    past = token_positions("decode", [6, 13])  # row 1 position 12: column 3 of a 3-column row
    assert _reasons([21, 30], tokens=past) == [
        "position 12 owns no slot (negative, or its column is outside the row); it wrote page 7"]
    empty = token_positions("decode", [6, 0])  # seq_len 0: position -1, the last slot of page 6
    assert _reasons([21, 27], tokens=empty) == [
        "position -1 owns no slot (negative, or its column is outside the row); it wrote page 6"]


def test_a_live_verify_row_shorter_than_n_may_rewrite_its_own_position_0() -> None:
    short = token_positions("verify", [2], n=4)
    assert _reasons([12, 12, 12, 13], tokens=short, table=[[3, 5]]) == []


def test_page_ids_at_the_int32_edge() -> None:
    table = [[2**29]]  # page 536870912 at page size 4: its first slot is 2^31
    tokens = token_positions("decode", [1])
    assert _reasons([2**31], tokens=tokens, table=table) == []  # an int64 location is exact
    assert _reasons([-(2**31)], tokens=tokens, table=table) == ["negative slot -2147483648, not the pad slot"]


def test_output_entries_past_the_last_token_may_only_be_sink_or_pad() -> None:
    [write] = unsafe_writes(TABLE, [21, 30, 0, 3, -1, 5], DECODE, 4, pad_slot=-1)
    assert (write.row, write.token, write.position, write.reason) == (
        None, 5, None, "no token writes this output entry")


def test_a_page_size_below_1_leaves_only_the_pad_slot() -> None:
    assert [w.reason for w in unsafe_writes(TABLE, [-1, 5], DECODE, 0, pad_slot=-1)] == [
        "page size 0 defines no slots"]


def test_objects_with_tolist_are_read_like_lists() -> None:
    class Listy(list):
        def tolist(self) -> list:
            return list(self)

    assert _reasons(Listy([28, 30, 0]), table=Listy(TABLE)) == [
        "another page: wrote page 7 (row 1 col 0), its own page is 5"]


@pytest.mark.parametrize("table", [SLIDING, FULL], ids=["sliding", "full"])
def test_the_references_own_locations_are_safe_in_every_mode(table: list[list[int]]) -> None:
    cases = [
        (decode_locs(table, [5, 4], 2), token_positions("decode", [5, 4])),
        (verify_locs(table, [5, 4], 2, 2), token_positions("verify", [5, 4], n=2)),
        (reanchor_locs(table, [5, 4], 2, 2), token_positions("reanchor", [5, 4], n=2)),
    ]
    assert all(unsafe_writes(table, locs, tokens, 2) == [] for locs, tokens in cases)
    full_extend = extend_locs(FULL, [2, 0], [3, 2], 2)
    assert unsafe_writes(FULL, full_extend, token_positions("extend", [5, 2], prefix_lens=[2, 0]), 2) == []
