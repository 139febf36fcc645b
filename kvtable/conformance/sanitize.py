"""``--sanitize`` in the tier machinery: an out-of-bounds Triton access during an example fails it at the safety tier.

The guard (prover/symexec/guard.py) blocks every load or store outside a launch's tensors and raises when the
launch ends. A property may take any exception for a refusal (the safety properties do: a refusal is safe),
so the guard's errors are also recorded here, and ``Context.example`` turns what an example recorded into a
safety-tier ``Mismatch``, whatever the property made of the exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from kvtable.conformance.checks import Mismatch
from kvtable.conformance.levels import SAFETY

OUT_OF_BOUNDS = "out-of-bounds access"
"""The failure kind of a blocked access."""
_FOUND: list[Any] = []
"""The ``OutOfBoundsAccess`` errors of the example running (the guard is on only in this process)."""


@contextlib.contextmanager
def sanitizing() -> Iterator[None]:
    """Every Triton interpreter launch inside is bounds-checked; what it blocks is recorded for the example."""
    from kvtable.prover.symexec.guard import sanitizing as guard

    _FOUND.clear()
    try:
        with guard(on_hit=_FOUND.append):
            yield
    finally:
        _FOUND.clear()


def out_of_bounds(clause: str) -> Mismatch | None:
    """The safety failure for the accesses blocked since the last call (None: there were none); clears them."""
    if not _FOUND:
        return None
    found, first = list(_FOUND), _FOUND[0]
    _FOUND.clear()
    launches = f"{len(found)} launch(es)" if len(found) > 1 else "1 launch"
    return Mismatch(clause, f"{launches} accessed memory outside their tensors (blocked by --sanitize): {first}",
                    tier=SAFETY, kind=OUT_OF_BOUNDS)
