"""Kernel mutants: one-line slips in impl/triton_kernels.py, each caught by a kernel obligation with a replay.

Each is a ``SourceMutant`` of kvtable/zoo/mutants.py on ``triton_kernels`` (the same snippet rules: every
``old`` occurs exactly once). ``mutant_kernels`` executes the mutated source as a separate module, so
its ``@triton.jit`` functions are real (interpretable) kernels and the originals stay untouched; the
symbolic executor reads the same source (prover/symexec/run.py), and the guarded interpreter replays
the counterexample on it (prover/bindings/replay.py).
"""

from __future__ import annotations

import functools
import linecache
import types

from kvtable.zoo.mutants import SourceMutant, mutated_source, original_source

KERNEL_MUTANTS: tuple[SourceMutant, ...] = (
    SourceMutant("triton-width-mask-dropped", "triton_kernels",
                 (("in_table = mask & (col >= 0) & (col < width)", "in_table = mask & (col >= 0)"),),
                 "G4", "the location kernels read a column past the group's width (vLLM #53982's class)"),
    SourceMutant("triton-page-clamp-dropped", "triton_kernels",
                 (("return tl.maximum(page.to(tl.int64), 0) * ps + pos % ps",
                   "return page.to(tl.int64) * ps + pos % ps"),),
                 "G4", "a pad read (-1) is not sent to page 0: the location goes negative"),
    SourceMutant("triton-position-clamp-dropped", "triton_kernels",
                 (("pos = tl.maximum(seq - n + t, 0)", "pos = seq - n + t"),),
                 "W2", "verify positions are not clamped at 0: a padded row writes offset -1 of its page"),
    SourceMutant("triton-int32-product", "triton_kernels",
                 (("    g = tl.program_id(0).to(tl.int64)\n"
                   "    i = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK).to(tl.int64)\n"
                   "    mask = i < total\n    b = i // n",
                   "    g = tl.program_id(0)\n    i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)\n"
                   "    mask = i < total\n    b = i // n"),),
                 "G4", "group and row indices stay int32: g * stride_tg wraps past 2^31 elements (vLLM #1486's class)"),
    SourceMutant("triton-fill-int32-product", "triton_kernels",
                 (("ratio = tl.load(meta + stride_mf + stride_mf).to(tl.int64)  # not 2 * stride_mf: an int32 product",
                   "ratio = tl.load(meta + 2 * stride_mf).to(tl.int64)"),),
                 "G3", "the replay fill's metadata column 2 at 2 * stride_mf, an int32 product that wraps for strides"
                       " >= 2^30 (the bug the kernel proof found in impl/triton_kernels.py, put back)"),
    SourceMutant("triton-ceil-division", "triton_kernels",
                 (("col = pos // ps", "col = (pos + ps - 1) // ps"),),
                 "W2", "the column rounds up instead of down: a position inside a page reads the next column"),
)

BY_NAME = {m.name: m for m in KERNEL_MUTANTS}


@functools.cache
def mutant_kernels(name: str) -> types.ModuleType:
    """The mutated impl/triton_kernels.py as its own module (Triton reads a kernel's source: it is registered)."""
    mutant = BY_NAME[name]
    origin, _ = original_source(mutant.module)
    source = mutated_source(mutant)
    filename = f"{origin} [{mutant.name}]"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    module = types.ModuleType(f"kvtable.impl.triton_kernels_mutant_{name.replace('-', '_')}")
    module.__file__ = filename
    exec(compile(source, filename, "exec"), module.__dict__)  # noqa: S102 (our own source, one edit applied)
    return module
