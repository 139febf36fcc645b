"""The three questions asked of a kernel's symbolic run, as z3 queries: in bounds, agreement, safety.

- in bounds: every load and store, under its mask, has each per-dimension index in ``[0, size)`` (and
  no stride-free remainder where no dimension is contiguous), for every program id, lane and loaded
  value; where the address was computed below 64 bits, the hardware offset must also equal the
  decomposition (no wrap). At 64 bits it cannot wrap inside the launch limits: every in-bounds
  coefficient and stride is below 2^31 and the offset of an element is below the storage size;
- agreement: every store lands on an element the clause writes and stores the clause's value there,
  under the clause's preconditions (masked-off lanes store nothing: their mask is false);
- safety: with any table contents and lengths (only the layout and W5's pool bound assumed), every
  stored location is the token's own slot, a slot of page 0, or the pad.
"""

from __future__ import annotations

from dataclasses import replace

import z3

from kvtable.prover.bindings.assumptions import stated
from kvtable.prover.bindings.binding import Binding, Launch
from kvtable.prover.bindings.by_clause import contract
from kvtable.prover.bindings.contracts import FILL_CLAUSES, LOCATION_CLAUSES, request_program, signed
from kvtable.prover.solver import encoding as encoding
from kvtable.prover.solver.discharge import Query
from kvtable.prover.solver.intblast import IntBlaster
from kvtable.prover.symexec.run import run_symbolic
from kvtable.prover.symexec.tl import Access, Trace
from kvtable.prover.symexec.values import KernelNotSupported

DIVISOR_RLIMIT = 2_000_000
"""z3 resource units for asking whether a divisor may be zero (a resource count, never wall clock: the query
built, and so the verdict, is the same at any load)."""

Shown = list[tuple[str, z3.ExprRef]]


def symbolic_run(binding: Binding) -> tuple[Launch, Trace]:
    """The kernel run once on the binding's symbolic launch."""
    launch = Launch(binding)
    trace = run_symbolic(binding.kernel_object(), launch.arguments(), launch.trace())
    return launch, trace


def _facts(launch: Launch, trace: Trace) -> list[z3.BoolRef]:
    return [*launch.facts(), *trace.lane_ranges()]


def _label(access: Access) -> str:
    return access.label


def access_inside(launch: Launch, access: Access) -> z3.BoolRef:
    """Every index of the access inside its dimension; a narrow address equal to its decomposition."""
    indices, sizes = launch.indices(access.pointer), launch.sizes(access.pointer.tensor)
    inside = [z3.And(i >= 0, i < size) for i, size in zip(indices, sizes, strict=True)]
    inside.append(launch.rest_is_zero(access.pointer))
    if access.pointer.parts.narrow:
        strides = launch.binding.tensors[access.pointer.tensor].strides
        exact = z3.Sum(*[signed(i) * (signed(launch.stride_vars[s]) if isinstance(s, str) else 1)
                         for i, s in zip(indices, strides, strict=True)])
        inside.append(signed(access.pointer.offset) == exact)
    return z3.And(*inside)


def _index_shown(launch: Launch, access: Access) -> Shown:
    label = _label(access)
    shown: Shown = [(f"{label} mask", access.mask)]
    if access.site:  # the kernel line, which the replay matches the interpreter's access by
        shown.append((f"{label} line", z3.IntVal(int(access.site.rsplit(":", 1)[1]))))
    indices = launch.indices(access.pointer)
    shown += [(f"{label} index[{k}]", i) for k, i in enumerate(indices)]
    if access.pointer.parts.narrow:
        shown.append((f"{label} hardware offset", access.pointer.offset))
    return shown


