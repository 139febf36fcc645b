"""The trace judge's numpy fast path (``judge.fast_clear``) clears a location step only where the reference clears
it too: random steps under every profile, the reference's own locations and each perturbed, on the edges too
(rows shorter than N, prefixes past the length or negative, no live row, tables without columns, holes and pads).
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvtable.backends.profiles import PROFILES
from kvtable.errors import ContractViolation
from kvtable.reference.safety import token_positions
from kvtable.trace.judge import _judge_by_reference, fast_clear, reference_locs, step_tokens
from kvtable.trace.store import GroupStep, Step

KINDS = ("decode", "verify", "reanchor", "extend", "replay")
MANY = settings(max_examples=600, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@st.composite
def steps(draw: st.DrawFn) -> tuple[str, Step]:
    """A profile and a one-group location step: small tables of pads, holes and pages; lengths on both sides of
    the table's reach; locations the reference's own (kept or perturbed) or drawn freely."""
    profile = draw(st.sampled_from(sorted(PROFILES)))
    kind = draw(st.sampled_from(KINDS))
    ps = draw(st.sampled_from((1, 2, 4)))
    bs, width = draw(st.integers(0, 4)), draw(st.integers(0, 4))
    entries = st.one_of(st.sampled_from((-1, 0)), st.integers(1, 12))
    table = np.array([[draw(entries) for _ in range(width)] for _ in range(bs)], dtype=np.int32).reshape(bs, width)
    n = 1 if kind == "decode" else draw(st.integers(1, 3))
    reach = width * ps + 2
    seq = np.array([draw(st.integers(0, reach)) for _ in range(bs)], dtype=np.int64)
    prefix = None
    if kind == "extend":
        prefix = np.array([draw(st.integers(-1, int(s) + 1)) for s in seq], dtype=np.int64)
    actual_bs = draw(st.one_of(st.none(), st.integers(0, bs))) if kind in ("verify", "replay") else None
    step = Step(0, kind, n=n, actual_bs=actual_bs, seq_lens=seq, prefix_lens=prefix,
                groups={"g": GroupStep(ps, table=table)})
    try:
        locs = reference_locs(PROFILES[profile], "verify" if kind == "replay" else kind, table.tolist(), step, ps)
    except ContractViolation:
        locs = [draw(st.integers(-1, 13 * ps)) for _ in range(draw(st.integers(0, 6)))]
    how = draw(st.sampled_from(("kept", "one changed", "one shifted", "one at its page's start", "one copied",
                                "one dropped", "free")))
    if how == "one changed" and locs:
        locs[draw(st.integers(0, len(locs) - 1))] = draw(st.integers(-1, 13 * ps))
    elif how == "one shifted" and locs:
        locs[draw(st.integers(0, len(locs) - 1))] += draw(st.sampled_from((-1, 1)))
    elif how == "one at its page's start" and locs:
        k = draw(st.integers(0, len(locs) - 1))
        locs[k] -= locs[k] % ps
    elif how == "one copied" and len(locs) > 1:
        i, j = draw(st.integers(0, len(locs) - 1)), draw(st.integers(0, len(locs) - 1))
        locs[i] = locs[j]
    elif how == "one dropped" and locs:
        locs = locs[:-1]
    elif how == "free":
        locs = [draw(st.integers(-1, 13 * ps)) for _ in range(len(locs))]
    step.groups["g"].locs = np.array(locs, dtype=np.int64)
    return profile, step


def _fast(profile: str, step: Step) -> bool:
    group = step.groups["g"]
    tokens = step_tokens(step.kind, step.seq_lens, step.n, step.prefix_lens, step.actual_bs)
    return fast_clear(PROFILES[profile], group.table, group.locs, tokens, group.page_size, step.kind, step.n,
                      step.seq_lens)


def _step(kind: str, table: list[list[int]], seq: list[int], locs: list[int], *, n: int = 1, ps: int = 2,
          prefix: list[int] | None = None, actual_bs: int | None = None) -> tuple[str, Step]:
    group = GroupStep(ps, table=np.array(table, dtype=np.int32).reshape(len(table), -1),
                      locs=np.array(locs, dtype=np.int64))
    return "kvtable", Step(0, kind, n=n, actual_bs=actual_bs, seq_lens=np.array(seq, dtype=np.int64),
                           prefix_lens=None if prefix is None else np.array(prefix, dtype=np.int64),
                           groups={"g": group})


@MANY
@given(steps())
@example(_step("verify", [[3, 4]], [1], [6, 6], n=2))  # a row shorter than N: the reference clamps it
@example(_step("extend", [[3, 4]], [2], [], prefix=[3]))  # a prefix past the length
@example(_step("verify", [[3, 4]], [2], [0, 0], n=2, actual_bs=0))  # no live row
@example(_step("decode", [[]], [1], [0]))  # a table without columns
@example(_step("decode", [[0, 4]], [1], [0]))  # a hole where the token writes
@example(_step("decode", [[3], [3]], [1, 1], [6, 6]))  # two rows writing one slot (D2)
def test_the_fast_path_clears_only_what_the_reference_clears(arg: tuple[str, Step]) -> None:
    profile, step = arg
    if _fast(profile, step):
        assert _judge_by_reference(PROFILES[profile], step, "g", step.kind, step.groups["g"].locs) == []


@MANY
@given(steps())
def test_the_fast_tokens_are_the_references(arg: tuple[str, Step]) -> None:
    """``step_tokens`` builds ``reference.safety.token_positions``'s list as arrays (a padded row's position left
    unread)."""
    _, step = arg
    mode = "verify" if step.kind == "replay" else step.kind
    prefix = None if step.prefix_lens is None else step.prefix_lens.tolist()
    want = token_positions(mode, step.seq_lens.tolist(), n=step.n, prefix_lens=prefix, actual_bs=step.actual_bs)
    got = step_tokens(step.kind, step.seq_lens, step.n, step.prefix_lens, step.actual_bs)
    assert [(int(r), int(p) if r < got.live else None) for r, p in zip(got.rows, got.pos, strict=True)] == want


def test_the_fast_path_clears_the_references_own_locations_on_real_pages() -> None:
    """Not a stub: a valid decode, verify and extend over real pages are cleared without the reference."""
    cases = [_step("decode", [[3, 4], [5, 6]], [3, 1], [8, 10]),
             _step("verify", [[3, 4]], [4], [8, 9], n=2),
             _step("extend", [[3, 4]], [4], [7, 8, 9], prefix=[1])]
    assert [_fast(profile, step) for profile, step in cases] == [True, True, True]
