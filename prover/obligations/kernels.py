"""Translation validation of the Triton kernels: their own source, run symbolically, against the clauses.

Each kernel of impl/triton_kernels.py is executed by prover/symexec/run.py on its launch binding
(prover/bindings/builtin.py) and asked prover/bindings/queries.py's three questions: in bounds (every load
and store, for every program id, lane and loaded value), agreement with each clause it implements,
and safety on any input. Unlike the formula-level obligations these are about the code that runs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from kvtable.prover.bindings import builtin as kb
from kvtable.prover.bindings import queries as kq
from kvtable.prover.bindings.binding import MASKED_LOADS_AS, Binding
from kvtable.prover.bindings.contracts import ALLOC_CLAUSES, FILL_CLAUSES, LOCATION_CLAUSES
from kvtable.prover.bindings.coverage import coverage
from kvtable.prover.obligations.base import Expect, Obligation
from kvtable.prover.solver.discharge import DEFAULT_RLIMIT, Outcome, Query, discharge


def _unbound() -> Binding:
    """The default binding, there only because ``Obligation.expect`` has a default: every obligation names its own."""
    raise TypeError("a KernelObligation is built with its binding")


@dataclass(frozen=True)
class KernelObligation(Obligation):
    """An obligation about a kernel's code: its counterexamples are looked for small, and replayed."""

    binding: Callable[[], Binding] = field(default=_unbound)


def _clause(name: str) -> str:
    return name.split(".", 1)[0]


def _kernel(name: str) -> str:
    """``"G4.kernel-stacked-locs-in-bounds"`` -> ``"stacked-locs"`` (no binding built, no impl/ imported)."""
    rest = name.split(".kernel-", 1)[1]
    return next(rest[:-len(s)] for s in ("-in-bounds", "-agrees", "-safe", "-covers", "-negative-position", "")
                if rest.endswith(s))


def in_bounds(name: str, binding: Callable[[], Binding], what: str) -> KernelObligation:
    return KernelObligation(name, _clause(name),
                            f"{_kernel(name)} kernel: every masked load and store stays inside its tensor, per"
                            f" dimension, for every program id, lane and loaded value ({what})",
                            lambda: kq.in_bounds(binding()), "proved", binding)


def agrees(name: str, binding: Callable[[], Binding], what: str) -> KernelObligation:
    return KernelObligation(name, _clause(name), f"{_kernel(name)} kernel: {what}",
                            lambda: kq.agreement(binding(), _clause(name)), "proved", binding)


def covers(name: str, binding: Callable[[], Binding], what: str) -> KernelObligation:
    return KernelObligation(name, _clause(name), f"{_kernel(name)} kernel: every {what} the clause writes is stored"
                            " by exactly one program and lane (no vacuous agreement)", lambda: coverage(binding()),
                            "proved", binding)


def safe(name: str, binding: Callable[[], Binding], what: str, expect: Expect = "proved",
         build: Callable[[], Query] | None = None) -> KernelObligation:
    return KernelObligation(name, _clause(name), f"{_kernel(name)} kernel: {what}",
                            build or (lambda: kq.safety(binding())), expect, binding)


def kernel_obligations(binding: Binding, clauses: tuple[str, ...] = ()) -> tuple[Obligation, ...]:
    """In bounds, coverage, agreement with ``binding.clause`` (and ``clauses``) and, for a location clause,
    safety: the obligations ``kvtable prove --kernel`` runs on a user's kernel."""
    def bound() -> Binding:
        return binding
    prefix = f"{binding.clause}.kernel-{binding.label}"
    obligations = [in_bounds(f"{prefix}-in-bounds", bound, "the user's binding")]
    if binding.clause in ALLOC_CLAUSES:  # SPEC 6a: the slots handed out or recorded, each at its token's place
        return (*obligations, agrees(f"{binding.clause}.kernel-{binding.label}-agrees", bound,
                                     f"every store writes the element clause {binding.clause} writes, with its value"))
    if binding.clause not in LOCATION_CLAUSES + FILL_CLAUSES:  # no clause gives its values (SGLang's index copies)
        return tuple(obligations)
    obligations.append(covers(f"{prefix}-covers", bound, "element"))
    for clause in (binding.clause, *clauses):
        obligations.append(agrees(f"{clause}.kernel-{binding.label}-agrees", bound,
                                  f"every store writes the element clause {clause} writes, with its value, under"
                                  " its preconditions"))
    if binding.clause not in ("G3", "E2"):
        obligations.append(safe(f"{prefix}-safe", bound, "with any table contents and lengths, every store is"
                                                        " the token's own slot, a slot of page 0, or the pad"))
    return tuple(obligations)


