"""Exact integer semantics for z3 bit-vector queries (SMT-LIB ``QF_BV`` read as integer arithmetic).

The obligations are stated over z3 bit-vectors of the kernels' real widths, where products and
divisions of two symbolic values defeat bit-blasting at 32 and 64 bits. ``IntBlaster`` rewrites such a
query into integer arithmetic with the same meaning, which z3's nonlinear integer solver decides:
every bit-vector term of width w becomes its two's-complement value in ``[-2^(w-1), 2^(w-1))`` and
every operation wraps modulo ``2^w`` exactly as SMT-LIB defines it (division by zero included).

A wrap is written out only where it can happen: each term carries an interval that contains its
value, from the widths and from bounds the query's top-level facts put on terms (``page_size >= 1``).
The rewrite is equivalent on every assignment that satisfies those facts, so an unsat image proves
the original; a model of the image is re-checked in bit-vector semantics (prover/solver/discharge.py).
Integer-sorted parts of a query (the mathematical meaning) pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import z3


class UnsupportedOperation(ValueError):
    """The query uses a bit-vector operation the translation does not define (shifts, bitwise logic)."""


@dataclass(frozen=True)
class Interval:
    """Closed bounds on a term's signed value."""

    lo: int
    hi: int

    @classmethod
    def of_width(cls, width: int) -> Interval:
        return cls(-(2 ** (width - 1)), 2 ** (width - 1) - 1)

    def meet(self, other: Interval | None) -> Interval:
        if other is None:
            return self
        return Interval(max(self.lo, other.lo), min(self.hi, other.hi))

    def within(self, other: Interval) -> bool:
        return other.lo <= self.lo and self.hi <= other.hi


def _hull(values: Iterable[int]) -> Interval:
    values = list(values)
    return Interval(min(values), max(values))


def _abs(x: z3.ArithRef) -> z3.ArithRef:
    return z3.If(x >= 0, x, -x)


def _strip_sign_ext(e: z3.ExprRef) -> z3.ExprRef:
    while z3.is_app_of(e, z3.Z3_OP_SIGN_EXT):
        e = e.children()[0]
    return e


_BOUND_KINDS = {z3.Z3_OP_SGEQ: ">=", z3.Z3_OP_SGT: ">", z3.Z3_OP_SLEQ: "<=", z3.Z3_OP_SLT: "<", z3.Z3_OP_EQ: "=="}
_MIRROR = {">=": "<=", ">": "<", "<=": ">=", "<": ">", "==": "=="}


def harvest_bounds(facts: Iterable[z3.BoolRef]) -> dict[int, Interval]:
    """Bounds ``term op constant`` found among the top-level conjuncts of ``facts``, by term id."""
    bounds: dict[int, Interval] = {}
    pending = list(facts)
    while pending:
        fact = pending.pop()
        if z3.is_and(fact):
            pending.extend(fact.children())
            continue
        kind = fact.decl().kind() if z3.is_app(fact) else None
        if kind not in _BOUND_KINDS or not z3.is_bv(fact.children()[0]):
            continue
        left, right = fact.children()
        op = _BOUND_KINDS[kind]
        if z3.is_bv_value(left) and not z3.is_bv_value(right):
            left, right, op = right, left, _MIRROR[op]
        if not z3.is_bv_value(right):
            continue
        c = right.as_signed_long()
        full = Interval.of_width(left.size())
        bound = {">=": Interval(c, full.hi), ">": Interval(c + 1, full.hi), "<=": Interval(full.lo, c),
                 "<": Interval(full.lo, c - 1), "==": Interval(c, c)}[op]
        for term in {left.get_id(): left, _strip_sign_ext(left).get_id(): _strip_sign_ext(left)}.values():
            known = bounds.get(term.get_id())
            bounds[term.get_id()] = bound if known is None else known.meet(bound)
    return bounds


