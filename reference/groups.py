"""S1-S2: which group's table and which write locations a layer uses."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def select_group(entries: Mapping[str, T], group_id: str | None) -> T:
    """S1 group-select: the layer's own group; the sole group for an empty or unknown id; else KeyError."""
    if group_id and group_id in entries:
        return entries[group_id]
    if len(entries) == 1:
        return next(iter(entries.values()))
    raise KeyError(f"[S1 group-select] no cache group {group_id!r}; groups are {sorted(entries)}")


def select_locs(per_group: Mapping[str, T] | None, group_id: str | None, caller: T,
                *, prefer_caller: bool = False) -> T:
    """S2 loc-select: the caller's locations for draft chains or when no per-group locations exist."""
    if prefer_caller or per_group is None:
        return caller
    return select_group(per_group, group_id)
