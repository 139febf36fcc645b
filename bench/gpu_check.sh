#!/usr/bin/env bash
# The one script run when a GPU is lent (under 8 minutes in all): the Triton unit tests compiled, compiled Triton
# against the torch route on large inputs, `kvtable conform` on CUDA tensors for every GPU route (torch,
# torch-stacked, compiled Triton; the graph runner's properties included), then the bench's GPU rows.
# Every step's outcome lands in one JSON file (default bench/results/gpu-check.json); bench/gpu_check.py has
# the steps and their time caps. Usage: bench/gpu_check.sh [--out PATH] [--budget SECONDS] [--examples N]
set -euo pipefail
cd "$(dirname "$0")/.."
unset TRITON_INTERPRET
exec "${PYTHON:-python}" -m kvtable.bench.gpu_check "$@"
