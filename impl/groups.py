"""impl/'s own reading of the declared groups: well-formed specs (E1), state groups shed (T6), one table per
attention group (T1), and which group's table and locations a layer uses (S1, S2)."""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from kvtable.contract import GroupSpec, Specs
from kvtable.errors import ContractViolation

T = TypeVar("T")

def specs_by_id(specs: Specs) -> dict[str, GroupSpec]:
    """The declared groups keyed by id, each checked: a known family, E1 for an attention group's block
    granularity (a positive int), a window >= 1 for a sliding group and none for a full-attention one."""
    by_id: dict[Any, Any]  # what the caller passed, each spec and key checked below
    if isinstance(specs, Mapping):
        by_id = dict(specs)
        wrong = [(key, spec.group_id) for key, spec in by_id.items()
                 if isinstance(spec, GroupSpec) and key != spec.group_id]
        if wrong:
            raise ContractViolation("T1", f"specs key {wrong[0][0]!r} holds the GroupSpec of group {wrong[0][1]!r}: "
                                    "a mapping of specs is keyed by each spec's group_id", group=str(wrong[0][0]))
    elif isinstance(specs, Sequence) and not isinstance(specs, str):
        by_id = {getattr(spec, "group_id", None): spec for spec in specs}
        if len(by_id) != len(specs):
            ids = [getattr(spec, "group_id", None) for spec in specs]
            twice = next(gid for gid in ids if ids.count(gid) > 1)
            raise ContractViolation("T1", f"group id {twice!r} is declared twice", group=str(twice))
    else:
        raise ContractViolation("T1", f"group specs are a sequence or mapping of GroupSpec, got "
                                f"{type(specs).__name__}")
    for gid, spec in by_id.items():
        _check_spec(gid, spec)
    return by_id


def _check_spec(gid: Any, spec: object) -> None:
    if not isinstance(spec, GroupSpec):
        raise ContractViolation("T1", f"a group spec is a GroupSpec, got {type(spec).__name__}", group=str(gid))
    if spec.family not in ("full", "sliding", "state"):
        raise ValueError(f"group {gid!r}: unknown family {spec.family!r}")
    _check_layout(gid, spec)
    if spec.is_state:
        return
    if not _positive_int(spec.block_granularity):
        raise ContractViolation("E1", f"block granularity must be a positive int, got {spec.block_granularity!r}",
                                group=gid)
    if spec.family == "sliding" and not _positive_int(spec.window):
        raise ValueError(f"sliding group {gid!r} needs a window >= 1, got {spec.window!r}")
    if spec.family == "full" and spec.window is not None:
        raise ContractViolation("T4", f"a full-attention group reads every column from 0 and has no window, got "
                                f"{spec.window!r}; declare it sliding", group=gid)


def _check_layout(gid: Any, spec: GroupSpec) -> None:
    """A known layout, ``ring`` for a sliding group only; R1: a ring group's locations are ``ring_locs``' alone."""
    if spec.layout not in ("holes", "ring") or (spec.layout == "ring" and spec.family != "sliding"):
        raise ValueError(f"group {gid!r}: layout {spec.layout!r} (holes, or ring for a sliding group)")
    if spec.layout == "ring":
        raise ContractViolation("R1", "a ring group's locations come from ring_locs (R1-R3), not from the batch "
                                "calls", group=gid)


def _positive_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and int(value) >= 1


def shed_state_groups(specs: Mapping[str, GroupSpec], tables: Mapping[str, T]) -> dict[str, T]:
    """T6 state-shed: the tables of the groups not declared as state groups."""
    state = {gid for gid, spec in specs.items() if spec.is_state}
    return {gid: table for gid, table in tables.items() if gid not in state}


def check_group_ids(specs: Mapping[str, GroupSpec], tables: object) -> None:
    """T1 table-shape: the tables are a mapping with one entry per attention group and none for an undeclared one."""
    if not isinstance(tables, Mapping):
        raise ContractViolation("T1", f"tables are a mapping of group id to table, got {type(tables).__name__}")
    unknown = sorted(set(tables) - set(specs))
    if unknown:
        raise ContractViolation("T1", f"tables for undeclared groups {unknown}; declared: {sorted(specs)}")
    missing = sorted(gid for gid, spec in specs.items() if not spec.is_state and gid not in tables)
    if missing:
        raise ContractViolation("T1", f"no table for groups {missing}; every non-state group has one")


def select_group(entries: Mapping[str, T], group_id: str | None) -> T:
    """S1 group-select: the layer's own group's entry; the only entry for an empty or unknown id; else KeyError."""
    if group_id and group_id in entries:
        return entries[group_id]
    if len(entries) != 1:
        raise KeyError(f"[S1 group-select] no cache group {group_id!r} among {sorted(entries)}")
    (only,) = entries.values()
    return only


def select_locs(per_group: Mapping[str, T] | None, group_id: str | None, caller: T, *,
                prefer_caller: bool = False) -> T:
    """S2 loc-select: a draft chain (``prefer_caller``), or a step without per-group locations, keeps the caller's."""
    if per_group is None or prefer_caller:
        return caller
    return select_group(per_group, group_id)
