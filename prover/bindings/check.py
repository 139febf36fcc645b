"""Refusing a binding no proof could use, before any solving (``check_binding``): its keys, its names against the
kernel's arguments, its expressions, its ranges satisfiable, and each stated assumption readable."""

from __future__ import annotations

from collections.abc import Collection

import z3

from kvtable.prover.bindings.assumptions import check_assumption
from kvtable.prover.bindings.binding import (
    GRID_LIMITS,
    LIST_KEYS,
    MASKED_LOADS,
    ROLES,
    Binding,
    Launch,
    hinted,
    not_a_list,
)

SATISFIABLE_RLIMIT = 2_000_000
"""z3 resource units for checking that some launch satisfies the binding (unknown counts as satisfiable)."""


def _satisfiable(facts: list[z3.BoolRef]) -> bool:
    solver = z3.Solver()
    solver.set("rlimit", SATISFIABLE_RLIMIT)
    solver.add(*facts)
    return solver.check() != z3.unsat



def check_binding(binding: Binding, arguments: list[str], defaulted: Collection[str] = ()) -> None:
    """Refuse (``ValueError``, one line) a binding no proof could use, before any solving: a clause the spec lacks,
    a tensor, scalar, constexpr or stride that is not one of the kernel's ``arguments``, an argument left unbound
    (one with a default, in ``defaulted``, keeps it: SGLang's ``token_mapping=None``),
    an expression over unknown parameters, or a role naming something the binding does not have."""
    from kvtable.spec.clauses import clause

    for key in LIST_KEYS:
        if isinstance(getattr(binding, key), str):
            raise ValueError(not_a_list(key, getattr(binding, key)))
    if not 1 <= len(binding.grid) <= len(GRID_LIMITS):
        raise ValueError(f"grid = {list(binding.grid)!r}: a launch has one to three axes (grid = [\"B\"])")
    if binding.masked_loads not in MASKED_LOADS:
        raise ValueError(f"masked_loads = {binding.masked_loads!r}: one of {list(MASKED_LOADS)}")
    try:
        clause(binding.clause)
    except KeyError as exc:
        raise ValueError(f"clause = {binding.clause!r}: {exc.args[0]}") from None
    twice = sorted(binding.strides() & ({*binding.scalars} | {*binding.constexprs}))
    if twice:  # the run would take the scalar, and the element it reads would not be the tensor's own
        raise ValueError(f"{twice} bound twice: as a tensor's stride and as a scalar or constexpr; a stride argument "
                         "is the tensor's stride (say what it equals in requires, e.g. 'out_stride == cap')")
    named = [*binding.tensors, *binding.scalars, *binding.constexprs, *binding.strides()]
    behind = {n for entries in binding.pointer_tables.values() for n in entries}  # reached through a table of pointers
    extra = [n for n in named if n not in arguments and n not in behind]
    if extra:
        raise ValueError(f"the binding names {extra}, which the kernel has no argument for (it takes {arguments})")
    unbound = [a for a in arguments if a not in named and a not in defaulted]
    if unbound:
        raise ValueError(f"the kernel's argument(s) {unbound} are bound by none of the binding's tensors, strides,"
                         " scalars or constexprs")
    unknown_roles = sorted(set(binding.roles) - ROLES)
    if unknown_roles:
        raise ValueError(f"roles: unknown role(s) {hinted(unknown_roles, ROLES)}; the roles are {sorted(ROLES)}")
    launch = Launch(binding)
    texts = [*(("grid", g) for g in binding.grid), *(("requires", r) for r in binding.requires),
             *((f"scalars.{n}", t) for n, t in binding.scalars.items()),
             *((f"tensors.{n}.sizes", s) for n, t in binding.tensors.items() for s in t.sizes),
             *([("pad_programs", binding.pad_programs)] if binding.pad_programs else [])]
    for where, text in texts:
        try:
            value = launch.condition(text) if where in ("requires", "pad_programs") else launch.expr(text)
        except Exception as exc:  # a name the binding lacks, a syntax error
            raise ValueError(f"{where}: {text!r}: {type(exc).__name__}: {exc}") from None
        if where in ("requires", "pad_programs") and not isinstance(value, z3.BoolRef | bool):
            raise ValueError(f"{where}: {text!r} is not a comparison")
        if where == "requires" and z3.is_false(z3.simplify(z3.BoolVal(value) if isinstance(value, bool) else value)):
            raise ValueError(f"requires: {text!r} is always false: no launch satisfies it, so every obligation would"
                             " hold of nothing")
    if not _satisfiable(launch.facts()):
        raise ValueError(f"requires: {list(binding.requires)!r} and the params' ranges contradict each other: no launch"
                         " satisfies them, so every obligation would hold of nothing")
    known = {*binding.tensors, *binding.params, *binding.roles, "program"}
    for role, value in binding.roles.items():
        if value.isidentifier() and value not in known:
            raise ValueError(f"roles.{role} = {value!r}: neither a tensor of the binding nor one of its parameters")
    for text in binding.assumes:
        check_assumption(launch, text)