OBLIGATIONS: tuple[Obligation, ...] = (
    in_bounds("G4.kernel-stacked-locs-in-bounds", kb.stacked_locs, "stale lengths and widths included"),
    covers("G4.kernel-stacked-locs-covers", kb.stacked_locs, "location [g, b*n+t] of a row b < bs"),
    agrees("W1.kernel-stacked-locs-agrees", lambda: kb.stacked_locs(clause="W1"),
           "with n = 1, out[g, b] is W0's slot of position seq_len-1 of row b (T8, T4, W5 assumed)"),
    agrees("W2.kernel-stacked-locs-agrees", lambda: kb.stacked_locs(clause="W2"),
           "out[g, b*n+t] is the slot of max(seq_len-n+t, 0), real rows (seq_len >= n) and padded rows alike"),
    agrees("W4.kernel-stacked-locs-agrees", lambda: kb.stacked_locs(clause="W4"),
           "out[g, b*n+t] is the slot of max(frontier-n+t, 0) for every row with a frontier >= 1"),
    agrees("G4.kernel-stacked-locs-agrees", kb.stacked_locs,
           "replay's locations into [:bs*n] of every group only; lanes past bs*n store nothing"),
    safe("G4.kernel-stacked-locs-safe", kb.stacked_locs,
         "with any table contents and lengths, every store is the token's own slot or a slot of page 0"),
    in_bounds("W3.kernel-extend-locs-in-bounds", kb.stacked_extend_locs, "any rows, positions and table contents"),
    covers("W3.kernel-extend-locs-covers", kb.stacked_extend_locs, "location [g, i] of a token i < T"),
    agrees("W3.kernel-extend-locs-agrees", kb.stacked_extend_locs,
           "out[g, i] is W0's slot of position positions[i] of row rows[i]"),
    safe("W3.kernel-extend-locs-safe", kb.stacked_extend_locs,
         "with any table contents and rows, positions >= 0: every store is the token's own slot or a slot of"
         " page 0"),
    safe("T9.kernel-extend-locs-negative-position", kb.stacked_extend_locs,
         "a negative position (T9 dropped) makes pos % ps negative: a slot outside page 0 and the token's own",
         "counterexample", lambda: kq.safety(kb.stacked_extend_locs(), nonnegative_positions=False)),
    KernelObligation("W0.kernel-stacked-locs-is-the-encoding", "W0",
                     "stacked-locs kernel: every stored value is prover/solver/encoding.py's stacked_lane(...).out"
                     " on the same loads, so the formula obligations about that encoding are about this code",
                     lambda: kq.matches_encoding(kb.stacked_locs()), "proved", kb.stacked_locs),
    KernelObligation("W0.kernel-extend-locs-is-the-encoding", "W0",
                     "extend-locs kernel: for rows in the table and positions >= 0, every stored value is"
                     " prover/solver/encoding.py's lane_at(...).out on the same loads", lambda: kq.matches_encoding(
                         kb.stacked_extend_locs()), "proved", kb.stacked_extend_locs),
    in_bounds("G3.kernel-replay-fill-in-bounds", kb.replay_fill, "any packed contents, metadata and batch sizes"),
    covers("G3.kernel-replay-fill-covers", kb.replay_fill, "cell [g, b, w] of a row b < bs"),
    agrees("G3.kernel-replay-fill-agrees", kb.replay_fill,
           "dst[g, b, w] is the expanded live entry, the tail pad or 0, for b < bs only"),
    agrees("E2.kernel-replay-fill-agrees", lambda: kb.replay_fill(clause="E2"),
           "a live source entry v at kernel column w becomes v*r + w % r if v > 0, else stays v"),
)


