"""The Kernels model by hand (sink cases included), the pitched layouts, and the kernel properties
catching kernels that break one rule of impl/kernels.py; a backend without kernels is not applicable."""

from __future__ import annotations

import pytest

from kvtable.backends.torch_backend import TorchBackend
from kvtable.conformance import kernel_model
from kvtable.conformance.properties import select
from kvtable.conformance.properties.kernels import place
from kvtable.conformance.result import NOT_APPLICABLE
from kvtable.conformance.runner import run_conformance
from kvtable.impl.torch_kernels import TORCH_KERNELS, TorchKernels
from kvtable.strategies.kernels import Layout

S = -7  # an untouched output element


def test_stacked_locs_model_sinks_pads_and_columns_past_the_width() -> None:
    tables = [[[3, -1, 9], [5, -1, 9], [0, 7, 9]]]  # width 2: column 2 belongs to another group
    out = [[S] * 4]
    kernel_model.stacked_locs(tables, [2], [4], [3, 6, 11], out, 3, 1)
    # pos 2 -> page 3; pos 5 -> the pad at col 1 sinks to offset 1; pos 10 -> col 2 >= width sinks to offset 2
    assert out == [[14, 1, 2, S]]


def test_stacked_locs_model_clamps_and_lays_out_token_major() -> None:
    out = [[S] * 5, [S] * 5]
    kernel_model.stacked_locs([[[2, 4]], [[6, -1]]], [2, 1], [2, 1], [1], out, 1, 2)
    assert out == [[4, 4, S, S, S], [6, 6, S, S, S]]  # positions max(1 - 2 + t, 0) = 0, 0


def test_extend_model_follows_the_token_order() -> None:
    out = [[S] * 3]
    kernel_model.stacked_extend_locs([[[1, 2], [3, -1]]], [2], [2], [1, 0], [1, 3], out)
    assert out == [[7, 5, S]]  # row 1 pos 1 -> page 3 offset 1; row 0 pos 3 -> page 2 offset 1


def test_replay_fill_model() -> None:
    packed = [4242, 3, -1, 0, 5]
    dst = [[[S] * 5 for _ in range(3)] for _ in range(2)]
    kernel_model.replay_fill(packed, [(1, 2, 2), (3, 2, 1)], dst, 2, 1, 0)
    assert dst[0] == [[6, 7, -1, -1, 0], [0] * 5, [S] * 5]  # real block 3 -> 6, 7; the pad stays; tail 0
    assert dst[1] == [[0, 5, 0, 0, 0], [0] * 5, [S] * 5]  # the hole stays a hole; row 2 >= bs untouched


def test_place_builds_a_pitched_strided_view() -> None:
    arg = place([[1, 2], [3, 4]], (2, 2), Layout((1, 2), 2), fill=9, device="cpu")
    assert arg.view.tolist() == [[1, 2], [3, 4]]
    assert tuple(arg.storage.shape) == (3, 8) and arg.view.stride() == (8, 2)
    assert arg.untouched_outside()
    arg.storage[2, 0] = 1
    assert not arg.untouched_outside()


class SpillingKernels(TorchKernels):
    """G4: the location kernel also zeroes ``out[g, bs*n:]``, which it must leave alone."""

    grouped_locs = None  # no fast path: the stacked kernel is the one under test

    def stacked_locs(self, tables, widths, page_sizes, seq_lens, out, bs, n):
        super().stacked_locs(tables, widths, page_sizes, seq_lens, out, bs, n)
        out[:, bs * n:] = 0


class ContiguousOutKernels(TorchKernels):
    """W3: the extend kernel writes a contiguous copy of ``out``, so a strided view never sees the values."""

    grouped_extend_locs = None  # no fast path: the stacked kernel is the one under test

    def stacked_extend_locs(self, tables, widths, page_sizes, rows, positions, out):
        super().stacked_extend_locs(tables, widths, page_sizes, rows, positions, out.contiguous())


class AllRowsKernels(TorchKernels):
    """G3: the replay fill refills every row of the buffer, rows >= bs included."""

    def replay_fill(self, packed, meta, dst, bs, actual_bs, tail_pad):
        super().replay_fill(packed, meta, dst, dst.shape[1], actual_bs, tail_pad)


class FirstGroupOnlyKernels(TorchKernels):
    """W3: the grouped extend fast path locates the first group's tokens only."""

    def grouped_extend_locs(self, tables, page_sizes, prefix_lens, extend_lens, out):
        super().grouped_extend_locs(tables[:1], page_sizes[:1], prefix_lens, extend_lens, out)


class FirstGroupLocsKernels(TorchKernels):
    """G4: the grouped decode fast path locates the first group's tokens only."""

    def grouped_locs(self, tables, page_sizes, seq_lens, out, bs, n):
        super().grouped_locs(tables[:1], page_sizes[:1], seq_lens, out, bs, n)


