"""Self-checking counterexamples: the snippet a failure prints ends by re-judging its exact example.

A failure's snippet shows the recorded calls (runnable, to step through), then calls ``reproduce``: the
property runs again on exactly the failing example (Hypothesis' ``@reproduce_failure`` blob) against
the named backend, and the snippet exits 1 while the backend still breaks the clause, 0 once fixed.
"""

from __future__ import annotations

import sys

from kvtable.conformance.context import make_context
from kvtable.conformance.counterexample import Blob
from kvtable.conformance.execute import run_property
from kvtable.conformance.properties import BY_NAME
from kvtable.exitcodes import EXIT_FAILED, EXIT_PASSED

__all__ = ["reproduce"]


def reproduce(prop: str, backend: str, *, profile: str, level: str, blob: Blob) -> int:
    """Run property ``prop`` on exactly the example of ``blob`` against ``backend``: print the verdict and return
    1 (``EXIT_FAILED``) if the backend still breaks the clause, 0 if the example now passes."""
    ctx, spec = make_context(backend, profile)
    result = run_property(BY_NAME[prop], ctx, examples=1, seed=0, spec=spec, level=level, reproduce=blob)
    if result.passed:
        print(f"{prop}: the example passes now: fixed", file=sys.stderr)
        return EXIT_PASSED
    print(f"{prop}: still {result.status.upper()} [{result.clause}]: {result.message}", file=sys.stderr)
    return EXIT_FAILED
