"""``--sanitize`` follows pointer loads: a kernel that reads a table of tensor addresses (as SGLang's
``write_req_to_token_pool_triton`` reads its prefix tensors) loads through them, and only an access past a
pointee, or through a pointer to no live tensor, is blocked."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("kvtable.impl.triton_kernels")  # sets TRITON_INTERPRET where there is no GPU
triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

from kvtable.conformance.sanitize import OutOfBoundsAccess, checked_launches  # noqa: E402


@triton.jit
def gather_rows(table_ptr, lens_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    src = tl.load(table_ptr + pid).to(tl.pointer_type(tl.int64))
    n = tl.load(lens_ptr + pid)
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + pid * BLOCK + offs, tl.load(src + offs, mask=offs < n, other=0))


def _table(*tensors: torch.Tensor) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.uint64)


def test_loads_through_a_pointer_table_are_followed_not_blocked() -> None:
    a, b = torch.arange(10, 14), torch.arange(20, 23)
    out = torch.zeros(8, dtype=torch.int64)
    with checked_launches():
        gather_rows[(2,)](_table(a, b), torch.tensor([4, 3]), out, BLOCK=4)
    assert out.tolist() == [10, 11, 12, 13, 20, 21, 22, 0]


def test_a_read_past_a_pointee_is_still_blocked_naming_it() -> None:
    a, b = torch.arange(10, 14), torch.arange(20, 23)
    out = torch.zeros(8, dtype=torch.int64)
    with checked_launches(), pytest.raises(OutOfBoundsAccess,
                                           match=r"past the end of argument 0\[1\] -> tensor") as err:
        gather_rows[(2,)](_table(a, b), torch.tensor([4, 4]), out, BLOCK=4)  # b has 3 elements
    assert [(h.kind, h.program[0], h.lane) for h in err.value.hits] == [("load", 1, 3)]
