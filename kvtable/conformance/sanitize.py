"""What the watched backend calls found, as a safety failure: out-of-bounds indexing, inputs written, and under
``--sanitize`` an out-of-bounds Triton access.

``checked_launches`` runs each Triton interpreter launch under the prover's guard (prover/symexec/guard.py, the
hooks its counterexample replay uses too), which blocks every load or store outside the launch's tensors; it
raises when the launch ends. ``oob.IndexGuard`` stops an eager indexing op past its tensor; ``integrity`` sees a
call that wrote into its inputs. A property may take any exception for a refusal (the safety properties do: a refusal is
safe), so each finding is recorded in ``watch.FOUND``, and ``Context.example`` turns what an example recorded
into a safety-tier ``Mismatch``, whatever the property made of the exception.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from kvtable.conformance.checks import Mismatch
from kvtable.conformance.integrity import InputChanged
from kvtable.conformance.levels import SAFETY
from kvtable.conformance.oob import OutOfBoundsIndex
from kvtable.conformance.watch import FOUND
from kvtable.internals import private
from kvtable.prover.symexec.guard import GuardHit, guarded, region_of

OUT_OF_BOUNDS = "out-of-bounds access"
"""The failure kind of an access the Triton guard blocked."""


class OutOfBoundsAccess(AssertionError):
    """A Triton kernel's load or store outside every tensor it was launched with (blocked, never performed)."""

    def __init__(self, kernel: str, hits: Sequence[GuardHit]) -> None:
        first = hits[0]
        super().__init__(f"[safety] {kernel}: {len(hits)} out-of-bounds access(es) blocked; the first a {first.kind}"
                         f" by program {first.program}, lane {first.lane}, {first.nearest}")
        self.kernel, self.hits = kernel, list(hits)


def _tensor_arguments(args: Sequence[object], kwargs: dict[str, object]) -> dict[str, torch.Tensor]:
    named: dict[str, Any] = {f"argument {i}": a for i, a in enumerate(args)} | dict(kwargs)
    tensors = {name: getattr(t, "base", t) for name, t in named.items() if hasattr(t, "data_ptr")}
    return tensors | _pointees(tensors)


def _pointees(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The live tensors a uint64 argument's entries point at (a table of ``data_ptr()`` values, as SGLang's
    ``write_req_to_token_pool_triton`` takes its prefix tensors): a load through such a pointer is followed
    into that tensor, not blocked. An entry no live tensor starts at stays unregistered (a dangling pointer)."""
    wanted = {int(address): f"{name}[{i}]" for name, t in tensors.items()
              if t.dtype == torch.uint64 and t.device.type == "cpu"
              for i, address in enumerate(t.reshape(-1).to(torch.int64).tolist())}
    if not wanted:
        return {}
    found: dict[str, torch.Tensor] = {}
    for obj in gc.get_objects():
        if not issubclass(type(obj), torch.Tensor) or obj.device.type != "cpu" or not obj.numel():
            continue  # type(), not isinstance(): a lazy module attribute among the objects warns on __class__
        entry = wanted.get(obj.data_ptr())
        if entry is not None:
            if entry not in found or region_of("", obj).nbytes > region_of("", found[entry]).nbytes:
                found[entry] = obj  # the widest tensor starting there: a view's base, not the view
    return {f"{entry} -> tensor": t for entry, t in found.items()}


@contextlib.contextmanager
def checked_launches(on_hit: Callable[[OutOfBoundsAccess], None] | None = None) -> Iterator[None]:
    """Every Triton interpreter launch inside is bounds-checked against its own tensor arguments: an access
    outside all of them is blocked and raises ``OutOfBoundsAccess`` when the launch ends (``--sanitize``);
    ``on_hit`` sees each such error first (a caller may catch the exception: the record stays)."""
    GridExecutor = private("GridExecutor")

    launch = GridExecutor.__call__

    def checked(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 (Triton's signature)
        with guarded(_tensor_arguments(args, kwargs)) as log:
            result = launch(self, *args, **kwargs)
        if log.hits:
            error = OutOfBoundsAccess(getattr(self.fn, "__name__", "a kernel"), log.hits)
            if on_hit is not None:
                on_hit(error)
            raise error
        return result

    GridExecutor.__call__ = checked
    try:
        yield
    finally:
        GridExecutor.__call__ = launch


@contextlib.contextmanager
def sanitizing() -> Iterator[None]:
    """Every Triton interpreter launch inside is bounds-checked; what it blocks is recorded for the example."""
    FOUND.clear()
    try:
        with checked_launches(on_hit=FOUND.append):
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