class StackOnlyKernels:
    """The three required operations, delegated; no optional fast path."""

    name = "stack-only"

    def __getattr__(self, attr):
        if attr in ("stacked_locs", "stacked_extend_locs", "replay_fill"):
            return getattr(TORCH_KERNELS, attr)
        raise AttributeError(attr)


@pytest.mark.parametrize(("kernels", "name", "clause"), [
    (SpillingKernels, "kernels/stacked-locs", "G4"),
    (ContiguousOutKernels, "kernels/stacked-extend-locs", "W3"),
    (FirstGroupOnlyKernels, "kernels/grouped-extend-locs", "W3"),
    (FirstGroupLocsKernels, "kernels/grouped-locs", "G4"),
    (AllRowsKernels, "kernels/replay-fill", "G3"),
], ids=lambda v: getattr(v, "__name__", v))
def test_a_kernel_breaking_one_rule_fails_its_property(kernels, name, clause) -> None:
    report = run_conformance(TorchBackend(kernels=kernels()), examples=40, seed=0, properties=select([name]),
                             shrink=False)
    assert [r.clause_id for r in report.failures] == [clause], report.details()
    assert "crashed" not in report.failures[0].message
    assert "kernels = backend.kernels" in report.failures[0].counterexample


KERNEL_PROPERTIES = ["kernels/stacked-locs", "kernels/grouped-locs", "kernels/stacked-extend-locs",
                     "kernels/grouped-extend-locs", "kernels/replay-fill"]


def test_conforming_kernels_pass() -> None:
    report = run_conformance("torch", examples=40, seed=1, properties=select(KERNEL_PROPERTIES))
    assert report.passed and all(r.passed and r.examples >= 40 for r in report.results), report.details()


def test_kernels_without_the_fast_path_skip_only_its_property() -> None:
    report = run_conformance(TorchBackend(kernels=StackOnlyKernels()), examples=5, seed=0,
                             properties=select(KERNEL_PROPERTIES))
    assert [r.property for r in report.not_applicable] == ["kernels/grouped-locs", "kernels/grouped-extend-locs"]
    assert "no optional grouped_locs fast path" in report.not_applicable[0].message
    assert "no optional grouped_extend_locs fast path" in report.not_applicable[1].message
    assert report.passed and sum(r.passed for r in report.results) == 3


def test_a_backend_without_kernels_is_not_applicable_never_passed() -> None:
    report = run_conformance("reference", examples=5, seed=0, properties=select(["kernels/replay-fill", "graph/init"]))
    na = {r.property: r for r in report.results}["kernels/replay-fill"]
    assert na.status == NOT_APPLICABLE and not na.passed and not na.applicable and na.examples == 0
    assert "exposes no fused kernels" in na.message
    assert report.passed and report.failures == [] and report.not_applicable == [na]
    assert "1/1 properties passed, 1 not applicable" in report.summary()
    assert "kernels/replay-fill  N/A" in report.table()


class SubpageFillKernels(TorchKernels):
    """A tokenspeed-style fill: at r > 1 a hole or pad becomes sub-pages 0 .. r-1 of dummy block 0, and the
    columns past the expanded row become 0 (as the tokenspeed profile's ``subpages`` says)."""

    def replay_fill(self, packed, meta, dst, bs, actual_bs, tail_pad) -> None:
        super().replay_fill(packed, meta, dst, bs, actual_bs, tail_pad)
        for g, (offset, cols, ratio) in enumerate(meta.tolist()):
            if ratio == 1:
                continue
            for b in range(min(actual_bs, bs)):
                for w in range(dst.shape[2]):
                    if w >= cols * ratio:
                        dst[g, b, w] = 0
                    elif packed[offset + b * cols + w // ratio] <= 0:
                        dst[g, b, w] = w % ratio


@pytest.mark.slow
def test_the_replay_fill_property_follows_the_profile() -> None:
    """Under tokenspeed (sub-page holes, tail pad 0) the tokenspeed-style fill passes and kvtable's fails; under
    kvtable the reverse: the expected rows are mapped through the profile, as the graph properties' are."""
    verdicts = {}
    for kernels in (TORCH_KERNELS, SubpageFillKernels()):
        for profile in ("kvtable", "tokenspeed"):
            report = run_conformance(TorchBackend(kernels=kernels), examples=60, seed=0, profile=profile,
                                     properties=select(["kernels/replay-fill"]))
            verdicts[type(kernels).__name__, profile] = report.results[0].status
            if not report.passed:
                assert report.results[0].clause.startswith("G3") and "kernels.replay_fill" in report.results[0].message
    assert verdicts == {("TorchKernels", "kvtable"): "passed", ("TorchKernels", "tokenspeed"): "failed",
                        ("SubpageFillKernels", "kvtable"): "failed", ("SubpageFillKernels", "tokenspeed"): "passed"}
