"""How the strategies draw: no choice for a single option, one draw per table entry, and no example drawn only
to be rejected."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable

import kvtable.strategies.draws as draws
from kvtable.reference import GroupSpec
from kvtable.strategies import Case, GraphCase, WriteLocCase, cases, graph_cases, write_loc_cases
from kvtable.strategies.batches import PAGE_LIMIT, draw_entry
from kvtable.strategies.draws import between, pick

_ONE_FULL = (GroupSpec("full0", "full", 1),)
FEW = settings(max_examples=60, database=None, deadline=None, suppress_health_check=list(HealthCheck))


def _never(strategy: st.SearchStrategy) -> None:
    raise AssertionError(f"drew {strategy!r} for a single option")


def test_a_single_option_is_not_drawn() -> None:
    assert pick(_never, ("only",)) == "only"
    assert repr(between(3, 3)) == "just(3)" and repr(between(3, 4)).startswith("integers(")


def test_an_empty_sequence_still_rejects_the_example() -> None:
    @FEW
    @given(st.data())
    def drawn(data: st.DataObject) -> None:
        pick(data.draw, ())
        raise AssertionError("pick returned from an empty sequence")

    with pytest.raises(Unsatisfiable):
        drawn()


@pytest.fixture
def rejections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every pick from an empty sequence (an example drawn only to be rejected) while the test ran."""
    failed: list[str] = []

    def watched(module):
        original = module.assume

        def assume(condition: object) -> bool:
            if not condition:
                failed.append(module.__name__)
            return original(condition)

        monkeypatch.setattr(module, "assume", assume)

    watched(draws)
    return failed


def test_foreign_pages_are_drawn_not_rejected(rejections: list[str]) -> None:
    @FEW
    @given(write_loc_cases(corrupt=True, corruptions=("foreign page",)))
    def drawn(wc: WriteLocCase) -> None:
        assert wc.how == "foreign page" and wc.clause == "D1"

    drawn()
    # a draw whose rows share every page has no other row's page to use: 1-17 of 60 over seeds 0-19 (Hypothesis
    # picks the seed per run here); before, a third to a half of these draws (one live row, or a token picked before
    # its pages were known) were rejected
    assert len(rejections) <= 20, rejections


def test_graph_replays_are_drawn_not_rejected(rejections: list[str]) -> None:
    @FEW
    @given(graph_cases())
    def drawn(gc: GraphCase) -> None:
        assert 1 <= gc.replay.tokens_per_req <= gc.setup.spec_n

    drawn()
    assert rejections == []


_ENTRIES = st.composite(lambda draw: draw_entry(draw, 2))()


def test_one_draw_per_table_entry_covers_every_kind_and_shrinks_to_the_pad() -> None:
    """Each kind of entry is drawn, and shrinks to the smallest of its kind (the pad, page 0, the first real page,
    the low end of a range); a large page is found, whatever value of its span the shrinker stops at."""
    top = PAGE_LIMIT // 2 - 1
    assert find(_ENTRIES, lambda e: True) == -1
    assert find(_ENTRIES, lambda e: e >= 0) == 0
    assert find(_ENTRIES, lambda e: e >= 1) == 1
    assert find(_ENTRIES, lambda e: 30 <= e <= 64) == 30
    assert 64 < find(_ENTRIES, lambda e: e > 64) <= top
    assert 64 < find(_ENTRIES, lambda e: e > 64 and e <= top - 64) <= top - 64


def test_a_groups_family_and_ratio_and_the_state_group_shrink_together() -> None:
    simplest = find(cases(), lambda c: True)
    assert [(s.family, s.block_granularity // simplest.kernel_page_size) for s in simplest.specs] == [("full", 1)]
    table = simplest.tables[simplest.specs[0].group_id]  # no rows past bs, no spare column, small pages, pad -1
    assert simplest.tail_pad == -1 and len(table) == simplest.batch.bs and len(table[0]) == 1 and table[0][0] < 2**20
    spare = find(cases(), lambda c: any(len(c.tables[s.group_id][0]) > 1 for s in c.attention))
    # one group two columns wide (how many rows are left depends on where the shrinker stops, not asserted)
    assert [len(t[0]) for t in spare.tables.values()] == [2]
    assert find(cases(), lambda c: any(p > 2**20 for t in c.tables.values() for r in t for p in r))
    with_state = find(cases(), lambda c: any(s.is_state for s in c.specs))
    assert [s.block_granularity for s in with_state.specs if s.is_state] == [0]
    assert find(cases(), lambda c: any(s.is_state and s.block_granularity > 0 for s in c.specs))
    sliding = find(cases(), lambda c: any(s.family == "sliding" and s.block_granularity > c.kernel_page_size
                                          for s in c.specs))
    assert [s.family for s in sliding.specs] == ["sliding"]


def _shares_a_page(case: Case) -> bool:
    table = case.tables[case.attention[0].group_id]
    return any(p > 0 and p in table[row - 1] for row in range(1, case.batch.live_rows) for p in table[row])


def test_rows_share_prefix_pages_in_one_draw_and_shrink_to_none() -> None:
    shared = find(cases(modes=("decode",), specs=_ONE_FULL, kernel_page_size=1), _shares_a_page)
    # how many rows the shrinker leaves depends on the constants Hypothesis pools from the modules imported
    # before it, so only the shape is asserted: rows that share a page
    assert _shares_a_page(shared) and shared.batch.live_rows >= 2
    assert not _shares_a_page(find(cases(modes=("decode",), specs=_ONE_FULL, kernel_page_size=1, min_live=3),
                                   lambda c: True))
