"""The exit statuses every ``kvtable`` command shares, and ``UsageError`` for the bad invocations that map to 2.

0 every check passed; 1 the backend (or the spec) broke the contract; 2 a bad invocation or unusable
infrastructure (an unknown backend or property, a malformed or unreachable database, an unwritable
path), reported in one line before any work starts; 3 skipped, a dependency the run needs is missing
here; 4 inconclusive, a limit was reached (``kvtable prove``'s z3 resource limit): not a verdict about the
contract; 5 too slow, ``kvtable prove``'s wall-clock hang guard ran out before z3's resource limit (the
machine was too slow or too loaded: no verdict, and not "unknown"); 6 cut, a trace whose recorder was not
closed, judged clean to its last whole step (``trace check``); 130 interrupted (Ctrl-C), after reporting what
finished.
"""

from __future__ import annotations

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SKIPPED = 3
EXIT_INCONCLUSIVE = 4
EXIT_TOO_SLOW = 5
EXIT_CUT = 6
EXIT_INTERRUPTED = 130

SERIOUSNESS = (EXIT_PASSED, EXIT_SKIPPED, EXIT_TOO_SLOW, EXIT_INCONCLUSIVE, EXIT_CUT, EXIT_FAILED, EXIT_USAGE,
               EXIT_INTERRUPTED)
"""From least to most serious: what a command running several steps reports when they differ."""


def most_serious(*codes: int) -> int:
    """The status of a run made of steps that ended with ``codes`` (a broken contract outweighs an unknown)."""
    return max(codes, key=lambda code: SERIOUSNESS.index(code) if code in SERIOUSNESS else len(SERIOUSNESS))


class UsageError(Exception):
    """A bad invocation or unusable infrastructure, never a verdict on the backend: one line on stderr, exit 2."""
