"""Mutation check of impl/: every realistic slip is killed by the suite, with the clause it names.

The snippets are checked against the real source first, so the list fails loudly when impl/ moves
on. Every mutant but the equivalent one must be killed (a recorded suite gap fails here, as it fails
``kvtable zoo --mutants``); the kernel-sink mutants also come with a witness input showing they really
are wrong, and the equivalent mutant with its proof.
"""

from __future__ import annotations

import sys

import pytest
import torch
import z3

import kvtable.impl.tokens
from kvtable.backends import spec_of
from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.errors import ContractViolation
from kvtable.reference import Batch, check_write_locs
from kvtable.zoo.hunt import Baseline
from kvtable.zoo.mutants import (
    BY_NAME,
    MUTANTS,
    SnippetMismatch,
    SourceMutant,
    mutated_backend,
    mutated_source,
    original_source,
)
from kvtable.zoo.run import judge_mutant

HUNTED = [m for m in MUTANTS if not m.equivalent and not m.killer]
KILLED_BY_NAME = [m for m in MUTANTS if m.killer]


@pytest.fixture(scope="module")
def baseline() -> Baseline:
    return Baseline()


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_snippets_match_the_real_source_exactly_once(mutant: SourceMutant) -> None:
    mutated = mutated_source(mutant)
    assert mutated != original_source(mutant.module)[1]
    compile(mutated, mutant.qualified, "exec")


def test_a_snippet_that_no_longer_matches_is_refused() -> None:
    gone = SourceMutant("gone", "tokens", (("no such line", "x"),), "W1", "")
    twice = SourceMutant("twice", "tokens", (("torch", "numpy"),), "W1", "")
    for mutant in (gone, twice):
        with pytest.raises(SnippetMismatch, match="update the mutant"):
            mutated_source(mutant)


def test_mutated_imports_leave_the_process_as_they_found_it() -> None:
    before = (sys.modules["kvtable.impl.tokens"], TorchBackend)
    with mutated_backend(BY_NAME["pos-off-by-one"]) as backend_class:
        assert issubclass(backend_class, TorchBackend) is False  # a fresh import, not a subclass of ours
        assert spec_of(backend_class()) == "kvtable.zoo.mutants:mutant[pos-off-by-one]"
        assert sys.modules["kvtable.impl.tokens"] is not before[0]
        locs = backend_class().decode_locs(torch.tensor([[3]], dtype=torch.int32), torch.tensor([1]), 4)
        assert locs.tolist() == [13]  # position 1 instead of 0
    assert (sys.modules["kvtable.impl.tokens"], kvtable.impl.tokens) == (before[0], before[0])
    import kvtable.backends.torch_backend as again
    assert again.TorchBackend is TorchBackend
    assert TorchBackend().decode_locs(torch.tensor([[3]], dtype=torch.int32), torch.tensor([1]), 4).tolist() == [12]


@pytest.mark.slow
@pytest.mark.parametrize("mutant", HUNTED, ids=lambda m: m.name)
def test_mutant_is_killed_by_the_clause_it_names(mutant: SourceMutant, baseline: Baseline) -> None:
    verdict = judge_mutant(mutant, baseline=baseline)
    assert verdict.catch is not None and verdict.catch.caught_by is not None, f"{mutant.name} survived"
    assert verdict.catch.caught_by.clause_id == mutant.clause, verdict.catch.clauses
    assert not verdict.catch.discredited


@pytest.mark.slow
@pytest.mark.parametrize("mutant", KILLED_BY_NAME, ids=lambda m: m.name)
def test_mutant_is_killed_by_its_clause_property(mutant: SourceMutant) -> None:
    """Each check of impl's own validator, dropped in turn, fails the conformance property of its clause."""
    with mutated_backend(mutant) as backend_class:
        # strict: refusals are the strictness tier; in this process: a worker would import impl/ without the mutant
        report = run_conformance(backend_class(), properties=select([mutant.killer]), examples=mutant.examples,
                                 seed=0, shrink=False, isolate=False, level="strict")
    (result,) = report.results
    assert (result.property, result.status) == (mutant.killer, "failed"), f"{mutant.name} survived"
    assert result.clause.split()[0] == mutant.clause, result.message


def test_every_validator_clause_has_a_mutant() -> None:
    """The clauses impl's validator checks (debug mode's table checks and the host's) and its selection (S1/S2)
    each lose their check in one mutant at least."""
    dropped = {m.clause for m in KILLED_BY_NAME}
    assert dropped >= {"T1", "T2", "T3", "T4", "T5", "T7", "T8", "T9", "W2", "W5", "E1", "S1", "S2"}


def test_checker_page0_is_a_real_bug() -> None:
    """A hole under the write (page 0 at the token's own column) and a location in page 0: D1."""
    table, locs, batch = [[0, 5]], [1], Batch((2,))
    with pytest.raises(ContractViolation, match="null page 0"):
        check_write_locs(table, locs, batch, 4)
    args = (torch.tensor(table, dtype=torch.int32), torch.tensor(locs, dtype=torch.int32), batch, 4)
    with pytest.raises(ContractViolation, match="D1"):
        TorchBackend().check_write_locs(*args)
    with mutated_backend(BY_NAME["checker-page0"]) as backend_class:
        backend_class().check_write_locs(*args)  # accepted


def _kernel_locs(backend: object, table: list[list[int]], widths: list[int], seq: list[int], ps: int) -> list:
    tables = torch.tensor([table], dtype=torch.int32)
    out = torch.zeros(1, len(seq), dtype=torch.int32)
    backend.kernels.stacked_locs(tables, torch.tensor(widths, dtype=torch.int32),  # type: ignore[attr-defined]
                                 torch.tensor([ps], dtype=torch.int32), torch.tensor(seq, dtype=torch.int32),
                                 out, len(seq), 1)
    return out.tolist()[0]


def test_kernel_sink_mutants_are_real_bugs() -> None:
    """Lengths the host never sees: a column past a narrow group's width, and a -1 pad inside the width."""
    narrow = ([[3, 9]], [1], [3], 2)  # width 1 in a 2-column stack; seq 3 reads column 1 (another group's 9)
    padded = ([[3, -1]], [2], [3], 2)  # seq 3 reads the pad at column 1
    assert _kernel_locs(TorchBackend(), *narrow) == [0]
    assert _kernel_locs(TorchBackend(), *padded) == [0]
    with mutated_backend(BY_NAME["width-mask-dropped"]) as backend_class:
        assert _kernel_locs(backend_class(), *narrow) == [18]
    with mutated_backend(BY_NAME["page-clamp-dropped"]) as backend_class:
        assert _kernel_locs(backend_class(), *padded) == [-2]


def test_the_int32_product_is_equivalent() -> None:
    """int32 page * ps + offset, wrapped, equals the int64 value truncated to int32, for every int32 input."""
    page, ps, offset = z3.BitVecs("page page_size offset", 32)
    wide = z3.Extract(31, 0, z3.SignExt(32, page) * z3.SignExt(32, ps) + z3.SignExt(32, offset))
    solver = z3.Solver()
    solver.add(page * ps + offset != wide)
    assert solver.check() == z3.unsat
    big = 2**31 // 4 + 5  # a W5 breach: both forms take the page as 0 (the sink) before the product
    with mutated_backend(BY_NAME["int32-product"]) as backend_class:
        mutated = _kernel_locs(backend_class(), [[big, 7]], [2], [3], 4)
    assert mutated == _kernel_locs(TorchBackend(), [[big, 7]], [2], [3], 4) == [2]
