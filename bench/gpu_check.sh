#!/usr/bin/env bash
# On a CUDA machine: the Triton kernel tests compiled (TRITON_INTERPRET unset), one large
# compiled-Triton-vs-torch comparison of the three fused kernels (equality and time per call), then
# the bench's ops, decode and replay sections, which add their compiled-Triton GPU rows (ops: the Triton replay's
# launches, run compiled; decode/replay: device launches counted by the CUDA profiler, torch.utils.benchmark
# wall-clock with the device synchronized).
set -euo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET
PY=${PYTHON:-python}
$PY -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else "gpu_check.sh needs CUDA")'
$PY -m pytest tests/test_triton_kernels.py -q -p no:cacheprovider
$PY - <<'EOF'
import time, torch
from kvtable.impl.torch_kernels import TORCH_KERNELS as TORCH
from kvtable.impl.triton_kernels import TRITON_KERNELS as TRITON
gen, dev = torch.Generator().manual_seed(0), "cuda"
G, R, W, bs, n = 4, 1024, 512, 1024, 4
ri = lambda lo, hi, *shape: torch.randint(lo, hi, shape, generator=gen, dtype=torch.int32).to(dev)  # noqa: E731
tables, widths, ps = ri(-1, 1 << 20, G, R, W), ri(1, W + 1, G), torch.tensor([16, 32, 64, 128], device=dev, dtype=torch.int32)
seq = ri(1, W * 16, bs)
rows, pos = ri(0, bs, 8192).long(), ri(0, W * 16, 8192).long()
packed, meta = ri(-1, 1 << 20, G * bs * 128), torch.tensor([[g * bs * 128, 128, 1 << g % 3] for g in range(G)], device=dev, dtype=torch.int32)
calls = {"stacked_locs": lambda k, o: k.stacked_locs(tables, widths, ps, seq, o, bs, n),
         "stacked_extend_locs": lambda k, o: k.stacked_extend_locs(tables, widths, ps, rows, pos, o),
         "replay_fill": lambda k, o: k.replay_fill(packed, meta, o, bs, bs - 7, -1)}
shapes = {"stacked_locs": (G, bs * n + 5), "stacked_extend_locs": (G, 8192 + 5), "replay_fill": (G, bs + 3, 512)}
for name, call in calls.items():
    outs, times = [], []
    for k in (TRITON, TORCH):
        o = torch.full(shapes[name], -7, dtype=torch.int32, device=dev); call(k, o); torch.cuda.synchronize()
        t = time.perf_counter(); [call(k, o) for _ in range(50)]; torch.cuda.synchronize()
        outs.append(o); times.append((time.perf_counter() - t) / 50 * 1e6)
    print(f"{name:20s} equal={torch.equal(*outs)}  triton {times[0]:8.1f} us  torch {times[1]:8.1f} us")
EOF
$PY -m kvtable.cli bench --quick --only ops --only decode --only replay --json bench/results/gpu.json
