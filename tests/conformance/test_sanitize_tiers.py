"""``--sanitize`` findings are safety-tier failures in the normal tier machinery, even where a property would
take the guard's exception for a refusal."""

from __future__ import annotations

import pytest
import torch

from kvtable.impl import triton_kernels

if not triton_kernels.triton_available():
    pytest.skip("triton is not installed; --sanitize guards Triton interpreter launches", allow_module_level=True)

from kvtable.backends.torch_backend import TorchBackend  # noqa: E402
from kvtable.cli import main  # noqa: E402
from kvtable.conformance.checks import Mismatch  # noqa: E402
from kvtable.conformance.context import make_context  # noqa: E402
from kvtable.conformance.levels import SAFETY  # noqa: E402
from kvtable.conformance.properties import select  # noqa: E402
from kvtable.conformance.runner import run_conformance  # noqa: E402
from kvtable.conformance.sanitize import OUT_OF_BOUNDS, OutOfBoundsAccess, sanitizing  # noqa: E402
from kvtable.conformance.watch import FOUND  # noqa: E402
from kvtable.zoo.triton_mutants import mutant_kernels  # noqa: E402


def unmasked() -> TorchBackend:
    """The Triton kernels without their ``col < width`` mask: a stale length reads past the table."""
    return TorchBackend(kernels=mutant_kernels("triton-width-mask-dropped").TritonKernels())


def stale_read(kernels: object) -> None:
    tables = torch.tensor([[[7], [9]]], dtype=torch.int32)
    one, seq_lens = torch.tensor([1], dtype=torch.int32), torch.tensor([1, 5], dtype=torch.int32)
    kernels.stacked_locs(tables, one, one, seq_lens, torch.zeros(1, 2, dtype=torch.int32), bs=2, n=1)


def test_a_swallowed_out_of_bounds_access_still_fails_the_example_at_the_safety_tier() -> None:
    ctx, _ = make_context("torch", "kvtable")
    with sanitizing(), pytest.raises(Mismatch, match=r"\[G4\] 1 launch accessed memory outside") as err:
        with ctx.example("G4"):
            try:
                stale_read(unmasked().kernels)
            except Exception:  # noqa: BLE001 - as a safety property takes any exception for a refusal
                pass
    assert err.value.tier == SAFETY and err.value.kind == OUT_OF_BOUNDS
    assert "_stacked_locs_kernel" in str(err.value) and "past the end of argument 0" in str(err.value)
    with sanitizing(), ctx.example("G4"):  # kvtable's own kernel masks the column: nothing blocked
        stale_read(triton_kernels.TritonKernels())


def test_without_sanitize_nothing_is_recorded() -> None:
    """The unmasked kernel's stale read goes unguarded without --sanitize: no finding, no failure; the same read
    under --sanitize is recorded."""
    ctx, _ = make_context("torch", "kvtable")
    with ctx.example("G4"):
        stale_read(unmasked().kernels)
        assert list(FOUND) == []  # read before the example's end drains what it found
    with sanitizing():
        with pytest.raises(OutOfBoundsAccess):
            stale_read(unmasked().kernels)
        assert [type(found) for found in FOUND] == [OutOfBoundsAccess]


@pytest.mark.slow
def test_an_out_of_bounds_kernel_fails_its_property_at_the_safety_tier() -> None:
    with sanitizing():
        report = run_conformance(unmasked(), examples=60, seed=0, properties=select(["kernels/stacked-locs"]),
                                 level="safety")
    result = report.results[0]
    assert not report.passed and result.tier == SAFETY, report.details()
    assert result.failures[0].kind == OUT_OF_BOUNDS and result.failures[0].tier == SAFETY
    assert "blocked by --sanitize" in result.message


def test_conform_sanitize_reports_the_safety_tier(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["conform", "--backend", "triton", "--sanitize", "--examples", "5", "--level", "safety",
               "--property", "kernels/stacked-locs", "--property", "safety/int32-wrap"])
    out = capsys.readouterr().out
    assert rc == 0 and "PASSED" in out, out
