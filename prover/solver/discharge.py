"""Discharge one proof query with z3: prove it, or find a concrete counterexample and check it.

A query is its preconditions and its goal; z3 looks for a model of ``preconditions and not goal``.
None (unsat) means proved for every value of the free variables at their widths. The query is solved
in its exact integer reading (prover/solver/intblast.py); a model found there is then evaluated in the
original bit-vector query, so a counterexample is reported only if z3's own bit-vector semantics
confirm it.

z3's limit is its resource count (``rlimit``), not time: the same query gets the same verdict on any machine
at any load. Each query is solved in a z3 context of its own, so neither the verdict nor the work spent depends
on what the process solved before. Reaching the resource limit is ``unknown``. A wall-clock cap stays only as a
guard against a hang: reaching it ends the whole query as ``too slow`` (the machine ran out of time, not z3 out
of resources), never ``unknown`` and never a counterexample found by a later strategy instead.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

import z3

from kvtable.prover.solver.intblast import IntBlaster

Status = Literal["proved", "counterexample", "unknown", "vacuous", "too slow"]
"""``vacuous``: the query's premises contradict each other, so its goal would hold of nothing (an error);
``too slow``: the wall-clock hang guard ran out before z3's resource limit did (no verdict, and no ``unknown``)."""


@dataclass(frozen=True)
class Query:
    """What an obligation asks: ``assumptions`` imply ``goal`` for all values of the free variables."""

    assumptions: tuple[z3.BoolRef, ...]
    goal: z3.BoolRef
    show: tuple[tuple[str, z3.ExprRef], ...] = ()
    """Derived values (positions, columns, locations) printed with a counterexample."""
    steps: tuple[z3.BoolRef, ...] = ()
    """Lemmas proved in order, each under the assumptions and the steps before it; the goal may use all."""
    stated: tuple[tuple[str, z3.BoolRef], ...] = ()
    """A binding's stated assumptions (prover/bindings/assumptions.py), by text: assumed like the others, and
    named in the verdict when the proof needs them."""


@dataclass(frozen=True)
class Outcome:
    """z3's answer: the status, the solver time, and for a counterexample its concrete values."""

    status: Status
    seconds: float
    model: tuple[tuple[str, int | bool], ...] = ()
    detail: str = ""
    assumed: tuple[str, ...] = ()
    """The stated assumptions a proof holds under (it fails without them); empty for a plain proof."""
    work: int = 0
    """z3's resource count spent on it (``rlimit count``): what ``DEFAULT_RLIMIT`` is calibrated against."""


def _nonlinear(ctx: z3.Context) -> z3.Solver:
    return z3.SolverFor("QF_UFNIA", ctx=ctx)


def _normalized(ctx: z3.Context) -> z3.Solver:
    """Polynomials in sum-of-monomials form and bounds propagated before the search."""
    return z3.Then(z3.With("simplify", arith_lhs=True, som=True, ctx=ctx), "propagate-values", "solve-eqs",
                   "propagate-ineqs", "smt", ctx=ctx).solver()


def _simplified(ctx: z3.Context) -> z3.Solver:
    return z3.Then("simplify", "propagate-values", "solve-eqs", "smt", ctx=ctx).solver()


STRATEGIES: tuple[tuple[str, Callable[[z3.Context], z3.Solver]], ...] = (
    ("nia", _nonlinear), ("normalized", _normalized), ("simplified", _simplified))
"""z3 configurations tried in turn; nonlinear integer search is sensitive to the formula's shape."""

DEFAULT_RLIMIT = 64_000_000
"""z3 resource units for each question a query asks (whether its premises hold together, each step, each part
of its goal: ``conjuncts``), every check made for it together: over 20x the most any obligation of the registry
spends; SGLang's two-request extend allocator's agreement is unknown at 16M and proved at 64M a question
(``kvtable prove --json`` reports each obligation's ``work``, all its questions together)."""

ROUNDS: tuple[int, ...] = (64, 16)
"""Each strategy first gets 1/64 of the budget, then 1/16, before the last round shares whatever is left."""

SMALL_SHARE = 64
"""The search among small values that ``small=`` asks for gets 1/64 of the budget, before the unrestricted one."""

HANG_GUARD_MS = 1_800_000
"""The wall-clock cap on one obligation's z3 calls: a guard against a hang only, never reached by a query that
keeps within its resource limit on a working machine."""

RLIMIT_REACHED = "resource limit reached"


class TooSlow(Exception):  # noqa: N818 (a control-flow signal)
    """The hang guard's wall clock ran out during a check: the query ends as ``too slow``, whatever is left."""


