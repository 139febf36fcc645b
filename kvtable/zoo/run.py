"""The zoo's verdicts: each entry (and each source mutant) hunted by the suite, and the tables that show them.

An entry is caught when a property fails with the clause the entry names (on a property the
conforming backend passes) and, where the entry names a z3 obligation, z3 refutes it with a
counterexample. A source mutant is killed the same way; an equivalent one is reported, not hunted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvtable.conformance.levels import LATENT
from kvtable.zoo.entries import Entry
from kvtable.zoo.hunt import Baseline, Catch, Z3Catch, hunt, properties_for, z3_catch
from kvtable.zoo.mutants import SourceMutant, mutated_backend


@dataclass
class Verdict:
    """One hunted entry or mutant: the suite's catch and, where there is one, z3's."""

    name: str
    clause: str
    catch: Catch | None
    z3: Z3Catch | None = None
    note: str = ""
    seconds: float = 0.0
    """Wall time of judging it: the conforming baseline's run where this entry was the first to need it, the
    hunt, the shrinking of its counterexample and z3."""
    missed: tuple[int, ...] = ()
    """Seeds (of ``kvtable zoo --seeds N``) at which it was not caught as named; caught only if there are none."""
    seeds: int = 1

    @property
    def caught(self) -> bool:
        fuzz = self.catch is not None and self.catch.as_named
        return fuzz and (self.z3 is None or self.z3.caught) and not self.missed

    @property
    def how(self) -> str:
        parts = [] if self.catch is None or not self.catch.caught else [self.catch.how]
        if self.z3 is not None and self.z3.caught:
            parts.append("z3 counterexample")
        return " + ".join(parts) or "-"

    @property
    def caught_by(self) -> str:
        if self.catch is None or self.catch.caught_by is None:
            return "NOT CAUGHT"
        hit = self.catch.caught_by
        return f"{hit.clause} ({hit.property})" + (" [latent]" if hit.tier == LATENT else "")

    @property
    def examples(self) -> str:
        hit = None if self.catch is None else self.catch.caught_by
        return "-" if hit is None else str(hit.examples)


def judge_entry(entry: Entry, *, seed: int = 0, examples: int | None = None, full: bool = False,
                shrink: bool = True, baseline: Baseline | None = None, device: str = "cpu") -> Verdict:
    """Hunt one zoo entry with the properties of its clause (every property with ``full``)."""
    start = time.perf_counter()
    budget = examples or entry.examples
    props = properties_for(None if full else entry.clause)
    passes = (baseline or Baseline(device)).passes(props, examples=budget, seed=seed)
    catch = hunt(entry.backend(device=device), entry.clause, name=entry.name, properties=props, examples=budget,
                 seed=seed, baseline=passes, shrink=shrink)
    z3 = z3_catch(entry.obligation) if entry.obligation else None
    return Verdict(entry.name, entry.clause, catch, z3, seconds=time.perf_counter() - start)


def judge_seeds(entry: Entry, seeds: int, **options: Any) -> Verdict:
    """``judge_entry`` at seeds ``0 .. seeds-1``: the first seed's verdict (and counterexample), caught only if
    caught as named at every seed; later seeds skip shrinking (only whether they catch it counts)."""
    verdicts = [judge_entry(entry, seed=seed, **{**options, "shrink": options.get("shrink", True) and seed == 0})
                for seed in range(seeds)]
    first = verdicts[0]
    first.missed = tuple(seed for seed, v in enumerate(verdicts) if not v.caught)
    first.seeds = seeds
    first.seconds = sum(v.seconds for v in verdicts)
    return first


def judge_mutant(mutant: SourceMutant, *, seed: int = 0, examples: int | None = None, full: bool = False,
                 baseline: Baseline | None = None, device: str = "cpu") -> Verdict:
    """Run the suite against one source mutant of impl/ (an equivalent one is reported with its reason)."""
    if mutant.equivalent:
        return Verdict(mutant.name, mutant.clause, None, note=f"equivalent: {mutant.equivalent}")
    start = time.perf_counter()
    budget = examples or mutant.examples
    props = properties_for(None if full else mutant.clause)
    passes = (baseline or Baseline(device)).passes(props, examples=budget, seed=seed)
    with mutated_backend(mutant) as backend_class:
        catch = hunt(backend_class(device=device), mutant.clause, name=mutant.name, properties=props,
                     examples=budget, seed=seed, baseline=passes, shrink=False)
    return Verdict(mutant.name, mutant.clause, catch, seconds=time.perf_counter() - start)


def table(rows: Sequence[tuple[str, ...]]) -> str:
    """Left-aligned columns, a rule under the header."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def entry_table(entries: Sequence[Entry], verdicts: Sequence[Verdict]) -> str:
    seeds = max([v.seeds for v in verdicts], default=1)
    rows = [("bug", "issue", "named", "caught by", "how", "examples", "time")
            + (("seeds caught",) if seeds > 1 else ())]
    for entry, v in zip(entries, verdicts, strict=True):
        at = (f"{v.seeds - len(v.missed)}/{v.seeds}" + (f" (missed {list(v.missed)})" if v.missed else ""),)
        rows.append((entry.name, entry.issue, entry.clause, v.caught_by if v.caught else f"NOT CAUGHT ({v.caught_by})",
                     v.how, v.examples, f"{v.seconds:.1f}s") + (at if seeds > 1 else ()))
    return table(rows)


def mutant_table(mutants: Sequence[SourceMutant], verdicts: Sequence[Verdict]) -> str:
    rows = [("mutant", "module", "slip", "named", "killed by", "examples", "time")]
    for mutant, v in zip(mutants, verdicts, strict=True):
        if mutant.equivalent:
            killed = "equivalent (not hunted)"
        elif v.caught:
            killed = v.caught_by
        else:
            killed = "SURVIVED: suite gap" if mutant.gap else f"SURVIVED ({v.caught_by})"
        rows.append((mutant.name, f"impl/{mutant.module}.py", mutant.what, mutant.clause, killed, v.examples,
                     f"{v.seconds:.1f}s"))
    return table(rows)
