"""``Unsupported`` from any backend path is a discarded example, never a crash (the routes' own kernels path
included): a backend without an extend-location kernel gets ``routes/extend-locs-agree`` not applicable."""

from __future__ import annotations

from kvtable.backends import load
from kvtable.conformance.properties import select
from kvtable.conformance.runner import run_conformance
from kvtable.errors import Unsupported


class NoExtendKernel:
    """The torch backend, whose kernels have no extend-location kernel."""

    def __init__(self, debug: bool | None = None) -> None:
        self.inner = load("torch", debug=debug)
        self.name, self.device = "no-extend-kernel", "cpu"
        self.kernels = _Kernels(self.inner.kernels)

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


class _Kernels:
    def __init__(self, inner: object) -> None:
        self.inner = inner

    def stacked_extend_locs(self, *args: object) -> None:
        raise Unsupported("no extend-location kernel")

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)


def test_an_unsupported_kernel_path_discards_the_example() -> None:
    report = run_conformance(f"{__name__}:NoExtendKernel", examples=5, seed=0,
                             properties=select(["routes/extend-locs-agree"]), isolate=False)
    [result] = report.results
    assert result.status == "not applicable" and report.unsupported, report.details()
    assert "no extend-location kernel" in str(report.unsupported)
