"""kvtable's own Triton kernels (impl/triton_kernels.py) as bindings: how impl/ launches each one.

Sizes and counts are int32 parameters; the ``requires`` are the host checks of ``TritonKernels``
(``_require``, ``_check_stack``) and of impl/validate.py that the launch relies on. impl/ (torch, triton)
is imported only when a binding is built, so ``kvtable prove --help`` stays light.
"""

from __future__ import annotations

from types import ModuleType

from kvtable.prover.bindings.binding import INT32_MAX, Binding, TensorSpec

ANY = (0, INT32_MAX)
SOME = (1, INT32_MAX)

_STACK = {
    "tables_ptr": TensorSpec("int32", ("G", "R", "W"), ("stride_tg", "stride_tr", "stride_tw")),
    "widths_ptr": TensorSpec("int32", ("Gw",), ("stride_wg",)),
    "ps_ptr": TensorSpec("int32", ("Gp",), ("stride_pg",)),
    "out_ptr": TensorSpec("int32", ("Go", "cap"), ("stride_og", "stride_oi")),
}
_STACK_ROLES = {"table": "tables_ptr", "widths": "widths_ptr", "page_sizes": "ps_ptr", "out": "out_ptr"}
_STACK_REQUIRES = ("Gw >= G", "Gp >= G", "Go >= G")


def _impl() -> ModuleType:
    from kvtable.impl import triton_kernels
    return triton_kernels


def stacked_locs(kernel: object = None, clause: str = "G4") -> Binding:
    """``_stacked_locs_kernel`` as ``TritonKernels.stacked_locs`` launches it: grid (G, cdiv(bs*n, BLOCK))."""
    tk = _impl()
    return Binding(
        kernel=kernel or tk._stacked_locs_kernel, clause=clause, name="stacked-locs",
        params={"G": SOME, "R": ANY, "W": SOME, "Gw": ANY, "Gp": ANY, "Go": ANY, "cap": ANY, "S": ANY,
                "bs": ANY, "n": SOME},
        tensors={**_STACK, "seq_ptr": TensorSpec("int32", ("S",), ("stride_s",))},
        scalars={"table_w": "W", "n": "n", "total": "bs*n"},
        constexprs={"BLOCK": tk.LOCS_BLOCK},
        grid=("G", f"cdiv(bs*n, {tk.LOCS_BLOCK})"),
        requires=(*_STACK_REQUIRES, "R >= bs", "S >= bs", "cap >= bs*n", "bs*n >= 1"),
        roles={**_STACK_ROLES, "lengths": "seq_ptr", "n": "n", "bs": "bs"},
    )


def stacked_extend_locs(kernel: object = None, clause: str = "W3") -> Binding:
    """``_stacked_extend_locs_kernel`` as ``TritonKernels.stacked_extend_locs`` launches it."""
    tk = _impl()
    return Binding(
        kernel=kernel or tk._stacked_extend_locs_kernel, clause=clause, name="extend-locs",
        params={"G": SOME, "R": ANY, "W": SOME, "Gw": ANY, "Gp": ANY, "Go": ANY, "cap": ANY, "T": SOME},
        tensors={**_STACK, "rows_ptr": TensorSpec("int64", ("T",), ("stride_rows",)),
                 "pos_ptr": TensorSpec("int64", ("T",), ("stride_pos",))},
        scalars={"table_r": "R", "table_w": "W", "total": "T"},
        constexprs={"BLOCK": tk.LOCS_BLOCK},
        grid=("G", f"cdiv(T, {tk.LOCS_BLOCK})"),
        requires=(*_STACK_REQUIRES, "cap >= T"),
        roles={**_STACK_ROLES, "rows": "rows_ptr", "positions": "pos_ptr", "tokens": "T"},
    )


def replay_fill(kernel: object = None, clause: str = "G3") -> Binding:
    """``_replay_fill_kernel`` as ``TritonKernels.replay_fill`` launches it: grid (G, bs, cdiv(W, BLOCK_W))."""
    tk = _impl()
    return Binding(
        kernel=kernel or tk._replay_fill_kernel, clause=clause, name="replay-fill",
        params={"G": SOME, "P": ANY, "Gd": ANY, "Rd": ANY, "W": SOME, "bs": SOME, "live": ANY,
                "pad": (-(2**31), INT32_MAX)},
        tensors={"packed_ptr": TensorSpec("int32", ("P",), ("stride_p",)),
                 "meta_ptr": TensorSpec("int32", ("G", "3"), ("stride_mg", "stride_mf")),
                 "dst_ptr": TensorSpec("int32", ("Gd", "Rd", "W"), ("stride_dg", "stride_dr", "stride_dw"))},
        scalars={"packed_numel": "P", "dst_w": "W", "actual_bs": "live", "tail_pad": "pad"},
        constexprs={"BLOCK_W": tk.FILL_BLOCK_W},
        grid=("G", "bs", f"cdiv(W, {tk.FILL_BLOCK_W})"),
        requires=("Gd >= G", "Rd >= bs"),
        roles={"packed": "packed_ptr", "meta": "meta_ptr", "out": "dst_ptr", "bs": "bs", "actual_bs": "live",
               "packed_numel": "P", "dst_w": "W", "tail_pad": "pad"},
    )

