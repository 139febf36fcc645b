"""S1/S2 through a backend's engine-facing adapter: which group's table and locations a layer gets.

A backend may offer ``cache_groups(specs, *, kernel_page_size, max_num_pages, spec_num_tokens, is_draft,
expand_tables, tail_pad)``: an object with impl's ``CacheGroupsMixin`` surface (``select_group``,
``init_decode_metadata``, ``init_extend_metadata``, ``update_draft_forward_metadata``,
``select_page_table``, ``select_out_cache_loc``). The properties drive it through a step and compare every
selection with the reference's ``select_group`` / ``select_locs`` over the reference's locations and
kernel-unit tables. A backend without ``cache_groups`` gets them reported not applicable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from hypothesis import strategies as st

from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.errors import Unsupported
from kvtable.reference import expand_table, reanchor_locs, select_group, select_locs
from kvtable.reference.expand import page_ratio
from kvtable.strategies import Case, CaseOptions, draw_case
from kvtable.strategies.draws import BOOLEANS, between, pick

CALLER = object()
"""The caller's own locations: what a draft chain, or a step without per-group locations, must get back."""
OTHER_IDS = ("", None, "ghost")
"""Layer group ids that name no group: the sole group serves, else S1's KeyError."""


def no_adapter(ctx: Context) -> str | None:
    """Why the adapter properties do not apply (None: the backend has ``cache_groups``)."""
    if callable(getattr(ctx.backend, "cache_groups", None)):
        return None
    return f"backend {getattr(ctx.backend, 'name', type(ctx.backend).__name__)!r} has no cache_groups adapter"


def _selected(what: str, clause: str, expect: Callable[[], Any], got: Callable[[], Any],
              same: Callable[[Any, Any], bool]) -> None:
    """The adapter's selection equals the reference's, or both raise S1's KeyError."""
    try:
        want: Any = expect()
    except KeyError:
        want = KeyError
    try:
        value: Any = got()
    except KeyError:
        value = KeyError
    except Unsupported:
        raise
    except Exception as err:  # a crash where the reference selects or raises KeyError
        raise Mismatch(clause, f"{what}: crashed with {type(err).__name__}: {err}") from err
    if (want is KeyError) != (value is KeyError) or (want is not KeyError and not same(value, want)):
        raise Mismatch(clause, f"{what}: got {_show(value)}, expected {_show(want)}")


def _show(value: Any) -> str:
    if value is KeyError:
        return "KeyError (S1)"
    if value is CALLER:
        return "the caller's locations"
    return repr(value.tolist() if isinstance(value, torch.Tensor) else value)


@st.composite
def _entries(draw: st.DrawFn) -> tuple[dict[str, int], str | None]:
    """1-3 groups' entries and a layer's group id: one of them, empty, None or unknown."""
    ids = ["full0", "swa1", "full2"][: draw(between(1, 3))]
    entries = {gid: 100 + i for i, gid in enumerate(ids)}
    return entries, pick(draw, (*ids, *OTHER_IDS))


def _group_select(ctx: Context, arg: tuple[dict[str, int], str | None]) -> None:
    entries, gid = arg
    adapter = ctx.backend.cache_groups([], kernel_page_size=1, max_num_pages=1)
    _selected(f"select_group({entries}, {gid!r})", "S1", lambda: select_group(entries, gid),
              lambda: adapter.select_group(entries, gid), lambda a, b: a == b)


@dataclass(frozen=True)
class Step:
    """One eager step through the adapter: a valid case, the adapter's settings and a draft frontier."""

    case: Case
    max_num_pages: int
    expand_tables: bool
    is_draft: bool
    spec_num_tokens: int


def _fewest_written(case: Case) -> int:
    """The fewest positions a row of the step writes, all at its end and in its private pages (T7): a draft
    chain re-anchored at the rows' lengths with at most this many tokens writes only there."""
    return min(case.extend_lens, default=0) if case.batch.mode == "extend" else case.batch.n


