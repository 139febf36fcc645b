"""The notes under a report: failures of tiers above the run's level, one line each, or summarized per clause.

Under a profile whose engine leaves validation to its scheduler (``Profile.validates == "scheduler"``), every
strictness note is a refusal the backend need not make: they are summarized per clause (how many, in which
properties, one example) instead of listed one by one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvtable.backends.profiles import get_profile
from kvtable.conformance.levels import STRICTNESS


def _scheduler_validates(profile: str) -> bool:
    try:
        return not get_profile(profile).backend_validates
    except KeyError:  # a profile built in code (dataclasses.replace) has no registered name
        return False


def _line(prop: str, failure: Any) -> str:
    return f"note [{failure.tier}] {prop} ({failure.clause}): {failure.kind}: {failure.message.splitlines()[0]}"


def note_lines(results: Sequence[Any], profile: str) -> list[str]:
    """One line per note, the strictness notes per clause where the profile's scheduler validates."""
    notes = [(r.property, f) for r in results for f in r.notes]
    if not _scheduler_validates(profile):
        return [_line(prop, f) for prop, f in notes]
    lines = [_line(prop, f) for prop, f in notes if f.tier != STRICTNESS]
    by_clause: dict[str, list[tuple[str, Any]]] = {}
    for prop, f in notes:
        if f.tier == STRICTNESS:
            by_clause.setdefault(f.clause, []).append((prop, f))
    for clause, items in by_clause.items():
        prop, first = items[0]
        props = ", ".join(dict.fromkeys(p for p, _ in items))
        example = first.message.splitlines()[0].split(" (profile ")[0]
        lines.append(f"note [strictness] {clause}: {len(items)} missing or unnamed refusal(s) in {props}; "
                     f"validating is the scheduler's job under profile {profile!r}; e.g. {prop}: {first.kind}: "
                     f"{example}")
    return lines
