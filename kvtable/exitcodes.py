"""The exit statuses every ``kvtable`` command shares, and ``UsageError`` for the bad invocations that map to 2.

0 every check passed; 1 the backend (or the spec) broke the contract; 2 a bad invocation or unusable
infrastructure (an unknown backend or property, a malformed or unreachable database, an unwritable
path), reported in one line before any work starts; 3 skipped, a dependency the run needs is missing
here; 130 interrupted (Ctrl-C), after reporting what finished.
"""

from __future__ import annotations

EXIT_PASSED = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_SKIPPED = 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A bad invocation or unusable infrastructure, never a verdict on the backend: one line on stderr, exit 2."""