@st.composite
def _steps(draw: st.DrawFn) -> Step:
    """A valid step; the draft chain's ``spec_num_tokens`` stays within what every row writes, so its
    re-anchored positions lie in pages the row owns (a longer chain would write into shared prefix pages,
    which a valid draft never does)."""
    case = draw_case(draw, CaseOptions(modes=("decode", "verify", "extend"), padding=False, extra_rows=False))
    k = case.kernel_page_size
    widths = [len(case.tables[s.group_id][0]) * (s.block_granularity // k) for s in case.attention]
    return Step(case, max(widths) + draw(between(0, 2)), draw(BOOLEANS), draw(BOOLEANS),
                draw(between(1, max(_fewest_written(case), 1))))


def _kernel_tables(step: Step) -> dict[str, list[list[int]]]:
    """The reference's kernel-unit tables: expanded to ``max_num_pages`` when any group's ratio is above 1."""
    case, k = step.case, step.case.kernel_page_size
    ratios = {s.group_id: page_ratio(s.block_granularity, k) if step.expand_tables else 1 for s in case.attention}
    if all(r == 1 for r in ratios.values()):
        return {gid: case.tables[gid] for gid in ratios}
    return {gid: expand_table(case.tables[gid], r, max_kernel_pages=step.max_num_pages, tail_pad=case.tail_pad)
            for gid, r in ratios.items()}


def _select_per_step(ctx: Context, step: Step) -> None:
    """S1/S2 over one step's metadata: each layer's kernel-unit table and locations (the caller's for a
    draft chain), then again after re-anchoring a draft chain (W4 on the kernel-unit tables)."""
    case = step.case
    adapter = ctx.backend.cache_groups(list(case.specs), kernel_page_size=case.kernel_page_size,
                                       max_num_pages=step.max_num_pages, spec_num_tokens=step.spec_num_tokens,
                                       is_draft=step.is_draft, expand_tables=step.expand_tables,
                                       tail_pad=case.tail_pad)
    batch, tensors = case.batch, case.tensors()
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        adapter.init_extend_metadata(tensors, list(batch.prefix_lens), case.extend_lens)
    else:
        adapter.init_decode_metadata(tensors, case.seq_tensor(), n=batch.n, actual_bs=batch.actual_bs)
    tables = _kernel_tables(step)
    _check_layers(adapter, step, tables, ctx.profile.group_locs(list(case.specs), dict(case.tables), batch))
    if _fewest_written(case) >= 1:  # a draft chain re-anchors at each row's length, over positions the step wrote
        _check_draft(adapter, step, tables)


def _consumer_page_size(step: Step, gid: str) -> int:
    spec = step.case.spec(gid)
    return step.case.kernel_page_size if step.expand_tables else spec.block_granularity


def _check_draft(adapter: Any, step: Step, tables: Mapping[str, list[list[int]]]) -> None:
    """W4 through the adapter: each group's draft locations at its consumer page size, then S2 again."""
    frontier = list(step.case.batch.seq_lens)
    expected = {gid: reanchor_locs(t, frontier, _consumer_page_size(step, gid), step.spec_num_tokens)
                for gid, t in tables.items()}
    adapter.update_draft_forward_metadata(torch.tensor(frontier, dtype=torch.int32))
    _check_layers(adapter, step, tables, expected)


def _check_layers(adapter: Any, step: Step, tables: Mapping[str, list[list[int]]],
                  locs: Mapping[str, list[int]]) -> None:
    for gid in (*sorted(tables), *OTHER_IDS):
        _selected(f"select_page_table({gid!r})", "S1", partial(select_group, tables, gid),
                  partial(adapter.select_page_table, gid),
                  lambda a, b: isinstance(a, torch.Tensor) and a.tolist() == b)
        _selected(f"select_out_cache_loc({gid!r}) (draft: {step.is_draft})", "S2",
                  partial(select_locs, locs, gid, CALLER, prefer_caller=step.is_draft),
                  partial(adapter.select_out_cache_loc, gid, CALLER),
                  lambda a, b: a is b if b is CALLER else isinstance(a, torch.Tensor) and a.tolist() == b)


PROPERTIES = (
    Property("groups/select", "S1", "the adapter's select_group: the layer's own group, the sole group for an "
             "empty or unknown id, else KeyError", _entries(), _group_select, not_applicable=no_adapter),
    Property("groups/select-locs", "S2", "the adapter's per-layer table and locations after a step and after "
             "re-anchoring a draft chain: the layer's group's (S1), the caller's for a draft chain",
             _steps(), _select_per_step, not_applicable=no_adapter),
)