def _layout(launch: Launch, trace: Trace) -> list[z3.BoolRef]:
    """The clause's layout facts (page sizes >= 1, widths within the table, packing) where each store lands."""
    out = launch.binding.roles.get("out")
    stores = [store for store in trace.stores if store.pointer.tensor == out]
    if not stores or launch.binding.clause not in LOCATION_CLAUSES + FILL_CLAUSES:  # no clause gives its values
        return []  # (SGLang's index copies): no layout
    c = contract(launch.binding.clause, launch)
    return [fact for store in stores for fact in c.element(_store_indices(launch, store), z3.IntVal(0),
                                                           safety=True).layout]


def trusted(launch: Launch, trace: Trace) -> list[z3.BoolRef]:
    """The inputs the binding says the host validates (role ``trusted``: ``rows``, ``positions``,
    ``query_start_loc``): each row index a row of the table, each position >= 0, wherever the kernel loads one;
    the program's request spans ``0 <= qsl[r] <= qsl[r+1] <= tokens``."""
    names = launch.binding.roles.get("trusted", "").split()
    tensors = {launch.binding.roles[r]: r for r in names if r in ("rows", "positions", "row_of_program")}
    table = launch.binding.roles.get("table")
    if table is not None:  # behind a table of pointers, alike in rows
        table = launch.binding.pointer_tables.get(table, (table,))[0]
    facts = []
    if "query_start_loc" in names:  # request r's tokens are [qsl[r], qsl[r+1]), inside the live tokens
        qsl, r = launch.binding.roles["query_start_loc"], request_program(launch)
        start, end = (signed(launch.element(qsl, (r + k,))) for k in (0, 1))
        facts.append(z3.And(0 <= start, start <= end, end <= signed(launch.expr(launch.binding.roles["tokens"]))))
    for load in trace.loads:
        role = tensors.get(load.pointer.tensor)
        if role is None:
            continue
        value = signed(launch.read(load.pointer.tensor, load.pointer))
        if role == "positions":
            facts.append(z3.Implies(load.mask, value >= 0))
        elif table is None:
            raise KernelNotSupported(f"trusted role {role!r} is a row index, which needs the role 'table'")
        else:
            rows = signed(launch.sizes(table)[-2])
            facts.append(z3.Implies(load.mask, z3.And(value >= 0, value < rows)))
    return facts


def in_bounds(binding: Binding) -> Query:
    """Any loaded values (the layout facts and trusted inputs aside): every access under its mask inside its
    tensor."""
    launch, trace = symbolic_run(binding)
    goal = z3.And(*[z3.Implies(a.mask, access_inside(launch, a)) for a in trace.accesses])
    shown = [item for a in trace.accesses for item in _index_shown(launch, a)]
    facts = [*_facts(launch, trace), *_layout(launch, trace)]
    return _query(trace, facts, goal, shown, _assumed(launch, trace))


def _assumed(launch: Launch, trace: Trace) -> tuple[tuple[str, z3.BoolRef], ...]:
    """The binding's stated assumptions, with the inputs it trusts the host for (role ``trusted``), so that a
    verdict that needs them names them too."""
    names = launch.binding.roles.get("trusted", "")
    host = ((f"the host builds {', '.join(names.split())}", z3.And(*trusted(launch, trace))),) if names else ()
    return (*host, *stated(launch, trace))


def under(mask: z3.BoolRef, body: z3.BoolRef) -> z3.BoolRef:
    """``body`` where ``mask`` holds: loads guarded by the same mask need not be split on it."""
    return z3.substitute(body, (mask, z3.BoolVal(True)))


def _never_zero(facts: list[z3.BoolRef], divisor: z3.BitVecRef) -> bool:
    """Whether ``facts`` rule out a zero ``divisor`` (a short z3 check in the integer reading)."""
    blaster = IntBlaster(facts)
    solver = z3.SolverFor("QF_UFNIA")
    solver.set("rlimit", DIVISOR_RLIMIT)
    solver.add(*[blaster.translate(f) for f in facts], blaster.translate(divisor == 0), *blaster.side)
    return solver.check() == z3.unsat


