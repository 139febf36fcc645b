"""Self-checking counterexamples: the snippet a failure prints ends by re-judging its exact example.

A failure's snippet shows the recorded calls (runnable, to step through), then calls ``reproduce``: the
property runs again on exactly the failing example (Hypothesis' ``@reproduce_failure`` blob) against
the named backend, and the snippet exits 1 while the backend still breaks the clause, 0 once fixed.
"""

from __future__ import annotations

import re
import sys

from kvtable.exitcodes import EXIT_FAILED, EXIT_PASSED

__all__ = ["blob_of", "reproduce", "verdict_lines"]

Blob = tuple[str, bytes]
"""Hypothesis' version and the choice sequence of one example, as ``@reproduce_failure`` takes them."""
_BLOB = re.compile(r"@reproduce_failure\('([^']+)', (b'[A-Za-z0-9+/=]*')\)")


def blob_of(err: BaseException) -> Blob | None:
    """The reproduce-failure blob Hypothesis attached to a failure's notes (``print_blob``), if any."""
    for note in getattr(err, "__notes__", ()):
        if found := _BLOB.search(note):
            return found[1], found[2][2:-1].encode()
    return None


def verdict_lines(prop: str, spec: str, profile: str, level: str, blob: Blob) -> str:
    """The snippet's last lines: re-judge the example, exit 1 while it still fails."""
    return ("import sys\nfrom kvtable.conformance.reproduce import reproduce\n"
            f"sys.exit(reproduce({prop!r}, {spec!r}, profile={profile!r}, level={level!r}, blob={blob!r}))")


def reproduce(prop: str, backend: str, *, profile: str, level: str, blob: Blob) -> int:
    """Run property ``prop`` on exactly the example of ``blob`` against ``backend``: print the verdict and return
    1 (``EXIT_FAILED``) if the backend still breaks the clause, 0 if the example now passes."""
    from kvtable.conformance.properties import BY_NAME
    from kvtable.conformance.runner import make_context, run_property

    ctx, spec = make_context(backend, profile)
    result = run_property(BY_NAME[prop], ctx, examples=1, seed=0, spec=spec, level=level, reproduce=blob)
    if result.passed:
        print(f"{prop}: the example passes now: fixed", file=sys.stderr)
        return EXIT_PASSED
    print(f"{prop}: still {result.status.upper()} [{result.clause}]: {result.message}", file=sys.stderr)
    return EXIT_FAILED
