"""The one error kvtable raises for broken input: it names the clause and where the breach is."""

from __future__ import annotations


class ContractViolation(ValueError):
    """Input (or output) breaks a clause of spec/SPEC.md.

    ``clause`` is the clause's id and name as written in SPEC.md (``"T2 dummy-row"``); ``group``, ``row``
    and ``col`` locate the offending entry where there is one.
    """

    def __init__(
        self,
        clause: str,
        message: str,
        *,
        group: str | None = None,
        row: int | None = None,
        col: int | None = None,
    ) -> None:
        from kvtable.spec.clauses import clause_label

        self.clause = clause_label(clause)
        self.detail = message
        self.group = group
        self.row = row
        self.col = col
        where = []
        if group is not None:
            where.append(f"group {group!r}")
        if row is not None:
            where.append(f"row {row}")
        if col is not None:
            where.append(f"col {col}")
        location = (" " + " ".join(where)) if where else ""
        super().__init__(f"[{self.clause}]{location}: {message}")

    @property
    def clause_id(self) -> str:
        """The short id alone, e.g. ``"T2"``."""
        short: str = self.clause.split()[0]
        return short


class StaleGraphState(ContractViolation, RuntimeError):
    """A CUDA-graph replay would read stale or missing per-group buffers (clause G5 stale-guard)."""


class Unsupported(Exception):
    """A backend does not support this configuration (a ratio other than 1, several page sizes in one
    runner, re-anchor, ...): the conformance runner discards the example and counts it with ``reason``,
    never failing it and never shrinking toward it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)
