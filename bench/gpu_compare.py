"""Compiled Triton against the torch route on large CUDA inputs: equal outputs, and microseconds per call.

Part of bench/gpu_check.sh; needs CUDA. One drawn-at-random case per fused operation, large enough that a
wrong mask or stride shows: 4 groups, 1024 rows, 512 columns, bs 1024.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

GROUPS, ROWS, WIDTH, BS, N, TOKENS = 4, 1024, 512, 1024, 4, 8192
CALLS_TIMED = 50


def cases(device: str = "cuda") -> dict[str, tuple[Callable[[object, torch.Tensor], None], tuple[int, ...]]]:
    """Each operation's call on fixed random inputs, and its output's shape (slack past what it writes)."""
    gen = torch.Generator().manual_seed(0)

    def ints(low: int, high: int, *shape: int) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=gen, dtype=torch.int32).to(device)

    tables, widths = ints(-1, 1 << 20, GROUPS, ROWS, WIDTH), ints(1, WIDTH + 1, GROUPS)
    sizes = torch.tensor([16, 32, 64, 128], dtype=torch.int32, device=device)
    seq = ints(1, WIDTH * 16, BS)
    rows, positions = ints(0, BS, TOKENS).long(), ints(0, WIDTH * 16, TOKENS).long()
    packed = ints(-1, 1 << 20, GROUPS * BS * 128)
    meta = torch.tensor([[g * BS * 128, 128, 1 << g % 3] for g in range(GROUPS)], dtype=torch.int32, device=device)
    return {
        "stacked_locs": (lambda k, o: k.stacked_locs(tables, widths, sizes, seq, o, BS, N), (GROUPS, BS * N + 5)),
        "stacked_extend_locs": (lambda k, o: k.stacked_extend_locs(tables, widths, sizes, rows, positions, o),
                                (GROUPS, TOKENS + 5)),
        "replay_fill": (lambda k, o: k.replay_fill(packed, meta, o, BS, BS - 7, -1), (GROUPS, BS + 3, 512)),
    }


def main() -> int:
    from kvtable.impl.torch_kernels import TORCH_KERNELS
    from kvtable.impl.triton_kernels import TritonKernels

    equal = True
    for name, (call, shape) in cases().items():
        outs, times = [], []
        for kernels in (TritonKernels(), TORCH_KERNELS):
            out = torch.full(shape, -7, dtype=torch.int32, device="cuda")
            call(kernels, out)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(CALLS_TIMED):
                call(kernels, out)
            torch.cuda.synchronize()
            outs.append(out)
            times.append((time.perf_counter() - start) / CALLS_TIMED * 1e6)
        same = torch.equal(*outs)
        equal &= same
        print(f"{name:20s} equal={same}  triton {times[0]:8.1f} us  torch {times[1]:8.1f} us")
    return 0 if equal else 1


if __name__ == "__main__":
    raise SystemExit(main())