def _query(trace: Trace, facts: list[z3.BoolRef], goal: z3.BoolRef, shown: Shown,
           assumed: tuple[tuple[str, z3.BoolRef], ...] = ()) -> Query:
    """The query (with the binding's stated assumptions), each division's undefined zero-divisor case dropped
    where the facts rule it out."""
    known = [(d.undefined, d.exact) for d in trace.divisions if _never_zero(facts, d.divisor)]
    if known:
        facts = [z3.substitute(f, *known) for f in facts]
        goal = z3.substitute(goal, *known)
        shown = [(name, z3.substitute(term, *known)) for name, term in shown]
        assumed = tuple((text, z3.substitute(fact, *known)) for text, fact in assumed)
    return Query(tuple(facts), goal, tuple(shown), stated=assumed)


def _store_indices(launch: Launch, store: Access) -> tuple[z3.ArithRef, ...]:
    return tuple(signed(i) for i in launch.indices(store.pointer))


def _entry_facts(launch: Launch, trace: Trace, clause: str) -> list[z3.BoolRef]:
    """T1 and W5 on every table entry the kernel loads (where its mask lets it load)."""
    c = contract(clause, launch)
    facts = []
    for load in trace.loads:
        index = c.table_index(load.pointer.tensor, tuple(signed(i) for i in launch.indices(load.pointer)))
        if index is not None:
            value = signed(launch.read(load.pointer.tensor, load.pointer))
            facts += [z3.Implies(load.mask, f) for f in c.entry_facts(index, value)]
    return facts


def _stores(launch: Launch, trace: Trace) -> list[Access]:
    out = launch.binding.roles.get("out")
    if out not in launch.binding.tensors:
        raise KernelNotSupported(f"the binding's role 'out' must name the output tensor, got {out!r}")
    return trace.stores


def agreement(binding: Binding, clause: str | None = None) -> Query:
    """Every store writes an element the clause writes, with the clause's value there."""
    clause = clause or binding.clause
    launch, trace = symbolic_run(replace(binding, clause=clause))
    c = contract(clause, launch)
    out = launch.binding.roles["out"]
    facts, goals, shown = _facts(launch, trace), [], []
    facts += _entry_facts(launch, trace, clause)
    shown += [item for load in trace.loads for item in _index_shown(launch, load)]
    for store in _stores(launch, trace):
        label = _label(store)
        stored = signed(store.value.term)
        if store.pointer.tensor != out:
            goals.append(z3.Not(store.mask))
            continue
        element = c.element(_store_indices(launch, store), stored)
        facts += [*element.layout, *(z3.Implies(store.mask, p) for p in element.preconditions)]
        goals.append(z3.Implies(store.mask, under(store.mask, z3.And(element.in_range, stored == element.expected))))
        shown += [*_index_shown(launch, store), (f"{label} value", store.value.term),
                  (f"{label} expected", element.expected), (f"{label} in range", element.in_range)]
        shown += [(f"{label} {name}", term) for name, term in element.show]
    return _query(trace, facts, z3.And(*goals), shown, stated(launch, trace))


def safety(binding: Binding, *, nonnegative_positions: bool = True) -> Query:
    """Any table contents and lengths: each store is the token's own slot, page 0 or the pad."""
    launch, trace = symbolic_run(binding)
    c = contract(binding.clause, launch)
    out = launch.binding.roles["out"]
    facts, goals = _facts(launch, trace), []
    shown = [item for load in trace.loads for item in _index_shown(launch, load)]
    positions = launch.binding.roles.get("positions")
    for load in trace.loads:
        index = c.table_index(load.pointer.tensor, tuple(signed(i) for i in launch.indices(load.pointer)))
        value = signed(launch.read(load.pointer.tensor, load.pointer))
        if index is not None:  # W5 as a bound of the pool, whatever the entry
            facts += [z3.Implies(load.mask, c.entry_facts(index, value)[1])]
        if load.pointer.tensor == positions and nonnegative_positions:
            facts.append(z3.Implies(load.mask, value >= 0))
    for store in _stores(launch, trace):
        stored = signed(store.value.term)
        if store.pointer.tensor != out:
            goals.append(z3.Not(store.mask))
            continue
        element = c.element(_store_indices(launch, store), stored, safety=True)
        if element.allowed is None:
            raise KernelNotSupported(f"clause {binding.clause} has no safety reading (no write locations)")
        facts += [*element.layout, *(z3.Implies(store.mask, p) for p in element.preconditions)]
        goals.append(z3.Implies(store.mask, z3.And(element.in_range, element.allowed)))
        label = _label(store)
        shown += [*_index_shown(launch, store), (f"{label} value", store.value.term)]
        shown += [(f"{label} {name}", term) for name, term in element.show]
    return _query(trace, facts, z3.And(*goals), shown, _assumed(launch, trace))


