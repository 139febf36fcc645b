"""Rendering a run's report: the per-clause table, the notes, each failure's counterexample, the summary, JSON."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from kvtable.conformance.levels import DEFAULT_LEVEL, LATENT, LEVELS
from kvtable.conformance.notes import note_lines
from kvtable.conformance.result import PropertyResult
from kvtable.spec.clauses import CLAUSES

__all__ = ["Report"]


@dataclass
class Report:
    """The results of a conformance or fuzz run: per property, with the clause each checks or broke."""

    backend: str
    profile: str
    seed: int
    examples: int
    """``conform``: examples per property; ``fuzz``: the run's total budget."""
    kind: str = "conform"
    results: list[PropertyResult] = field(default_factory=list)
    interrupted: bool = False
    """Ctrl-C stopped the run: ``results`` holds the properties that finished."""
    level: str = DEFAULT_LEVEL
    """``safety``, ``correct`` (safety + correctness) or ``strict`` (all three tiers): what fails the run."""
    budget: float | None = None
    """``--budget``: the wall seconds the properties shared (each one's examples are in ``results``)."""

    @property
    def passed(self) -> bool:
        """No property failed or errored at the level, and at least one property applied and ran examples
        (not-applicable ones neither pass nor fail the run; a run where none applied is no pass)."""
        return not self.failures and any(r.applicable and r.examples > 0 for r in self.results)

    @property
    def failures(self) -> list[PropertyResult]:
        return [r for r in self.results if r.applicable and not r.passed]

    @property
    def not_applicable(self) -> list[PropertyResult]:
        return [r for r in self.results if not r.applicable]

    @property
    def failed_clauses(self) -> list[str]:
        """The clauses broken, each once, in registry order of first failure."""
        return list(dict.fromkeys(r.clause for r in self.failures))

    @property
    def unsupported(self) -> dict[str, int]:
        """Examples discarded as unsupported by the backend, by reason, over all properties."""
        total: dict[str, int] = {}
        for r in self.results:
            for reason, n in r.unsupported.items():
                total[reason] = total.get(reason, 0) + n
        return total

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in self.results)

    def table(self) -> str:
        """The per-clause table: clause, property, result (N/A where it does not apply), examples, time, tier."""
        rows = [("clause", "property", "result", "examples", "time", "tier")]
        for r in sorted(self.results, key=lambda r: (_clause_order(_own_id(r)), r.property)):
            result = r.label + (f" ({len(r.notes)} note{'s' * (len(r.notes) > 1)})" if r.notes else "")
            if not r.passed and r.applicable and r.clause_id != _own_id(r):
                result += f" (broke {r.clause_id})"
            rows.append((r.property_clause or r.clause, r.property, result, str(r.examples) if r.applicable else "-",
                         f"{r.seconds:.2f}s", r.tier))
        widths = [max(len(row[i]) for row in rows) for i in range(6)]
        lines = ["  ".join(cell.rjust(w) if i in (3, 4) else cell.ljust(w) for i, (cell, w) in
                           enumerate(zip(row, widths, strict=True))).rstrip() for row in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def summary(self) -> str:
        if self.passed:
            verdict = "PASS"
        elif self.failures:
            verdict = "FAIL: " + ", ".join(dict.fromkeys(
                (r.property_clause or r.clause) + (f" (broke {r.clause})" if r.clause_id != _own_id(r) else "")
                for r in self.failures))
        else:
            verdict = "FAIL: no property applied to this backend"
        if self.interrupted:
            verdict = f"INTERRUPTED after {len(self.results)} properties; {verdict} so far"
        applicable = len(self.results) - len(self.not_applicable)
        skipped = f", {len(self.not_applicable)} not applicable" if self.not_applicable else ""
        unsupported = sum(self.unsupported.values())
        discarded = f", unsupported: {unsupported} examples" if unsupported else ""
        latent = sum(f.tier == LATENT for r in self.results for f in r.failures)
        apart = f", {latent} latent failure(s) (reachable only past a stated size)" if latent else ""
        return (f"kvtable {self.kind}: backend {self.backend}, profile {self.profile}, level {self.level}, "
                f"seed {self.seed}: {sum(r.passed for r in self.results)}/{applicable} properties passed{skipped}"
                f"{discarded}{apart} in {self.seconds:.1f}s{self._budget_words()}; {verdict}")

    def _budget_words(self) -> str:
        """Under ``--budget``: how many examples the properties got (each one's count is in the table)."""
        ran = [r.examples for r in self.results if r.applicable]
        if self.budget is None or not ran:
            return ""
        return (f" (budget {self.budget:g}s: {sum(ran)} examples, {min(ran)}-{max(ran)} per property as the table "
                "lists; the counts depend on the machine: the same command without --budget draws these examples "
                "and the rest)")

    def notes(self) -> str:
        """Why each not-applicable property was not run, unsupported examples by reason, and failures of
        tiers above the run's level (``notes.note_lines``)."""
        lines = [f"N/A {r.property}: {r.message}" for r in self.not_applicable]
        lines += [f"unsupported: {n} examples: {reason}" for reason, n in sorted(self.unsupported.items())]
        lines += note_lines(self.results, self.profile)
        return "\n".join(lines)

    def details(self) -> str:
        """Each failure at the level: the property and its clause, the clause broken, the message and the
        replayable counterexample; every distinct failure of a property in turn."""
        blocks = []
        for r in self.failures:
            if r.status == "error" or not r.failures:
                blocks.append(f"=== {r.status.upper()} [{r.clause}] {r.property}\n{r.message}\n"
                              f"--- counterexample (replayable):\n{r.counterexample}")
                continue
            for f in r.failures:
                if f.tier in LEVELS[r.level]:
                    blocks.append(f"=== FAILED [{r.property_clause}] {r.property}: broke [{f.clause}] "
                                  f"({f.tier}: {f.kind})\n{f.message}\n"
                                  f"--- counterexample (replayable):\n{f.counterexample}")
        return "\n\n".join(blocks)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["passed"] = self.passed
        out["failed_clauses"] = self.failed_clauses
        out["not_applicable"] = [r.property for r in self.not_applicable]
        out["unsupported"] = self.unsupported
        for r in out["results"]:
            r["clause_id"] = r["clause"].split()[0]
            r["property_clause_id"] = r["property_clause"].split()[0] if r["property_clause"] else r["clause_id"]
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def _own_id(result: PropertyResult) -> str:
    return (result.property_clause or result.clause).split()[0]


def _clause_order(clause_id: str) -> int:
    ids = [c.id for c in CLAUSES]
    return ids.index(clause_id) if clause_id in ids else len(ids)
