"""What the watched backend calls found, as a safety failure: out-of-bounds indexing, inputs written, and under
``--sanitize`` an out-of-bounds Triton access.

The Triton guard (prover/symexec/guard.py) blocks every load or store outside a launch's tensors and raises when
the launch ends; ``oob.IndexGuard`` stops an eager indexing op past its tensor; ``integrity`` sees a call that
wrote into its inputs. A property may take any exception for a refusal (the safety properties do: a refusal is
safe), so each finding is recorded in ``watch.FOUND``, and ``Context.example`` turns what an example recorded
into a safety-tier ``Mismatch``, whatever the property made of the exception.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from kvtable.conformance.checks import Mismatch
from kvtable.conformance.integrity import InputChanged
from kvtable.conformance.levels import SAFETY
from kvtable.conformance.oob import OutOfBoundsIndex
from kvtable.conformance.watch import FOUND

OUT_OF_BOUNDS = "out-of-bounds access"
"""The failure kind of an access the Triton guard blocked."""


@contextlib.contextmanager
def sanitizing() -> Iterator[None]:
    """Every Triton interpreter launch inside is bounds-checked; what it blocks is recorded for the example."""
    from kvtable.prover.symexec.guard import sanitizing as guard

    FOUND.clear()
    try:
        with guard(on_hit=FOUND.append):
            yield
    finally:
        FOUND.clear()


def unsafe_found(clause: str) -> Mismatch | None:
    """The safety failure for what the watched calls found since the last call (None: nothing); clears it."""
    if not FOUND:
        return None
    found, first = list(FOUND), FOUND[0]
    FOUND.clear()
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    if isinstance(first, OutOfBoundsIndex):
        return Mismatch(clause, f"{first}{more}: an eager indexing op past its tensor (stopped before it ran; on "
                        "CUDA a device-side assert or a garbage read)", tier=SAFETY,
                        kind=f"out-of-bounds {first.access} ({first.op})")
    if isinstance(first, InputChanged):
        return Mismatch(clause, f"{first}{more}", tier=SAFETY, kind=f"input changed: {first.name}")
    launches = f"{len(found)} launch(es)" if len(found) > 1 else "1 launch"
    return Mismatch(clause, f"{launches} accessed memory outside their tensors (blocked by --sanitize): {first}",
                    tier=SAFETY, kind=OUT_OF_BOUNDS)
