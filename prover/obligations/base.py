"""One proof obligation: a stable name, the clause it is about, a one-line statement, and its z3 query."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kvtable.prover.solver.discharge import Query
from kvtable.spec.clauses import clause

Expect = Literal["proved", "counterexample"]


@dataclass(frozen=True)
class Obligation:
    """``build()`` returns the query; ``expect`` says whether z3 must prove it or must refute it.

    An obligation expecting a counterexample drops one precondition of its clause on purpose: z3
    finding the counterexample shows the precondition is needed, and that counts as passing.
    """

    name: str
    clause: str
    statement: str
    build: Callable[[], Query]
    expect: Expect = "proved"

    def __post_init__(self) -> None:
        clause(self.clause)  # the clause must exist in spec/clauses.py
        if not self.name.startswith(f"{self.clause}."):
            raise ValueError(f"obligation {self.name!r} must be named after its clause {self.clause}")
        if self.expect not in ("proved", "counterexample"):
            raise ValueError(f"obligation {self.name!r}: expect is 'proved' or 'counterexample'")
