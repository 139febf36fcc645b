"""Drawing helpers over strategies built once, for values whose range is known only in the middle of a draw.

``st.integers(lo, hi)`` or ``st.sampled_from(items)`` written inside a composite builds (and validates) a
new strategy on every draw; the fuzzer spent most of its time there. ``between`` keeps one strategy per
range, ``pick`` indexes a sequence through it, and ``rng`` seeds a ``random.Random`` from one drawn
integer instead of routing every call of ``st.randoms()`` through the engine.

A range or sequence with a single option draws nothing: each draw costs the engine a choice (and a span)
to record, mutate and shrink, and a choice with one possible value only adds that cost. For the same reason
``digits`` packs several small decisions (a batch's shape, a group's family and ratio) into one draw.
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
PACKED = 256
"""The most values one packed draw spans: Hypothesis draws an integer uniformly only within 256 of zero (past
that its distribution thins out like a log-t), so a wider span would starve its first digits."""
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


def digits(draw: st.DrawFn, sizes: Sequence[int]) -> list[int]:
    """A digit in ``range(size)`` for each of ``sizes``, packed mixed-radix into as few integer draws as hold
    ``PACKED`` values each (a size of 1 costs nothing). The first digit of a draw is the most significant: as
    the engine shrinks the packed value toward 0 it takes the earlier digits toward 0 first, as it did
    separate draws in order."""
    out: list[int] = []
    start, count = 0, len(sizes)
    while start < count:
        span, end = sizes[start], start + 1
        while end < count and span * sizes[end] <= PACKED:
            span *= sizes[end]
            end += 1
        value = draw(between(0, span - 1)) if span > 1 else 0  # not even a span for the engine to record
        if end - start == 1:  # one digit: the drawn value itself
            out.append(value)
        else:
            chunk = []
            for size in reversed(sizes[start:end]):
                value, digit = divmod(value, size)
                chunk.append(digit)
            out += reversed(chunk)
        start = end
    return out


def within(digit: int, lo: int, hi: int) -> int:
    """A digit folded into ``[lo, hi]`` (0 to ``lo``), kept as drawn while it fits: a digit drawn for the widest
    range a value may have keeps its value when the engine narrows the range (shrinking the rows that bound
    the padding, say)."""
    return lo + digit % (hi - lo + 1)


def rng(draw: st.DrawFn) -> random.Random:
    """A ``random.Random`` seeded by one drawn integer: deterministic and replayable for the example."""
    return random.Random(draw(SEEDS))
