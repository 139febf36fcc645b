"""Which backend methods a property calls: a property needs only those, and runs on whichever of them a backend has.

``Property.needs`` lists the methods a property cannot run without (all of them); ``NeedsAny`` (its
``not_applicable``) the location calls it makes where present: it applies when the backend has one of
them, and an example whose mode the backend has no call for is discarded, never failed. ``unlocks`` is
the table of which operations unlock which properties.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import reject

from kvtable.backends import NoDebugMode
from kvtable.conformance.core import Context, Property
from kvtable.strategies.broken import variants

LONE = {"decode": "decode_locs", "verify": "verify_locs", "reanchor": "reanchor_locs", "extend": "extend_locs"}
"""The lone-table call of each mode."""
LOCS = ("group_locs", *LONE.values())


def has(ctx: Context, method: str) -> bool:
    """Whether the backend under test has ``method`` (a callable attribute)."""
    return callable(getattr(getattr(ctx.backend, "target", ctx.backend), method, None))


@dataclass(frozen=True)
class NeedsAny:
    """``Property.not_applicable``: N/A only when the backend has none of ``methods``."""

    methods: tuple[str, ...] = LOCS

    def __call__(self, ctx: Context) -> str | None:
        if any(has(ctx, m) for m in self.methods):
            return None
        return f"the backend has none of {', '.join(self.methods)}"


@dataclass(frozen=True)
class BreachesHeld:
    """``Property.not_applicable`` of a property drawing near-valid cases: N/A where the profile's engine is never
    handed any of the breaches it draws (``Variant.held``: its input domain), else as ``NeedsAny(methods)``."""

    clauses: tuple[str, ...]
    cheap: bool | None = None
    methods: tuple[str, ...] = LOCS

    def __call__(self, ctx: Context) -> str | None:
        domain = ctx.profile.domain
        if not any(v.held(domain) for v in variants(self.clauses, cheap=self.cheap)):
            return (f"profile {ctx.profile.name!r}: its engine is never handed these breaches of "
                    f"{', '.join(self.clauses)} (no other table shape, no lengths its scheduler does not build, no "
                    "negative ids where its tables hold none)")
        return NeedsAny(self.methods)(ctx)


def calls(ctx: Context, mode: str, *, group: bool = True) -> tuple[bool, bool]:
    """(group_locs, the mode's lone call) as the backend has them; an example with neither is discarded."""
    grouped, lone = group and has(ctx, "group_locs"), has(ctx, LONE[mode])
    if not (grouped or lone):
        reject()
    return grouped, lone


def debug_or_plain(ctx: Context) -> Any:
    """The debug-mode backend, or the plain one where the backend has no debug mode (a property that asks
    what debug mode must not break asks it of the plain backend too)."""
    try:
        return ctx.debug_backend
    except NoDebugMode:
        return ctx.backend


_OTHER = {"missing_kernels": "backend.kernels", "missing_grouped_locs": "backend.kernels",
          "missing_grouped_extend": "backend.kernels", "no_adapter": "cache_groups", "scrubbed_dummy_rows": None}
"""What the other ``not_applicable`` checks ask for (None: a location call, as ``NeedsAny(LOCS)``)."""


def unlocks(properties: tuple[Property, ...]) -> dict[str, list[str]]:
    """Each operation (and ``debug mode``) -> the properties that need it, or may use it (marked ``*``: one of
    the operations so marked is enough)."""
    table: dict[str, list[str]] = {}
    for prop in properties:
        needs_any = prop.not_applicable
        if isinstance(needs_any, BreachesHeld):
            needs_any = NeedsAny(needs_any.methods)
        if (name := getattr(needs_any, "__name__", "")) in _OTHER:
            other = _OTHER[name]
            needs_any = NeedsAny() if other is None else None
            if other is not None:
                table.setdefault(other, []).append(prop.name)
        for method in prop.needs:
            table.setdefault(method, []).append(prop.name)
        if isinstance(needs_any, NeedsAny):
            for method in needs_any.methods:
                table.setdefault(method, []).append(prop.name + "*")
        if prop.debug:
            table.setdefault("debug mode", []).append(prop.name)
    return table

