"""The coverage question asked of a kernel's symbolic run: is every element the clause writes stored, once?

A kernel that stores nothing, or masks every lane off, agrees with any clause vacuously: agreement and
safety only judge the stores that happen. Coverage closes that gap for a store whose output index is, in
each dimension, affine in the program ids and lanes (``pid * BLOCK + tl.arange(0, BLOCK)``, ``pid``, a
lane): inverting it names the program and lane that must write element ``e``, and z3 proves

- at least once: for every element ``e`` the clause writes, that program is in the grid, that lane in its
  block, its mask holds and its store lands on ``e``;
- at most once: any program and lane whose store lands on an element the clause writes is that one.

A store index of any other shape (a loop's iteration, a value loaded per program) is not modelled: the
obligation is then refused as unsupported (unknown), never passed.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import z3

from kvtable.prover.bindings.assumptions import stated
from kvtable.prover.bindings.binding import Binding, Launch
from kvtable.prover.bindings.by_clause import contract
from kvtable.prover.bindings.contracts import signed
from kvtable.prover.bindings.queries import symbolic_run
from kvtable.prover.solver.discharge import Query
from kvtable.prover.symexec.tl import Access, Trace
from kvtable.prover.symexec.values import KernelNotSupported, free_constants

Witness = dict[str, z3.BitVecRef]
"""Program id, lane or loop iteration (by name) -> its value as a function of the output element."""


@dataclass(frozen=True)
class Loop:
    """A loop's one symbolic iteration ``i = low + k * step`` (prover/symexec/loops.py)."""

    iteration: z3.BitVecRef
    k: z3.BitVecRef
    low: z3.BitVecRef
    step: int


def _loops(trace: Trace) -> list[Loop]:
    """The loops of the run, read back from the facts ``i == low + k * step`` defining their iterations."""
    out = []
    for fact in trace.assumptions:
        if not z3.is_eq(fact):
            continue
        iteration = [c for c in free_constants(fact.arg(0)) if c.decl().name().startswith("iteration#")]
        k = [c for c in free_constants(fact.arg(1)) if c.decl().name().startswith("k#")]
        if len(iteration) != 1 or len(k) != 1:
            continue
        at = [z3.simplify(z3.substitute(fact.arg(1), (k[0], z3.BitVecVal(v, 64)))) for v in (0, 1)]
        step = z3.simplify(at[1] - at[0])
        if z3.is_int_value(step):
            out.append(Loop(iteration[0], k[0], z3.Int2BV(at[0], 64), step.as_long()))
    return out


def _constants(term: z3.ExprRef) -> set[str]:
    """The names of the free constants in ``term`` (tensor contents, function applications, excluded)."""
    return {t.decl().name() for t in free_constants(term)}


def _coefficient(index: z3.BitVecRef, var: z3.BitVecRef, bound: list[z3.BitVecRef]) -> int:
    """``index``'s coefficient on ``var`` (the others at 0); not a constant: not affine, refused."""
    zero = [(v, z3.BitVecVal(0, v.size())) for v in bound]
    at = z3.simplify(z3.substitute(index, *[(v, z3.BitVecVal(1 if v.eq(var) else 0, v.size())) for v in bound]))
    base = z3.simplify(z3.substitute(index, *zero))
    step = z3.simplify(at - base)
    if not z3.is_bv_value(step):
        raise KernelNotSupported(f"coverage: the output index {index} is not affine in {var}")
    return step.as_signed_long()


def _low(term: z3.BitVecRef, bits: int) -> z3.BitVecRef:
    return z3.Extract(bits - 1, 0, term)


