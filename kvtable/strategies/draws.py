"""Drawing helpers over strategies built once, for values whose range is known only in the middle of a draw.

``st.integers(lo, hi)`` or ``st.sampled_from(items)`` written inside a composite builds (and validates) a
new strategy on every draw; the fuzzer spent most of its time there. ``between`` keeps one strategy per
range, ``pick`` indexes a sequence through it, and ``rng`` seeds a ``random.Random`` from one drawn
integer instead of routing every call of ``st.randoms()`` through the engine.

A range or sequence with a single option draws nothing: each draw costs the engine a choice (and a span)
to record, mutate and shrink, and a choice with one possible value only adds that cost.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from functools import lru_cache
from typing import TypeVar

from hypothesis import assume
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

T = TypeVar("T")

BOOLEANS = st.booleans()
TAIL_PADS = (-1, 0)
SEEDS = st.integers(0, 2**32 - 1)


@lru_cache(maxsize=4096)
def between(lo: int, hi: int) -> SearchStrategy[int]:
    """``st.integers(lo, hi)``, built once per range and reused by every later draw (``st.just(lo)`` for a
    single value: no choice to record)."""
    return st.just(lo) if lo == hi else st.integers(lo, hi)


def pick(draw: st.DrawFn, items: Sequence[T]) -> T:
    """One of ``items``, shrinking toward the first; the example is rejected if there is none."""
    if len(items) == 1:
        return items[0]
    assume(len(items) > 0)
    return items[draw(between(0, len(items) - 1))]


def rng(draw: st.DrawFn) -> random.Random:
    """A ``random.Random`` seeded by one drawn integer: deterministic and replayable for the example."""
    return random.Random(draw(SEEDS))
