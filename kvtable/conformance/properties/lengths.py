"""CPU-mirror lengths as engines hand them over (T9): numpy integers give the same locations; a float, or one bare
number for the extend mirror, is refused."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy
from hypothesis import reject
from hypothesis import strategies as st

from kvtable.conformance.calls import tensor_compare
from kvtable.conformance.checks import Mismatch, judge
from kvtable.conformance.checks import reference_outcome as outcome
from kvtable.conformance.core import Context, Property
from kvtable.conformance.levels import STRICTNESS
from kvtable.reference import Batch, GroupSpec
from kvtable.strategies import Case
from kvtable.strategies.batches import ceil_div, padded_row
from kvtable.strategies.draws import between, pick


@dataclass(frozen=True)
class Mirrors:
    """A one-row extend case and its CPU mirrors as handed over: numpy integers, one float, or the extend
    mirror one bare number instead of a sequence."""

    case: Case
    prefix: list
    extend: Any  # a list, or one bare number: handed over as drawn

    @property
    def valid(self) -> bool:
        return isinstance(self.extend, list) and not any(isinstance(v, float) for v in (*self.prefix, *self.extend))


@st.composite
def _numpy_lengths(draw: st.DrawFn) -> Mirrors:
    """Extend lengths as numpy integers (valid), the extend length a float (T9), or the extend mirror the
    bare length, not a sequence (T9)."""
    ps = pick(draw, (1, 2, 4))
    prefix, extend = draw(between(0, 2 * ps)), draw(between(0, 2 * ps))
    end = max(ceil_div(prefix + extend, ps), 1)
    batch = Batch.extend((prefix,), (extend,))
    case = Case((GroupSpec("full0", "full", ps),), {"full0": [padded_row(0, list(range(3, 3 + end)), end + 1)]}, batch)
    kind = pick(draw, (numpy.int64, numpy.int32, numpy.int16, int))
    shape = pick(draw, ("ints", "float", "bare"))
    mirror = {"ints": [kind(extend)], "float": [float(extend)], "bare": kind(extend)}[shape]
    return Mirrors(case, [kind(prefix)], mirror)


def _numpy_length_mirrors(ctx: Context, m: Mirrors) -> None:
    """T9: lengths are a sequence of integers (python or numpy; never floats, never one bare number); numpy
    mirrors give the same locations."""
    if not m.valid and not ctx.profile.backend_validates:
        reject()  # a float or bare length is no input the engine's scheduler ever hands over: not a finding
    ps = m.case.spec("full0").block_granularity
    tensor = m.case.tensors()["full0"]
    what = f"extend_locs with lengths {m.prefix!r}, {m.extend!r}"
    expected = outcome(lambda: ctx.profile.extend_locs(m.case.tables["full0"], m.prefix, m.extend, ps))
    if expected.raised == m.valid:
        raise AssertionError(f"the reference {'refuses' if m.valid else 'accepts'} {what}")
    try:
        judge("T9", what, expected, lambda: ctx.backend.extend_locs(tensor, m.prefix, m.extend, ps),
              tensor_compare(ctx, "T9", what))
    except Mismatch as err:
        if err.tier:
            raise
        # a float or bare length accepted: a missing refusal, strictness as in every rejects/* property (the vLLM-style
        # example validates nothing and must pass safety and correctness)
        raise Mismatch(err.clause, str(err).split("] ", 1)[1], tier=STRICTNESS, kind=err.kind) from err


PROPERTIES = (
    Property("lengths/numpy-ints", "T9", "extend lengths that are numpy integers give the same locations; "
             "a float length, or a bare number for the mirror, is refused", _numpy_lengths(), _numpy_length_mirrors,
             needs=("extend_locs",)),
)
