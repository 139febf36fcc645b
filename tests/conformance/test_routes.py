"""impl/routes.py: every route declared and named once, each kernels object declaring its own, the cross-route
property killing a route that disagrees, and (slow tier) the whole suite run through each route's backend."""

from __future__ import annotations

import pytest

from kvtable.backends import load
from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.impl import StackedTorchKernels, TorchKernels, triton_kernels
from kvtable.impl.routes import OPERATIONS, ROUTES, backends, route_of, routes, table

ROUTE_PROPERTIES = ["routes/fixed-locs-agree", "routes/extend-locs-agree", "routes/replay-fill-agree"]


def test_every_operation_has_a_default_torch_route_and_a_triton_route_with_a_reason() -> None:
    for operation in OPERATIONS:
        names = [r.name for r in routes(operation)]
        assert names[0] == "torch" and "triton" in names and len(set(names)) == len(names)
    assert all(r.reason and r.devices and r.backend in ("torch", "torch-stacked", "triton") for r in ROUTES)
    assert backends() == ("torch", "torch-stacked", "triton")
    lines = table().splitlines()
    assert len(lines) == len(ROUTES) + 1 and all(r.entry in line for r, line in zip(ROUTES, lines[1:], strict=True))
    with pytest.raises(ValueError, match="operation 'decode'"):
        routes("decode")


def test_kernels_declare_the_route_they_take() -> None:
    assert [route_of(TorchKernels(), op).name for op in OPERATIONS] == ["torch", "torch", "torch"]
    assert [route_of(StackedTorchKernels(), op).name for op in OPERATIONS] == ["torch-stacked", "torch-stacked",
                                                                               "torch"]
    if triton_kernels.triton_available():
        assert {route_of(triton_kernels.TritonKernels(), op).name for op in OPERATIONS} == {"triton"}
    with pytest.raises(LookupError, match="declare no route"):
        route_of(object(), "fixed-locs")


class OffByOneGrouped(TorchKernels):
    """A grouped fast path one slot past the stacked formula: the routes disagree."""

    def grouped_locs(self, tables, page_sizes, seq_lens, out, bs, n, **bounds):  # noqa: ANN001, ANN003, ANN202
        super().grouped_locs(tables, page_sizes, seq_lens, out, bs, n, **bounds)
        out[: len(tables), : bs * n] += 1


def test_the_cross_route_property_names_the_route_that_disagrees() -> None:
    backend = TorchBackend(kernels=OffByOneGrouped())
    report = run_conformance(backend, properties=select(ROUTE_PROPERTIES), examples=10, seed=0, isolate=False,
                             shrink=False)
    status = {r.property: r.status for r in report.results}
    assert status == {"routes/fixed-locs-agree": "failed", "routes/extend-locs-agree": "passed",
                      "routes/replay-fill-agree": "passed"}
    failed, = report.failures
    assert "backend.kernels.grouped_locs disagrees" in failed.message and failed.property_clause == "G4 replay-locs"


def _route_properties_run(backend: str) -> None:
    report = run_conformance(backend, properties=select(ROUTE_PROPERTIES), examples=10, seed=0, isolate=False)
    assert report.passed, report.table()


def test_the_cross_route_property_passes_on_the_built_in_routes() -> None:
    _route_properties_run("torch")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "torch-stacked", "triton"])
def test_whole_suite_judges_each_route_backend(backend: str) -> None:
    """Each route's backend (impl/routes.py) through the whole conformance suite at 5 examples per property
    (interpreted Triton included: about 35 s on a quiet CPU)."""
    if backend == "triton" and not triton_kernels.triton_available():
        pytest.skip("triton is not installed: the Triton route cannot run here")
    report = run_conformance(load(backend), examples=5, seed=0, isolate=False, shrink=False, level="strict")
    print(f"\n{report.table()}\n{report.summary()}")  # the CI log shows each route's run
    assert report.passed, report.table()
    assert len(report.results) - len(report.not_applicable) >= 60
