"""The tester's examples run on one torch thread, and the caller's thread count comes back after."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch

from kvtable.conformance.context import make_context
from kvtable.conformance.execute import run_property
from kvtable.conformance.properties import select
from kvtable.conformance.threads import one_thread


@pytest.fixture
def two_threads() -> Iterator[None]:
    was = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(was)


def test_one_thread_inside_and_the_callers_count_after(two_threads: None) -> None:
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2


def test_one_thread_restores_the_count_when_the_block_raises(two_threads: None) -> None:
    with pytest.raises(KeyError), one_thread():
        raise KeyError("x")
    assert torch.get_num_threads() == 2


def test_a_property_runs_its_examples_on_one_thread_and_hands_the_count_back(two_threads: None) -> None:
    ctx, spec = make_context("torch")
    seen: list[int] = []
    prop = select(["decode_locs"])[0]
    check = prop.check
    assert check is not None

    def counting(ctx_: object, example: object) -> None:
        seen.append(torch.get_num_threads())
        check(ctx_, example)

    result = run_property(dataclasses.replace(prop, check=counting), ctx, examples=5, seed=0, spec=spec)
    assert result.passed and result.examples == 5
    assert seen == [1] * 5
    assert torch.get_num_threads() == 2