class Budget:
    """One obligation's z3 resources (deterministic) and its wall-clock hang guard, spent check by check."""

    def __init__(self, rlimit: int, guard_ms: int, ctx: z3.Context) -> None:
        self.rlimit, self.guard_ms, self.ctx = rlimit, guard_ms, ctx
        self.start = _count(ctx)
        self.deadline = time.perf_counter() + guard_ms / 1000

    def part(self) -> Budget:
        """A budget of the same size for one part of a goal, under the same hang-guard deadline."""
        part = Budget(self.rlimit, self.guard_ms, self.ctx)
        part.deadline = self.deadline
        return part

    @property
    def spent(self) -> int:
        return _count(self.ctx) - self.start

    def left(self) -> int:
        return self.rlimit - self.spent

    def check(self, solver: z3.Solver, share: int | None) -> z3.CheckSatResult:
        """``solver.check()`` within ``1/share`` of the budget (all that is left for None)."""
        left = self.left()
        solver.set("rlimit", max(1, left if share is None else min(self.rlimit // share, left)))
        solver.set("timeout", max(1, int((self.deadline - time.perf_counter()) * 1000)))
        answer = solver.check()
        if answer == z3.unknown and time.perf_counter() >= self.deadline:
            raise TooSlow(f"the machine was too slow: the {self.guard_ms / 1000:g} s wall-clock hang guard ran out"
                          f" after {self.spent} of {self.rlimit} z3 resource units (not a verdict; rerun on a less"
                          " loaded machine or raise --timeout)")
        return answer

    def why(self, solver: z3.Solver | None) -> str:
        """Why a check gave up (or, without one, why none is left to make): the resource limit or z3's reason."""
        reason = "canceled" if solver is None else solver.reason_unknown()
        return RLIMIT_REACHED if reason in ("canceled", "max. resource limit exceeded") else reason

    def spent_all(self) -> bool:
        return self.left() <= 0


def _count(ctx: z3.Context) -> int:
    """z3's resource count so far in ``ctx`` (a trivial check reads it)."""
    solver = z3.Solver(ctx=ctx)
    solver.check()
    return int(solver.statistics().get_key_value("rlimit count"))


def discharge(query: Query, guard_ms: int = HANG_GUARD_MS, *, rlimit: int = DEFAULT_RLIMIT,
              small: int | None = None) -> Outcome:
    """Prove ``query`` or refute it with a checked counterexample; ``unknown`` when z3 gives up.

    The premises are checked satisfiable first (``vacuous`` if not); then steps, then the goal; each runs the
    strategies in rounds of growing shares of ``rlimit`` until one decides or the budget is spent (``guard_ms`` of
    wall clock stops a hang: ``too slow``). With ``small``, a counterexample to the goal whose values all lie in
    ``[-small, small]`` is looked for first, so an expected one reads easily; finding none there proves nothing
    and the search goes on.
    """
    ctx = z3.Context()
    query = _translated(query, ctx)
    budget = Budget(rlimit, guard_ms, ctx)
    start = time.perf_counter()
    try:
        return _discharge(query, budget, small, start)
    except TooSlow as exc:
        return Outcome("too slow", time.perf_counter() - start, detail=str(exc), work=budget.spent)


def _discharge(query: Query, budget: Budget, small: int | None, start: float) -> Outcome:
    """``discharge`` on a query already in the budget's context."""
    known = [*query.assumptions, *(fact for _, fact in query.stated)]
    if _decide(known, z3.BoolVal(False, budget.ctx), (), budget.part(), None).status == "proved":  # none hold
        return Outcome("vacuous", time.perf_counter() - start, detail="the premises are unsatisfiable: the goal"
                       " would hold of nothing", work=budget.spent)
    for number, step in enumerate(query.steps, 1):
        outcome = _decide(known, step, (), budget.part(), None)
        if outcome.status != "proved":
            detail = f"step {number} ({step}) not proved: {outcome.status} {outcome.detail}".strip()
            return Outcome("unknown", time.perf_counter() - start, outcome.model, detail, work=budget.spent)
        known.append(step)
    outcome = _decide_each(known, query.goal, query.show, budget, small)
    return replace(outcome, seconds=time.perf_counter() - start, work=budget.spent)


def _decide_each(assumptions: list[z3.BoolRef], goal: z3.BoolRef, show: tuple[tuple[str, z3.ExprRef], ...],
                 budget: Budget, small: int | None) -> Outcome:
    """A conjunction decided part by part (the premises imply ``A and B`` iff they imply each, and ``m -> A and B``
    is ``m -> A`` and ``m -> B``), each part within its own ``rlimit``: a counterexample to any part refutes the
    goal, an unknown part leaves it unknown, all proved proves it. One query of many parts can cost z3 far more than
    the parts alone (vLLM V2's coverage: 38 s whole, 3 s in parts)."""
    outcomes = []
    for part in conjuncts(goal):
        outcome = _decide(assumptions, part, show, budget.part(), small)
        if outcome.status == "counterexample":
            return outcome
        outcomes.append(outcome)
    unknown = [o for o in outcomes if o.status != "proved"]
    if unknown:
        return unknown[0]
    return replace(outcomes[0], seconds=sum(o.seconds for o in outcomes),
                   detail=", ".join(dict.fromkeys(o.detail for o in outcomes)))


def conjuncts(goal: z3.BoolRef) -> list[z3.BoolRef]:
    """``goal`` as the conjunction of these parts: ``And`` split, ``m -> And(a, b)`` as ``m -> a``, ``m -> b``."""
    if z3.is_and(goal):
        return [part for child in goal.children() for part in conjuncts(child)]
    if z3.is_implies(goal):
        premise, body = goal.children()
        return [z3.Implies(premise, part) for part in conjuncts(body)] if z3.is_and(body) else [goal]
    return [goal]


def _translated(query: Query, ctx: z3.Context) -> Query:
    """``query`` rebuilt term by term in ``ctx``."""
    def move(e: z3.ExprRef) -> z3.ExprRef:
        return e.translate(ctx)
    return Query(tuple(map(move, query.assumptions)), move(query.goal),
                 tuple((name, move(term)) for name, term in query.show), tuple(map(move, query.steps)),
                 tuple((text, move(fact)) for text, fact in query.stated))


def _decide(assumptions: list[z3.BoolRef], goal: z3.BoolRef, show: tuple[tuple[str, z3.ExprRef], ...],
            budget: Budget, small: int | None) -> Outcome:
    negated = z3.And(*assumptions, z3.Not(goal))
    ctx = budget.ctx
    blaster = IntBlaster(assumptions)  # images in the terms' own context
    image = blaster.translate(negated)
    start = time.perf_counter()

    def counterexample(model: z3.ModelRef, strategy: str) -> Outcome:
        confirmed = _confirmed(negated, blaster, model)
        values = _values(blaster, model, show)
        if not confirmed:
            return Outcome("unknown", time.perf_counter() - start, values,
                           "the integer model does not satisfy the bit-vector query")
        return Outcome("counterexample", time.perf_counter() - start, values, strategy)

    if small is not None:
        solver = _nonlinear(ctx)
        bounded = [img for _, img in blaster.variables.values()] + [img for _, img in blaster.applications]
        solver.add(*blaster.side, image, *(z3.And(-small <= x, x <= small) for x in bounded))
        if budget.check(solver, SMALL_SHARE) == z3.sat:
            found = counterexample(solver.model(), "nia, small values")
            if found.status == "counterexample":
                return found
    reasons: list[str] = []
    for share in (*ROUNDS, None):
        for name, make in STRATEGIES:
            if budget.spent_all():
                reasons.append(budget.why(None))
                return Outcome("unknown", time.perf_counter() - start, detail="; ".join(reasons))
            solver = make(ctx)
            solver.add(*blaster.side, image)
            answer = budget.check(solver, share)
            if answer == z3.unsat:
                return Outcome("proved", time.perf_counter() - start, detail=name)
            if answer == z3.sat:
                return counterexample(solver.model(), name)
            reasons.append(f"{name}: {budget.why(solver)}")
    return Outcome("unknown", time.perf_counter() - start, detail="; ".join(reasons))


def _value(model: z3.ModelRef, term: z3.ExprRef) -> int | bool:
    value = model.eval(term, model_completion=True)
    return z3.is_true(value) if z3.is_bool(value) else value.as_long()


def _literal(like: z3.ExprRef, value: int | bool) -> z3.ExprRef:
    """``value`` as a z3 constant of ``like``'s sort."""
    if z3.is_bv(like):
        return z3.BitVecVal(value, like.size(), like.ctx)
    return z3.BoolVal(value, like.ctx) if z3.is_bool(like) else z3.IntVal(value, like.ctx)


def _values(blaster: IntBlaster, model: z3.ModelRef,
            show: tuple[tuple[str, z3.ExprRef], ...]) -> tuple[tuple[str, int | bool], ...]:
    """The counterexample: free variables, table entries read, then the derived values (all signed)."""
    out: list[tuple[str, int | bool]] = []
    for name, (original, _image) in sorted(blaster.variables.items()):
        if name.startswith("meaning_"):
            continue
        out.append((name, _value(model, blaster.translate(original))))
    seen: set[str] = set()
    for original, _image in blaster.applications:
        args = ", ".join(str(_value(model, blaster.translate(a))) for a in original.children())
        label = f"{original.decl().name()}[{args}]"
        if label not in seen:
            seen.add(label)
            out.append((label, _value(model, blaster.translate(original))))
    for name, term in show:
        if name not in blaster.variables:
            out.append((name, _value(model, blaster.translate(term))))
    return tuple(out)


def _confirmed(negated: z3.BoolRef, blaster: IntBlaster, model: z3.ModelRef) -> bool:
    """Evaluate the bit-vector query at the model: constants first, then the table entries it reads."""
    constants = [(original, _literal(original, _value(model, image)))
                 for original, image in blaster.variables.values()]
    grounded = z3.simplify(z3.substitute(negated, *constants)) if constants else z3.simplify(negated)
    entries = [(z3.simplify(z3.substitute(original, *constants)) if constants else original,
                _literal(original, _value(model, image))) for original, image in blaster.applications]
    verdict = z3.simplify(z3.substitute(grounded, *entries)) if entries else grounded
    return z3.is_true(verdict)