def preload(obligations: Iterable[Obligation]) -> None:
    """Import the kernels (impl/, triton, a user's module) once, before the obligations fork, so each forked
    child inherits them instead of importing torch and triton again."""
    from kvtable.prover.obligations.torch_ops import TorchObligation

    for ob in obligations:
        if isinstance(ob, KernelObligation):
            ob.binding().kernel_object()
            # the replay's modules too, imported whole before any fork, not by each child half-way (three
            # obligations of one binding raised ImportError for replay and memory's VirtualTensor)
            import kvtable.prover.bindings.replay  # noqa: F401
        elif isinstance(ob, TorchObligation):
            import kvtable.impl.torch_kernels  # noqa: F401


def kernel_outcome(obligation: KernelObligation, guard_ms: int, small: int | None, *,
                   rlimit: int = DEFAULT_RLIMIT) -> Outcome:
    """Discharge; for a counterexample, look again among launches small enough to replay (small tensors, else a
    small grid), then replay it."""
    from kvtable.prover.bindings.explain import length_hint, wrap_hint
    from kvtable.prover.bindings.replay import pad_hint, replay

    query = obligation.build()
    expected = small if obligation.expect == "counterexample" else None  # else small ones come from the replay pass
    outcome = discharge(query, guard_ms, rlimit=rlimit, small=expected)
    if outcome.status == "proved" and query.stated:
        return _assumed(query, outcome, guard_ms, small, rlimit)
    if outcome.status != "counterexample":
        return outcome
    binding = obligation.binding()
    for strides in (True, False):  # small tensors first; a wrap needs large strides, which a small grid can have
        smaller = discharge(kq.replayable(binding, query, strides=strides), guard_ms, rlimit=rlimit, small=small)
        if smaller.status == "too slow":  # which counterexample is shown must not depend on the clock either
            return smaller
        if smaller.status == "counterexample":
            outcome = smaller
            break
    masked = _rests_on_masked_lanes(obligation, binding, outcome, guard_ms, rlimit)
    if masked.status == "too slow":
        return masked
    model = dict(outcome.model)
    report = replay(binding, model)
    kept = [f"it satisfies every stated assumption ({'; '.join(t for t, _ in query.stated)})"] if query.stated else []
    first = [MASKED_NOTE] if masked.status == "proved" else []
    lines = [*first, outcome.detail, *kept, *pad_hint(binding, model), *wrap_hint(binding, model),
             *length_hint(binding, model), str(report)]
    return replace(outcome, detail="\n".join(line for line in lines if line).strip())


MASKED_NOTE = ("rests on masked-off lanes: a tl.load with a mask and no other= reads an undefined value there in"
               " compiled Triton (masked_loads = \"undefined\", the default); with masked_loads = \"zero\" (a target"
               " known to fill 0, as the interpreter does) this obligation holds")
"""The first line of a counterexample that only masked-off lanes' undefined values make."""


def _rests_on_masked_lanes(obligation: KernelObligation, binding: Binding, outcome: Outcome, guard_ms: int,
                           rlimit: int) -> Outcome:
    """The obligation asked again with masked-off lanes reading 0 (proved: the counterexample rests on them);
    ``unknown`` without asking where the binding already says "zero" or the counterexample reads no such lane."""
    if binding.masked_loads == "zero" or not any(name.startswith("undefined#") for name, _ in outcome.model):
        return Outcome("unknown", 0.0)
    token = MASKED_LOADS_AS.set("zero")
    try:
        query = obligation.build()
    finally:
        MASKED_LOADS_AS.reset(token)
    return discharge(query, guard_ms, rlimit=rlimit)


def _assumed(query: Query, outcome: Outcome, guard_ms: int, small: int | None, rlimit: int) -> Outcome:
    """A proof under the binding's stated assumptions: plain if it holds without them too, else it names them
    (with the counterexample that breaks one of them, which is what they rule out)."""
    bare = discharge(replace(query, stated=()), guard_ms, rlimit=rlimit, small=small)
    if bare.status == "too slow":
        return bare
    if bare.status == "proved":
        return outcome
    names = tuple(text for text, _ in query.stated)
    without = f"without them: {bare.status}" + (f" ({format_values(bare.model)})" if bare.model else "")
    return replace(outcome, assumed=names, detail=f"{outcome.detail}; {without}")


def format_values(model: Iterable[tuple[str, int | bool]]) -> str:
    """The inputs of a counterexample (its free values and the elements it reads), not the derived ones."""
    return ", ".join(f"{name}={value}" for name, value in model if " " not in name)