REPLAY_LIMIT = 64
"""Sizes, counts and strides at most this large keep a counterexample's tensors small enough to replay."""


def replayable(binding: Binding, query: Query, limit: int = REPLAY_LIMIT, *, strides: bool = True) -> Query:
    """``query`` restricted to launches whose parameters (and ``strides``) are at most ``limit``: small tensors,
    or with any strides a small grid over virtual tensors (prover/symexec/memory.py)."""
    names = [*binding.params, *(sorted(binding.strides()) if strides else ())]
    bounds = tuple(z3.BitVec(name, 32) <= limit for name in names)
    return replace(query, assumptions=(*query.assumptions, *bounds))


def _loaded(launch: Launch, trace: Trace, role: str) -> Access:
    """The kernel's one load of a role's tensor."""
    tensor = launch.binding.roles[role]
    loads = [a for a in trace.loads if a.pointer.tensor == tensor]
    if len(loads) != 1:
        raise KernelNotSupported(f"expected one load of {tensor}, found {len(loads)}")
    return loads[0]


def matches_encoding(binding: Binding) -> Query:
    """The kernel's stored value is the hand encoding's (prover/solver/encoding.py) on the same inputs: the lane of
    ``stacked_lane`` (lengths) or ``lane_at`` (rows and positions), the table read through the kernel's memory."""
    launch, trace = symbolic_run(binding)
    out = _stores(launch, trace)
    (store,) = [s for s in out if s.pointer.tensor == launch.binding.roles["out"]]
    group, index = launch.indices(store.pointer)
    tables = launch.binding.roles["table"]

    def table(row: z3.BitVecRef, col: z3.BitVecRef) -> z3.BitVecRef:
        return launch.element(tables, (signed(group), signed(row), signed(col)))

    ps = _loaded(launch, trace, "page_sizes").value.term
    width32 = launch.params["W"]
    widths = _loaded(launch, trace, "widths").value.term
    width = z3.If(widths < width32, widths, width32)
    facts = [*_facts(launch, trace), *_layout(launch, trace)]
    if "lengths" in launch.binding.roles:
        n = launch.params["n"]
        n64 = z3.SignExt(32, n)
        row, t = z3.Extract(31, 0, index / n64), z3.Extract(31, 0, z3.SRem(index, n64))
        seq = _loaded(launch, trace, "lengths").value.term
        lane = encoding.stacked_lane(table, row, seq, n, t, ps, width)
    else:
        row64 = _loaded(launch, trace, "rows").value.term
        pos = _loaded(launch, trace, "positions").value.term
        rows = launch.sizes(tables)[1]
        facts += [z3.Implies(store.mask, z3.And(row64 >= 0, row64 < rows, pos >= 0))]
        lane = encoding.lane_at(table, z3.Extract(31, 0, row64), pos, ps, width)
    goal = z3.Implies(store.mask, under(store.mask, store.value.term == lane.out))
    shown = [*_index_shown(launch, store), ("stored", store.value.term), ("encoding", lane.out)]
    return _query(trace, facts, goal, shown)
