"""Convention profiles: where an engine's padding convention differs from kvtable's, and how.

The conformance suite computes every expected value with ``kvtable.reference``; a profile then maps
that value to what an engine with another (documented, deliberate) convention produces. The default
``kvtable`` profile maps nothing. Select one with ``kvtable conform --profile NAME`` or
``pytest --kvtable-profile NAME``.

- ``vllm-pad-slot``: tokens of padded (dummy) rows get ``PAD_SLOT_ID = -1`` instead of slot 0 of the
  dummy page (W2 verify with ``actual_bs``, ``group_locs`` with ``batch.actual_bs``, G4 replay).
- ``tokenspeed``: block expansion maps a hole or pad to the sub-pages ``0 .. r-1`` of dummy block 0
  (E2, and the G3 replay fill at ``r > 1``), and a real verify row with ``seq_len < N`` clamps its
  positions at 0 instead of raising W2.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kvtable import reference
from kvtable.reference import Batch, GroupSpec
from kvtable.reference.model import Table
from kvtable.reference.tables import specs_by_id

__all__ = ["PROFILES", "Profile", "get_profile"]

PAD_SLOT_ID = -1


@dataclass(frozen=True)
class Profile:
    """One engine's conventions, as a map from the reference's outputs to the engine's."""

    name: str
    summary: str
    pad_slot: int | None = None
    """The location of a padded row's tokens; None keeps the reference's slot 0 of the dummy page."""
    subpage_holes: bool = False
    """Expansion at ``r > 1`` maps entries ``<= 0`` to sub-pages ``0 .. r-1`` instead of repeating them."""
    clamp_short_verify: bool = False
    """A real verify row with ``seq_len < N`` is clamped like a padded row instead of breaking W2."""

    # -- write locations ------------------------------------------------------------------------
    def pad_rows(self, locs: list[int], live_rows: int, tokens_per_row: int) -> list[int]:
        """Tokens of rows ``>= live_rows`` (fixed-count modes) become the pad slot, if the profile has one."""
        if self.pad_slot is None:
            return locs
        cut = live_rows * tokens_per_row
        return locs[:cut] + [self.pad_slot] * (len(locs) - cut)

    def decode_locs(self, table: Table, seq_lens: Sequence[int], page_size: int) -> list[int]:
        return reference.decode_locs(table, seq_lens, page_size)

    def verify_locs(self, table: Table, seq_lens: Sequence[int], page_size: int, n: int,
                    actual_bs: int | None = None) -> list[int]:
        if self.clamp_short_verify:
            reference.verify_locs(table, seq_lens, page_size, n, actual_bs=0)  # every check but W2's
            locs = reference.batch_locs(table, Batch(tuple(seq_lens), "verify", n, actual_bs=actual_bs), page_size)
        else:
            locs = reference.verify_locs(table, seq_lens, page_size, n, actual_bs=actual_bs)
        live = len(seq_lens) if actual_bs is None else actual_bs
        return self.pad_rows(locs, live, n)

    def reanchor_locs(self, table: Table, frontier: Sequence[int], page_size: int, n: int) -> list[int]:
        return reference.reanchor_locs(table, frontier, page_size, n)

    def extend_locs(self, table: Table, prefix_lens: Sequence[int], extend_lens: Sequence[int],
                    page_size: int) -> list[int]:
        return reference.extend_locs(table, prefix_lens, extend_lens, page_size)

    def group_locs(self, specs: Sequence[GroupSpec], tables: Mapping[str, Table], batch: Batch
                   ) -> dict[str, list[int]]:
        """Every non-state group's locations at its own block granularity (tables already valid)."""
        by_id = specs_by_id(specs)
        out = {}
        for gid, table in sorted(reference.shed_state_groups(by_id, tables).items()):
            locs = reference.batch_locs(table, batch, by_id[gid].block_granularity, group=gid)
            out[gid] = locs if batch.mode == "extend" else self.pad_rows(locs, batch.live_rows,
                                                                         batch.tokens_per_row)
        return out

    def accepts_short_verify(self) -> bool:
        return self.clamp_short_verify

    # -- expansion ------------------------------------------------------------------------------
    def subpages(self, expanded: Table, source: Table, ratio: int, live_rows: int) -> Table:
        """Entries expanded from a hole or pad of ``source`` become sub-pages ``0 .. r-1`` (tokenspeed)."""
        if not self.subpage_holes or ratio == 1:
            return expanded
        out = [list(r) for r in expanded]
        for row in range(min(live_rows, len(source), len(out))):
            for col, page in enumerate(source[row]):
                if page > 0:
                    continue
                for j in range(ratio):
                    if col * ratio + j < len(out[row]):
                        out[row][col * ratio + j] = j
        return out

    def expand_table(self, table: Table, ratio: int, *, max_kernel_pages: int | None = None,
                     tail_pad: int = -1, actual_bs: int | None = None) -> Table:
        expanded = reference.expand_table(table, ratio, max_kernel_pages=max_kernel_pages, tail_pad=tail_pad,
                                          actual_bs=actual_bs)
        return self.subpages(expanded, table, ratio, len(table) if actual_bs is None else actual_bs)

    # -- CUDA-graph buffers ---------------------------------------------------------------------
    def after_replay(self, model: reference.GraphModel, bs: int, tables: Mapping[str, Table],
                     tokens_per_req: int, actual_bs: int | None) -> None:
        """Rewrite the model's buffers after ``model.replay`` into the engine's convention, in place."""
        for gid, buffers in model.groups.items():
            src = tables[gid]
            live = min(len(src), bs, bs if actual_bs is None else actual_bs)
            buffers.table[:bs] = self.subpages(buffers.table[:bs], src, buffers.ratio, live)
            cut = bs * tokens_per_req
            buffers.locs[:cut] = self.pad_rows(buffers.locs[:cut], live, tokens_per_req)


PROFILES: dict[str, Profile] = {p.name: p for p in (
    Profile("kvtable", "the contract as written: dummy-row tokens write slot 0 of page 0; holes and pads "
            "stay holes and pads under expansion; a real verify row needs seq_len >= N"),
    Profile("vllm-pad-slot", "padded tokens get PAD_SLOT_ID -1 instead of the dummy page", pad_slot=PAD_SLOT_ID),
    Profile("tokenspeed", "expansion maps holes and pads to sub-pages 0..r-1 of dummy block 0; a real verify "
            "row with seq_len < N clamps instead of raising", subpage_holes=True, clamp_short_verify=True),
)}


def get_profile(name: str | Profile | None) -> Profile:
    """A profile by name (None: the default ``kvtable``)."""
    if isinstance(name, Profile):
        return name
    try:
        return PROFILES[name or "kvtable"]
    except KeyError:
        raise KeyError(f"no convention profile {name!r}; known: {sorted(PROFILES)}") from None