class _Writers:
    """Who may store: the program ids, the lanes (``tl.arange`` blocks) and the loops' iterations of a run."""

    def __init__(self, launch: Launch, trace: Trace, given: set[str]) -> None:
        self.launch, self.trace, self.given = launch, trace, given
        self.lanes = {lane.decl().name(): length for length, lane in trace.lanes.items()}
        self.loops = {loop.iteration.decl().name(): loop for loop in _loops(trace)}
        iterations = [x for lp in self.loops.values() for x in (lp.iteration, lp.k)]
        self.vars = [*launch.pids, *trace.lanes.values(), *iterations]
        self.free = [v for v in self.vars if v.decl().name() not in given]
        self.known = {v.decl().name() for v in [*launch.params.values(), *launch.stride_vars.values(), *self.vars]}

    def witness(self, store: Access, element: tuple[z3.BitVecRef, ...]) -> Witness:
        """The program ids, lanes and iterations whose store lands on ``element``: each dimension inverted as
        ``pid``, a lane, ``pid * L + lane`` for a lane of block ``L``, or a loop's ``i + lane`` with step ``L``."""
        bound = [v for v in self.vars if not any(v.eq(lp.k) for lp in self.loops.values())]
        witness: Witness = {}
        for index, e in zip(self.launch.indices(store.pointer), element, strict=True):
            other = _constants(index) - self.known
            if other:
                raise KernelNotSupported(f"coverage: the output index depends on {sorted(other)}, not only on"
                                         " program ids, lanes and loop iterations")
            used = {v.decl().name(): (v, c) for v in bound if (c := _coefficient(index, v, bound))}
            offset = e - z3.substitute(index, *[(v, z3.BitVecVal(0, v.size())) for v in bound])
            self._invert(index, used, offset, witness)
        mentioned = _constants(z3.And(store.mask, *[i == 0 for i in self.launch.indices(store.pointer)]))
        needed = [v for v in self.free if v.decl().name() in mentioned or any(v.eq(p) for p in self.launch.pids)]
        missing = [v.decl().name() for v in needed if v.decl().name() not in witness]
        if missing:
            raise KernelNotSupported(f"coverage: {missing} name no dimension of the output index (programs or lanes"
                                     " that would write the same elements)")
        return witness

    def _invert(self, index: z3.BitVecRef, used: dict[str, tuple[z3.BitVecRef, int]], offset: z3.BitVecRef,
                witness: Witness) -> None:
        lane = [n for n in used if n in self.lanes]
        loop = [n for n in used if n in self.loops]
        pid = [n for n in used if n not in self.lanes and n not in self.loops]
        block = self.lanes[lane[0]] if lane else 1
        shape = [(n, used[n][1]) for n in (*pid, *loop, *lane)]
        if len(shape) > 2 or (lane and used[lane[0]][1] != 1) or (pid and loop):
            raise KernelNotSupported(f"coverage: the output index {index} is not pid * BLOCK + lane")
        if loop:
            lp = self.loops[loop[0]]
            if used[loop[0]][1] != 1 or (lane and lp.step != block):
                raise KernelNotSupported(f"coverage: the output index {index} is not a loop's i + lane")
            from_low = offset - z3.SignExt(64 - lp.low.size(), lp.low)
            k = from_low / lp.step
            witness[lp.k.decl().name()] = k
            witness[loop[0]] = _low(z3.SignExt(64 - lp.low.size(), lp.low) + k * lp.step, lp.iteration.size())
            if lane:
                witness[lane[0]] = _low(z3.SRem(from_low, lp.step), 32)
        elif pid:
            if used[pid[0]][1] != block:
                raise KernelNotSupported(f"coverage: the output index {index} is not pid * BLOCK + lane")
            if pid[0] not in self.given:
                witness[pid[0]] = _low(offset / block, 32)
            if lane:
                witness[lane[0]] = _low(z3.SRem(offset, block), 32)
        elif lane:
            witness[lane[0]] = _low(offset, 32)

    def at(self, term: z3.ExprRef, witness: Witness) -> z3.ExprRef:
        """``term`` at the writers of ``witness``."""
        return z3.substitute(term, *[(v, witness[v.decl().name()]) for v in self.free if v.decl().name() in witness])

    def same(self, witness: Witness) -> z3.BoolRef:
        return z3.And(*[v == witness[v.decl().name()] for v in self.free if v.decl().name() in witness])


def coverage(binding: Binding) -> Query:
    """Every element the clause writes is stored by exactly one program, lane and iteration (per store)."""
    launch, trace = symbolic_run(binding)
    c = contract(binding.clause, launch)
    stores = output_stores(launch, trace)
    if not stores:
        raise KernelNotSupported(f"the kernel stores nothing into {binding.roles.get('out')!r}, the binding's output")
    rank = len(binding.tensors[binding.roles["out"]].sizes)
    element = tuple(z3.BitVec(f"element{k}", 64) for k in range(rank))
    wanted = c.element(tuple(signed(e) for e in element), z3.IntVal(0))
    given = {p.decl().name() for p in launch.pids if p.decl().name() in _constants(wanted.in_range)}
    writers = _Writers(launch, trace, given)  # a program the clause itself assigns the element to is given
    sizes = launch.sizes(binding.roles["out"])
    within = [z3.And(e >= 0, e < size) for e, size in zip(element, sizes, strict=True)]  # an element of the output
    facts = [*launch.facts(), *within, *wanted.layout, *wanted.preconditions]
    inside = trace.lane_ranges()
    pid_facts = [f for f in facts if any(_mentions(f, p) for p in launch.pids)]
    once, twice = [], []
    for store in stores:
        witness = writers.witness(store, element)
        landed = z3.And(*[i == e for i, e in zip(launch.indices(store.pointer), element, strict=True)])
        once.append(writers.at(z3.And(*pid_facts, *inside, store.mask, landed), witness))
        here = c.element(tuple(signed(i) for i in launch.indices(store.pointer)), z3.IntVal(0))
        own = writers.witness(store, launch.indices(store.pointer))
        twice.append(z3.Implies(z3.And(store.mask, here.in_range, *here.layout, *here.preconditions),
                                writers.same(own)))
    goal = z3.And(z3.Implies(wanted.in_range, z3.Or(*once)), *twice)
    shown = [(f"element[{k}]", e) for k, e in enumerate(element)]
    return replace(Query(tuple([*facts, *inside]), goal, tuple(shown)), stated=stated(launch, trace))


def output_stores(launch: Launch, trace: Trace) -> list[Access]:
    """The run's stores into the tensor the binding's role ``out`` names."""
    out = launch.binding.roles.get("out")
    if out not in launch.binding.tensors:
        raise KernelNotSupported(f"the binding's role 'out' must name the output tensor, got {out!r}")
    return [s for s in trace.stores if s.pointer.tensor == out]


def _mentions(term: z3.ExprRef, constant: z3.ExprRef) -> bool:
    return constant.decl().name() in _constants(term)
