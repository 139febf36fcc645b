"""Resident memory a backend gains across one property's examples, and the operation that gained it.

``--max-memory-growth``: the calls of a property are accounted as they start (each call's gain is the resident
memory between its start and the next call's), in a worker (``isolation``, killed past the bound) and in this
process (``runner``: the property's verdict once it ends), so a leaking backend is a ``memory`` verdict that
names the operation, never silence.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["MEMORY", "Growth", "resident_bytes"]

MEMORY = "memory"


_STATM: tuple[int, int] | None = None
"""(pid, descriptor) of ``/proc/self/statm`` opened once per process: ``/proc/self`` names the process that opened
it, so a forked worker opens its own."""
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 0


def resident_bytes() -> int:
    """This process's resident memory in bytes (``/proc/self/statm``; 0 where there is none: not watched). Read on
    every backend call: one ``pread`` of a descriptor kept open, not an open, a read and a close (10x the cost)."""
    global _STATM
    try:
        if _STATM is None or _STATM[0] != os.getpid():
            _STATM = (os.getpid(), os.open("/proc/self/statm", os.O_RDONLY | os.O_CLOEXEC))
        return int(os.pread(_STATM[1], 128, 0).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError, AttributeError):
        return 0


@dataclass
class Growth:
    """Resident bytes gained since a property's first backend call, and by each operation's calls."""

    start: int | None = None
    """The resident bytes at the first call (growth is measured from it)."""
    last: tuple[str, int] = ("", 0)
    """The call made last and the resident bytes before it."""
    grew_in: dict[str, int] = field(default_factory=dict)

    def calling(self, statement: str, resident: int) -> int:
        """Account a call about to run (``statement`` as the transcript writes it) at ``resident`` bytes; the
        growth since the first call."""
        op, before = self.last
        self.last = (statement.partition(" = ")[2].partition("(")[0] or statement.partition("(")[0], resident)
        if self.start is None or not resident:
            self.start = resident
            return 0
        if op:
            self.grew_in[op] = self.grew_in.get(op, 0) + resident - before
        return resident - self.start

    def why(self, grown: int, bound: int, then: str) -> str:
        """The verdict's reason: the growth, the operation whose calls gained the most, the bound and ``then``."""
        top = max(self.grew_in, key=self.grew_in.__getitem__, default="")
        where = f", {self.grew_in[top] / 2**30:.2f} GiB of it in {top}(...)" if top else ""
        return (f"grew its resident memory by {grown / 2**30:.2f} GiB across the property's examples{where} "
                f"(past --max-memory-growth {bound / 2**30:g} GiB; {then})")