class IntBlaster:
    """Translate bit-vector (and mixed) z3 formulas into integer formulas with the same models.

    ``facts`` are formulas that hold in every model of what is translated (the query's assumptions);
    their ``term op constant`` conjuncts tighten the intervals.
    """

    def __init__(self, facts: Iterable[z3.BoolRef] = ()) -> None:
        self._bounds = harvest_bounds(facts)
        self._cache: dict[int, tuple[z3.ExprRef, z3.ExprRef]] = {}
        self._intervals: dict[int, Interval] = {}
        self._functions: dict[str, z3.FuncDeclRef] = {}
        self.side: list[z3.BoolRef] = []
        """Range facts for every translated variable and bit-vector function value."""
        self.variables: dict[str, tuple[z3.ExprRef, z3.ExprRef]] = {}
        """Original constant -> its integer image, by name."""
        self.applications: list[tuple[z3.ExprRef, z3.ExprRef]] = []
        """Every application of an uninterpreted function with arguments: (original, image)."""

    # Public -----------------------------------------------------------------------------------------
    def translate(self, e: z3.ExprRef) -> z3.ExprRef:
        """The image of ``e``: a Bool for a formula, the signed value for a bit-vector, else an Int."""
        key = e.get_id()
        hit = self._cache.get(key)
        if hit is not None:
            return hit[1]
        if z3.is_bv(e):
            image, interval = self._bv(e)
            self._intervals[key] = interval.meet(self._bounds.get(key))
        else:
            image = self._other(e)
        self._cache[key] = (e, image)
        return image

    def interval(self, e: z3.BitVecRef) -> Interval:
        self.translate(e)
        return self._intervals[e.get_id()]

    # Formulas and integer terms ---------------------------------------------------------------------
    def _other(self, e: z3.ExprRef) -> z3.ExprRef:
        kind = e.decl().kind()
        args = e.children()
        if kind == z3.Z3_OP_UNINTERPRETED:
            return self._uninterpreted(e)
        if kind in (z3.Z3_OP_EQ, z3.Z3_OP_DISTINCT):
            images = [self.translate(a) for a in args]
            return images[0] == images[1] if kind == z3.Z3_OP_EQ else z3.Distinct(*images)
        if kind == z3.Z3_OP_ITE:
            signed = self._signed_value_pattern(e)
            if signed is not None:
                return self.translate(signed)
            return z3.If(self.translate(args[0]), self.translate(args[1]), self.translate(args[2]))
        if kind in _SIGNED_COMPARE:
            a, b = (self.translate(x) for x in args)
            return _SIGNED_COMPARE[kind](a, b)
        if kind in _UNSIGNED_COMPARE:
            a, b = (self._unsigned(x) for x in args)
            return _UNSIGNED_COMPARE[kind](a, b)
        if kind == z3.Z3_OP_BV2INT:
            return self._unsigned(args[0])
        if kind == z3.Z3_OP_SBV2INT:
            return self.translate(args[0])
        if any(z3.is_bv(a) for a in args):
            raise UnsupportedOperation(f"no integer meaning for {e.decl().name()} on bit-vectors")
        # Bool connectives and integer arithmetic: the same operator on the translated children.
        return e.decl()(*[self.translate(a) for a in args]) if args else e

    @staticmethod
    def _signed_value_pattern(e: z3.ExprRef) -> z3.BitVecRef | None:
        """``If(x < 0, BV2Int(x) - 2^w, BV2Int(x))``, which is how z3 spells the signed value of ``x``."""
        cond, then, other = e.children()
        if not (z3.is_app_of(other, z3.Z3_OP_BV2INT) and z3.is_app_of(cond, z3.Z3_OP_SLT)):
            return None
        x = other.children()[0]
        zero = cond.children()[1]
        shifted = z3.BV2Int(x) - 2 ** x.size()
        if cond.children()[0].eq(x) and z3.is_bv_value(zero) and zero.as_long() == 0 and then.eq(shifted):
            return x
        return None

    def _uninterpreted(self, e: z3.ExprRef) -> z3.ExprRef:
        decl = e.decl()
        name = decl.name()
        if decl.arity() == 0:
            if not z3.is_bv(e):
                self.variables[name] = (e, e)
                return e
            image = z3.Int(f"{name}!bv{e.size()}", e.ctx)
            self.variables[name] = (e, image)
        else:
            function = self._functions.get(name)
            if function is None:
                sorts = [self._sort(decl.domain(i)) for i in range(decl.arity())] + [self._sort(decl.range())]
                function = z3.Function(f"{name}!int", *sorts)
                self._functions[name] = function
            image = function(*[self.translate(a) for a in e.children()])
            self.applications.append((e, image))
        if z3.is_bv(e):
            full = Interval.of_width(e.size())
            self.side.append(z3.And(full.lo <= image, image <= full.hi))
        return image

    @staticmethod
    def _sort(sort: z3.SortRef) -> z3.SortRef:
        return z3.IntSort(sort.ctx) if sort.kind() == z3.Z3_BV_SORT else sort

    # Bit-vector terms: signed images with intervals -------------------------------------------------
    def _bv(self, e: z3.BitVecRef) -> tuple[z3.ArithRef, Interval]:
        width = e.size()
        full = Interval.of_width(width)
        kind = e.decl().kind()
        args = e.children()
        if kind == z3.Z3_OP_BNUM:
            value = e.as_signed_long()
            return z3.IntVal(value, e.ctx), Interval(value, value)
        if kind == z3.Z3_OP_UNINTERPRETED:
            return self._uninterpreted(e), full
        if kind == z3.Z3_OP_ITE:
            return self._ite(e)
        if kind == z3.Z3_OP_INT2BV:
            return self._wrap(self.translate(args[0]), width), full
        if kind == z3.Z3_OP_SIGN_EXT:
            return self.translate(args[0]), self.interval(args[0])
        if kind == z3.Z3_OP_ZERO_EXT:
            source = self.interval(args[0])
            return self._unsigned(args[0]), source if source.lo >= 0 else Interval(0, 2 ** args[0].size() - 1)
        if kind == z3.Z3_OP_EXTRACT:
            return self._extract(e)
        if kind == z3.Z3_OP_CONCAT:
            value = self._unsigned(args[0])
            for arg in args[1:]:
                value = value * 2 ** arg.size() + self._unsigned(arg)
            return self._to_signed(value, width), full
        if kind in _RING:
            images = [self.translate(a) for a in args]
            exact = _RING[kind](images)
            interval = _RING_INTERVAL[kind]([self.interval(a) for a in args])
            return self._fit(exact, interval, width)
        if kind in _DIVISION_KINDS:
            return self._division(kind, args, width)
        raise UnsupportedOperation(f"no integer meaning for bit-vector operation {e.decl().name()}")

    def _fit(self, exact: z3.ArithRef, interval: Interval, width: int) -> tuple[z3.ArithRef, Interval]:
        """``exact`` as a width-bit value: unchanged if its interval fits, else wrapped."""
        full = Interval.of_width(width)
        if interval.within(full):
            return exact, interval
        return self._wrap(exact, width), full

    @staticmethod
    def _wrap(x: z3.ArithRef, width: int) -> z3.ArithRef:
        half = 2 ** (width - 1)
        return (x + half) % 2**width - half

    @staticmethod
    def _to_signed(u: z3.ArithRef, width: int) -> z3.ArithRef:
        return z3.If(u >= 2 ** (width - 1), u - 2**width, u)

    def _unsigned(self, e: z3.BitVecRef) -> z3.ArithRef:
        image = self.translate(e)
        if self.interval(e).lo >= 0:
            return image
        return z3.If(image < 0, image + 2 ** e.size(), image)

    def _ite(self, e: z3.BitVecRef) -> tuple[z3.ArithRef, Interval]:
        cond, then, other = e.children()
        image = z3.If(self.translate(cond), self.translate(then), self.translate(other))
        a, b = self.interval(then), self.interval(other)
        hull = Interval(min(a.lo, b.lo), max(a.hi, b.hi))
        if z3.is_app(cond) and len(cond.children()) == 2:
            x, y = cond.children()
            kind = cond.decl().kind()
            then_is_greater = ((kind in (z3.Z3_OP_SGT, z3.Z3_OP_SGEQ) and x.eq(then) and y.eq(other))
                               or (kind in (z3.Z3_OP_SLT, z3.Z3_OP_SLEQ) and x.eq(other) and y.eq(then)))
            then_is_smaller = ((kind in (z3.Z3_OP_SLT, z3.Z3_OP_SLEQ) and x.eq(then) and y.eq(other))
                               or (kind in (z3.Z3_OP_SGT, z3.Z3_OP_SGEQ) and x.eq(other) and y.eq(then)))
            if then_is_greater:  # max(then, other)
                return image, Interval(max(a.lo, b.lo), max(a.hi, b.hi))
            if then_is_smaller:  # min(then, other)
                return image, Interval(min(a.lo, b.lo), min(a.hi, b.hi))
        return image, hull

    def _extract(self, e: z3.BitVecRef) -> tuple[z3.ArithRef, Interval]:
        high, low = e.params()
        source = e.children()[0]
        width = high - low + 1
        if low == 0:  # the low bits: a wrap to the narrower width
            return self._fit(self.translate(source), self.interval(source), width)
        field = (self._unsigned(source) / 2**low) % 2**width
        return self._to_signed(field, width), Interval.of_width(width)

    def _division(self, kind: int, args: list[z3.BitVecRef], width: int) -> tuple[z3.ArithRef, Interval]:
        full = Interval.of_width(width)
        ia, ib = self.interval(args[0]), self.interval(args[1])
        sa, sb = self.translate(args[0]), self.translate(args[1])
        if ia.lo >= 0 and ib.lo >= 1:  # every convention agrees: floor division of naturals
            if kind in _QUOTIENTS:
                return sa / sb, Interval(ia.lo // ib.hi, ia.hi // ib.lo)
            return sa % sb, Interval(0, min(ia.hi, ib.hi - 1))
        if kind in (z3.Z3_OP_BUDIV, z3.Z3_OP_BUDIV_I, z3.Z3_OP_BUREM, z3.Z3_OP_BUREM_I):
            ua, ub = self._unsigned(args[0]), self._unsigned(args[1])
            if kind in _QUOTIENTS:
                return self._to_signed(z3.If(ub == 0, 2**width - 1, ua / ub), width), full
            return self._to_signed(z3.If(ub == 0, ua, ua % ub), width), full
        if kind in _QUOTIENTS:  # bvsdiv: round toward zero; x / 0 is -1 for x >= 0, else 1
            q = _abs(sa) / _abs(sb)
            exact = z3.If(sb == 0, z3.If(sa >= 0, -1, 1), z3.If((sa >= 0) == (sb >= 0), q, -q))
            return self._fit(exact, Interval(full.lo, full.hi + 1), width)
        r = z3.If(sb == 0, _abs(sa), _abs(sa) % _abs(sb))
        if kind in (z3.Z3_OP_BSREM, z3.Z3_OP_BSREM_I):  # the dividend's sign
            return z3.If(sa >= 0, r, -r), full
        # bvsmod: the divisor's sign
        by_signs = z3.If(sa >= 0, z3.If(sb >= 0, r, r + sb), z3.If(sb >= 0, sb - r, -r))
        return z3.If(r == 0, 0, by_signs), full


def _product_interval(intervals: list[Interval]) -> Interval:
    acc = intervals[0]
    for i in intervals[1:]:
        acc = _hull(x * y for x in (acc.lo, acc.hi) for y in (i.lo, i.hi))
    return acc


_RING = {
    z3.Z3_OP_BADD: lambda xs: z3.Sum(*xs),
    z3.Z3_OP_BMUL: lambda xs: z3.Product(*xs),
    z3.Z3_OP_BSUB: lambda xs: xs[0] - xs[1],
    z3.Z3_OP_BNEG: lambda xs: -xs[0],
}
_RING_INTERVAL = {
    z3.Z3_OP_BADD: lambda iv: Interval(sum(i.lo for i in iv), sum(i.hi for i in iv)),
    z3.Z3_OP_BMUL: _product_interval,
    z3.Z3_OP_BSUB: lambda iv: Interval(iv[0].lo - iv[1].hi, iv[0].hi - iv[1].lo),
    z3.Z3_OP_BNEG: lambda iv: Interval(-iv[0].hi, -iv[0].lo),
}
_QUOTIENTS = {z3.Z3_OP_BUDIV, z3.Z3_OP_BUDIV_I, z3.Z3_OP_BSDIV, z3.Z3_OP_BSDIV_I}
_DIVISION_KINDS = _QUOTIENTS | {z3.Z3_OP_BUREM, z3.Z3_OP_BUREM_I, z3.Z3_OP_BSREM, z3.Z3_OP_BSREM_I,
                                z3.Z3_OP_BSMOD, z3.Z3_OP_BSMOD_I}
_SIGNED_COMPARE = {
    z3.Z3_OP_SLEQ: lambda a, b: a <= b,
    z3.Z3_OP_SLT: lambda a, b: a < b,
    z3.Z3_OP_SGEQ: lambda a, b: a >= b,
    z3.Z3_OP_SGT: lambda a, b: a > b,
}
_UNSIGNED_COMPARE = {
    z3.Z3_OP_ULEQ: lambda a, b: a <= b,
    z3.Z3_OP_ULT: lambda a, b: a < b,
    z3.Z3_OP_UGEQ: lambda a, b: a >= b,
    z3.Z3_OP_UGT: lambda a, b: a > b,
}
