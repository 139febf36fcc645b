"""Translation validation of Triton kernels (prover/symexec/, prover/bindings/): the symbolic executor's semantics, the
verdicts on kvtable's kernel mutants and on a vLLM-style kernel, and counterexamples that replay in the
guarded interpreter. The verdicts on impl/triton_kernels.py itself are asserted with every other
obligation in tests/test_prove.py."""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
import torch
import z3

pytest.importorskip("triton")

from kvtable.exitcodes import UsageError  # noqa: E402
from kvtable.prover import prove  # noqa: E402
from kvtable.prover.bindings import builtin as kb  # noqa: E402
from kvtable.prover.bindings import queries as kq  # noqa: E402
from kvtable.prover.bindings.binding import Binding, Launch, load_binding, load_object  # noqa: E402
from kvtable.prover.bindings.replay import Replay, replay  # noqa: E402
from kvtable.prover.obligations.kernels import kernel_obligations, kernel_outcome  # noqa: E402
from kvtable.prover.solver.discharge import Outcome, Query, discharge  # noqa: E402
from kvtable.prover.symexec.guard import GuardBuffer, guarded  # noqa: E402
from kvtable.prover.symexec.values import INT32, INT64, KernelNotSupported, Sym, as_sym  # noqa: E402
from kvtable.zoo.triton_mutants import KERNEL_MUTANTS, mutant_kernels  # noqa: E402

TIMEOUT_MS = 60_000
BINDING = "examples/vllm_slot_binding.toml"
UNBOUNDED = "examples/vllm_slot_kernel.py:slot_mapping_kernel"


def value(term: z3.ExprRef) -> int | bool:
    """A closed term's value, signed for bit-vectors."""
    v = z3.simplify(term)
    return z3.is_true(v) if z3.is_bool(v) else v.as_signed_long()


def counterexample(binding: Binding, build: Callable[[Binding], Query]) -> dict[str, int | bool]:
    """The query's counterexample, among launches small enough to replay."""
    outcome: Outcome = discharge(kq.replayable(binding, build(binding)), TIMEOUT_MS, small=prove.SMALL_VALUES)
    assert outcome.status == "counterexample", outcome
    return dict(outcome.model)


# Triton's integer semantics ----------------------------------------------------------------------
def test_division_truncates_and_casts_wrap() -> None:
    minus_one = as_sym(-1)
    assert value((minus_one // 16).term) == 0 and value((minus_one % 16).term) == -1  # C, not Python
    big = Sym(z3.BitVecVal(2**31 - 1, 32), INT32)
    assert value((big + 1).term) == -(2**31)  # int32 wraps
    assert value((big.to(INT64) + 1).term) == 2**31
    assert value(Sym(z3.BitVecVal(2**32 + 5, 64), INT64).to(INT32).term) == 5  # the low bits
    assert (as_sym(3) * Sym(z3.BitVecVal(2, 64), INT64)).dtype == INT64  # promotion to the wider type


def test_a_python_branch_on_a_symbolic_value_is_refused() -> None:
    with pytest.raises(KernelNotSupported, match="Python `if`"):
        bool(as_sym(1) < 2)


def test_int32_stride_products_are_marked_narrow() -> None:
    stride = Sym.stride("s", z3.BitVec("s", 32), INT32)
    assert (as_sym(3) * stride).parts.narrow
    assert not (Sym(z3.BitVec("g", 64), INT64) * stride).parts.narrow
    assert (Sym(z3.BitVec("g", 64), INT64) * stride).parts.coeff("s") is not None


# kvtable's kernel mutants: each one refuted, each counterexample replayed ----------------------
def mutant_binding(name: str, clause: str) -> Binding:
    kernels = mutant_kernels(name)
    assert isinstance(kernels, types.ModuleType)
    return kb.stacked_locs(kernel=kernels._stacked_locs_kernel, clause=clause)


def test_every_kernel_mutant_is_a_one_line_slip() -> None:
    assert {m.name for m in KERNEL_MUTANTS} == {"triton-width-mask-dropped", "triton-page-clamp-dropped",
                                               "triton-position-clamp-dropped", "triton-int32-product",
                                               "triton-fill-int32-product", "triton-ceil-division"}
    for m in KERNEL_MUTANTS:
        assert m.module == "triton_kernels" and len(m.edits) == 1


def test_width_mask_dropped_reads_past_the_row() -> None:
    binding = mutant_binding("triton-width-mask-dropped", "G4")
    model = counterexample(binding, kq.in_bounds)
    col, width = model["load 3 tables_ptr index[2]"], model["W"]
    assert model["load 3 tables_ptr mask"] and col >= width  # a column past the table
    report = replay(binding, model)
    assert report.ran and report.margins_intact
    assert "is outside its shape" in str(report)
    assert report.hits or any(t.tensor == "tables_ptr" for t in report.touches)


def test_page_clamp_dropped_writes_outside_page_0() -> None:
    binding = mutant_binding("triton-page-clamp-dropped", "G4")
    model = counterexample(binding, kq.safety)
    stored, page = model["store 4 out_ptr value"], model["store 4 out_ptr page"]
    group, token = model["store 4 out_ptr index[0]"], model["store 4 out_ptr index[1]"]
    page_size, width = model[f"ps_ptr[{group}]"], model[f"widths_ptr[{group}]"]
    # a pad or hole read (or a column past the width, whose masked load is the pad -1) that misses page 0
    assert (page <= 0 or model["store 4 out_ptr column"] >= width) and not 0 <= stored < page_size
    report = replay(binding, model)
    assert report.ran and report.stored == {(group, token): stored}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["triton-position-clamp-dropped", "triton-ceil-division"])
def test_wrong_position_or_division_stores_another_slot(name: str) -> None:
    binding = mutant_binding(name, "W2")
    model = counterexample(binding, kq.agreement)
    stored, expected = model["store 4 out_ptr value"], model["store 4 out_ptr expected"]
    assert stored != expected
    report = replay(binding, model)
    index = (model["store 4 out_ptr index[0]"], model["store 4 out_ptr index[1]"])
    assert report.ran and report.stored[index] == stored  # the interpreter writes what the proof predicted
    assert f"the clause says {expected}" in str(report)


def wrapped_accesses(binding: Binding, model: dict[str, int | bool]) -> dict[str, tuple[int, int]]:
    """The model's accesses whose hardware offset (computed below 64 bits) is not their element's own:
    label -> (hardware offset, element offset by the per-dimension indices and strides)."""
    out = {}
    for key, offset in model.items():
        label = key.removesuffix(" hardware offset")
        if label == key or not model[f"{label} mask"]:
            continue
        strides = binding.tensors[label.split()[2]].strides
        exact = sum(model[f"{label} index[{k}]"] * (model[s] if isinstance(s, str) else s)
                    for k, s in enumerate(strides))
        if offset != exact:
            out[label] = (offset, exact)
    return out


def assert_the_interpreter_wraps_as_predicted(binding: Binding, model: dict[str, int | bool], report: Replay) -> None:
    """Every wrapped access the failing lane made landed at the predicted hardware offset (read or written there
    in the virtual memory, or blocked there by the guard), and at least one did. (A later access whose mask
    depends on a value read through a wrapped address may not happen: the model reads the element it meant.)"""
    wrapped = wrapped_accesses(binding, model)
    landed = []
    for label, (offset, exact) in wrapped.items():
        _, number, tensor = label.split()
        hit = [h.offset for h in report.hits if h.number == int(number)]
        touch = [t.flat for t in report.touches if t.number == int(number) and t.tensor == tensor]
        if hit or touch:
            assert hit + touch == [offset], (label, hit, touch, str(report), model)
            assert f"{label}[" in str(report) and f"element {exact}, at hardware offset {offset}" in str(report)
            landed.append(label)
    assert landed, (wrapped, str(report))


def test_int32_product_wraps_the_address() -> None:
    binding = mutant_binding("triton-int32-product", "G4")
    outcome = discharge(kq.replayable(binding, kq.in_bounds(binding), strides=False), TIMEOUT_MS)
    assert outcome.status == "counterexample"
    model = dict(outcome.model)
    wrapped = wrapped_accesses(binding, model)
    assert all((exact - offset) % 2**32 == 0 for offset, exact in wrapped.values())  # off by whole int32 wraps
    assert all(model[p] <= kq.REPLAY_LIMIT for p in binding.params)  # a small grid; the strides are large
    report = replay(binding, model)
    assert report.ran and "virtual tensors with the model's strides" in str(report)
    assert_the_interpreter_wraps_as_predicted(binding, model, report)


def test_the_fill_kernels_int32_stride_product_reads_before_the_metadata() -> None:
    """The real bug the proof found in _replay_fill_kernel, put back: ratio at meta + 2 * stride_mf."""
    kernels = mutant_kernels("triton-fill-int32-product")
    binding = kb.replay_fill(kernel=kernels._replay_fill_kernel)
    query = kq.in_bounds(binding)
    assert discharge(kq.replayable(binding, query), TIMEOUT_MS).status == "proved"  # small strides never wrap
    outcome = discharge(kq.replayable(binding, query, strides=False), TIMEOUT_MS, small=prove.SMALL_VALUES)
    assert outcome.status == "counterexample"
    model = dict(outcome.model)
    stride = model["stride_mf"]
    assert 2**30 <= stride < 2**31 and model["load 2 meta_ptr index[1]"] == 2
    assert model["load 2 meta_ptr hardware offset"] == model["load 2 meta_ptr index[0]"] * model["stride_mg"] \
        + 2 * stride - 2**32
    report = replay(binding, model)
    assert report.ran
    assert_the_interpreter_wraps_as_predicted(binding, model, report)
    (hit,) = report.hits
    assert hit.kind == "load" and hit.number == 2 and "before meta_ptr" in hit.nearest  # blocked, never read


def test_a_kernel_obligations_counterexample_is_replayed_with_large_strides() -> None:
    """``kvtable prove``'s path: refuted, looked for small (no wrap with small strides), then on a small grid."""
    from kvtable.prover.obligations.kernels import in_bounds

    kernels = mutant_kernels("triton-fill-int32-product")
    def binding() -> Binding:
        return kb.replay_fill(kernel=kernels._replay_fill_kernel)
    obligation = in_bounds("G3.kernel-replay-fill-in-bounds", binding, "the fill-int32-product mutant")
    outcome = kernel_outcome(obligation, TIMEOUT_MS, prove.SMALL_VALUES)
    assert outcome.status == "counterexample"
    assert "replayed _replay_fill_kernel in the Triton interpreter on virtual tensors" in outcome.detail
    assert "at hardware offset -" in outcome.detail and "element(s) before meta_ptr" in outcome.detail


# A user's kernel: the vLLM-style slot mapping of examples/ ---------------------------------------
def test_the_bounded_vllm_style_kernel_holds_under_its_stated_assumption() -> None:
    import dataclasses

    binding = load_binding(BINDING)
    assert binding.assumes == ("table entries >= 0",)
    assert kq_status(kq.in_bounds(binding)) == "proved"
    assert kq_status(kq.agreement(binding)) == "proved"
    (safe,) = [ob for ob in kernel_obligations(binding) if ob.name.endswith("-safe")]
    outcome = kernel_outcome(safe, TIMEOUT_MS, prove.SMALL_VALUES)
    assert outcome.status == "proved"
    assert outcome.assumed == ("the host builds rows, positions", "table entries >= 0")  # roles trusted, assumes
    # without it: a negative entry (or one whose int32 product wraps) gives a negative slot, not the pad
    bare = discharge(dataclasses.replace(kq.safety(binding), stated=()), TIMEOUT_MS)
    model = dict(bare.model)
    page, block_size = model["store 3 slot_mapping_ptr page"], model["BS"]
    assert bare.status == "counterexample" and model["store 3 slot_mapping_ptr value"] < 0
    assert page < 0 or page * block_size >= 2**31, model  # which one z3 picks varies by machine


def kq_status(query: Query) -> str:
    return discharge(query, TIMEOUT_MS).status


def test_the_unbounded_kernel_reads_the_next_rows_block() -> None:
    """vLLM #53982: a position past a narrow group's table reads the next row's block, where the pad is due."""
    binding = load_binding(BINDING)
    unbounded = Binding(**{**binding.__dict__, "kernel": load_object(UNBOUNDED)})
    model = counterexample(unbounded, kq.agreement)
    row, col = model["load 2 block_table_ptr index[0]"], model["load 2 block_table_ptr index[1]"]
    assert col >= model["W"] and model["store 3 slot_mapping_ptr expected"] == -1
    # Rows up to the element the read lands on (contiguous rows), holding block 144 (the regression test's value)
    width = model["W"]
    flat = row * width + col
    model["R"] = max(model["R"], flat // width + 1)
    model = {k: v for k, v in model.items() if not k.startswith("block_table_ptr[")}
    model[f"block_table_ptr[{flat // width}, {flat % width}]"] = 144
    report: Replay = replay(unbounded, model)
    assert report.ran and not report.hits
    assert f"the interpreter read block_table_ptr[{flat // width}, {flat % width}]" in str(report)
    assert flat // width > row  # a later row's block
    token = model["store 3 slot_mapping_ptr index[0]"]
    position, block_size = model[f"positions_ptr[{token}]"], model["BS"]
    assert report.stored[(token,)] == 144 * block_size + position % block_size  # where the pad -1 is due


def test_prove_cli_runs_a_users_binding(capsys: pytest.CaptureFixture[str]) -> None:
    parser = prove.argparse.ArgumentParser()
    prove.add_arguments(parser)
    assert prove.run(parser.parse_args(["--binding", BINDING, "--kernel", UNBOUNDED])) == 1
    out = capsys.readouterr().out
    assert "W3.kernel-vllm-slot-mapping-in-bounds" in out and "counterexample" in out
    assert "replayed slot_mapping_kernel in the Triton interpreter" in out
    with pytest.raises(UsageError, match="--kernel needs --binding"):
        prove.run(parser.parse_args(["--kernel", UNBOUNDED]))


def test_a_users_obligations_are_named_after_the_clause() -> None:
    names = [ob.name for ob in kernel_obligations(load_binding(BINDING))]
    assert names == ["W3.kernel-vllm-slot-mapping-in-bounds", "W3.kernel-vllm-slot-mapping-covers",
                     "W3.kernel-vllm-slot-mapping-agrees", "W3.kernel-vllm-slot-mapping-safe"]


# The guard ---------------------------------------------------------------------------------------
def test_the_guard_blocks_an_out_of_bounds_store_before_it_happens() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def spill(out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, offs, mask=offs < n)

    guard = GuardBuffer([("out", torch.int32, (4,))])
    with guarded(guard.tensors) as log:
        spill[(1,)](guard.tensors["out"], 6, BLOCK=8)  # n=6 > 4 elements: two lanes past the end
    assert guard.tensors["out"].tolist() == [0, 1, 2, 3]
    assert [h.lane for h in log.hits] == [4, 5] and all("past the end of out" in h.nearest for h in log.hits)
    assert guard.margins_intact()


def test_launch_facts_bound_the_grid_by_cuda_limits() -> None:
    launch = Launch(kb.stacked_locs())
    solver = z3.Solver()
    solver.add(*launch.facts(), z3.SignExt(32, launch.pids[1]) >= 65535)
    assert solver.check() == z3.unsat  # axis 1 has at most 65535 programs


def test_every_triton_kernel_has_in_bounds_and_agreement_obligations() -> None:
    from kvtable.prover.obligations.registry import OBLIGATIONS

    names = {ob.name for ob in OBLIGATIONS}
    for label, clauses in (("stacked-locs", ("W1", "W2", "W4", "G4")), ("extend-locs", ("W3",)),
                           ("replay-fill", ("G3", "E2"))):
        assert any(n.endswith(f".kernel-{label}-in-bounds") for n in names)
        assert {f"{c}.kernel-{label}-agrees" for c in clauses} <= names
    assert {"G4.kernel-stacked-locs-safe", "W3.kernel-extend-locs-safe"} <= names
    assert {"W0.kernel-stacked-locs-is-the-encoding", "W0.kernel-extend-locs-is-the-encoding"} <= names


def test_sanitize_turns_an_out_of_bounds_launch_into_a_safety_failure() -> None:
    import triton
    import triton.language as tl

    from kvtable.conformance.sanitize import OutOfBoundsAccess, checked_launches

    @triton.jit
    def overread(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n, other=0), mask=offs < 4)

    src, dst = torch.arange(4, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    with checked_launches(), pytest.raises(OutOfBoundsAccess, match=r"\[safety\] overread: 2 out-of-bounds") as err:
        overread[(1,)](src, dst, 6, BLOCK=8)  # reads src[4], src[5]
    assert [(h.kind, h.lane) for h in err.value.hits] == [("load", 4), ("load", 5)]
    overread[(1,)](src, dst, 4, BLOCK=8)  # outside the context: no guard (and in bounds anyway)
    assert dst.tolist() == [0, 1, 2, 3]


def test_conform_sanitize_passes_kvtables_triton_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    from kvtable.cli import main

    kernels = ["kernels/stacked-locs", "kernels/stacked-extend-locs", "kernels/replay-fill"]
    rc = main(["conform", "--backend", "triton", "--sanitize", "--examples", "5",
               *(arg for p in kernels for arg in ("--property", p))])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert all(p in out for p in kernels)


def test_sanitize_catches_the_width_mask_mutant_on_a_stale_length() -> None:
    from kvtable.conformance.sanitize import OutOfBoundsAccess, checked_launches

    kernels = mutant_kernels("triton-width-mask-dropped").TritonKernels()
    tables = torch.tensor([[[7], [9]]], dtype=torch.int32)  # one group, two rows, one column
    widths, page_sizes = torch.tensor([1], dtype=torch.int32), torch.tensor([1], dtype=torch.int32)
    seq_lens = torch.tensor([1, 5], dtype=torch.int32)  # row 1 is stale: position 4, column 4
    out = torch.zeros(1, 2, dtype=torch.int32)
    with checked_launches(), pytest.raises(OutOfBoundsAccess, match="past the end of argument 0") as err:
        kernels.stacked_locs(tables, widths, page_sizes, seq_lens, out, bs=2, n=1)
    assert [(h.kind, h.lane) for h in err.value.hits] == [("load", 1)]
    kvtable_kernels = __import__("kvtable.impl.triton_kernels", fromlist=["TritonKernels"]).TritonKernels()
    with checked_launches():  # the real kernel masks the column: no access outside, row 1 sinks to page 0
        kvtable_kernels.stacked_locs(tables, widths, page_sizes, seq_lens, out, bs=2, n=1)
    assert out.tolist() == [[7, 0]]


@pytest.mark.slow
def test_a_mutant_kernel_is_not_the_encoding() -> None:
    query = kq.matches_encoding(mutant_binding("triton-ceil-division", "G4"))
    outcome = discharge(query, TIMEOUT_MS, small=prove.SMALL_VALUES)
    assert outcome.status == "counterexample"
    model = dict(outcome.model)
    assert model["stored"] != model["encoding"]


def test_virtual_memory_serves_a_tensor_past_2_31_elements_sparsely() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)
    from kvtable.prover.symexec.memory import virtual_memory, virtual_tensors

    @triton.jit
    def copy_column(src_ptr, stride_sr, dst_ptr, n, BLOCK: tl.constexpr):
        rows = tl.arange(0, BLOCK).to(tl.int64)
        tl.store(dst_ptr + rows, tl.load(src_ptr + rows * stride_sr, mask=rows < n, other=-7), mask=rows < BLOCK)

    stride = 2**31 + 5  # rows of src 2^31 + 5 elements apart: 3 rows span > 2^32 elements (16 GiB as int32)
    tensors = virtual_tensors([("src", torch.int32, (3, 1), (stride, 1)), ("dst", torch.int32, (4,), (1,))])
    src, dst = tensors["src"], tensors["dst"]
    src.write(src.offset((2, 0)), 42)
    with virtual_memory(tensors) as log:
        copy_column[(1,)](src, stride, dst, 5, BLOCK=4)  # n=5 > 3 rows: lane 3 reads row 3, past the end
    assert [dst[(i,)] for i in range(4)] == [0, 0, 42, -7]  # lane 3 blocked: it gets `other`
    assert src.extent == 2 * stride + 1 and src.values == {2 * stride: 42} and len(dst.values) == 4
    (hit,) = log.hits
    assert (hit.kind, hit.lane, hit.offset) == ("load", 3, 3 * stride) and "past the end of src" in hit.nearest


def test_a_refused_kernel_names_its_line() -> None:
    import inspect

    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)
    from kvtable.prover.bindings.binding import TensorSpec

    @triton.jit
    def branchy(x_ptr, n, BLOCK: tl.constexpr):
        i = tl.arange(0, BLOCK)
        v = tl.load(x_ptr + i, mask=i < n)
        if v > 0:
            tl.store(x_ptr + i, v, mask=i < n)

    @triton.jit
    def loopy(x_ptr, n, BLOCK: tl.constexpr):
        for j in range(0, BLOCK, n):
            tl.store(x_ptr + j, j)

    for kernel, line, what in ((branchy, "if v > 0:", "Python `if`"),
                               (loopy, "for j in range(0, BLOCK, n):", "positive constexpr")):
        binding = Binding(kernel=kernel, clause="W3", params={"N": (1, 100)}, grid=("1",), scalars={"n": "N"},
                          tensors={"x_ptr": TensorSpec("int32", ("N",), (1,))}, constexprs={"BLOCK": 16})
        lines, first = inspect.getsourcelines(kernel.fn)
        number = first + next(k for k, text in enumerate(lines) if line in text)
        with pytest.raises(KernelNotSupported, match=what) as refused:
            kq.in_bounds(binding)
        assert f"test_kernel_proofs.py:{number} in {kernel.fn.__name__}: {line})" in str(refused.value)


# Loops with symbolic bounds (vLLM V1's real shape: one program per request) -------------------------
REQUEST_BINDING = "examples/vllm_request_binding.toml"


def test_the_per_request_loop_kernel_is_in_bounds_and_agrees() -> None:
    binding = load_binding(REQUEST_BINDING)
    for build in (kq.in_bounds, kq.agreement):
        assert discharge(build(binding), TIMEOUT_MS).status == "proved", build


def test_a_loop_one_token_too_far_is_refuted_and_replayed() -> None:
    import dataclasses

    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def one_too_far(query_start_loc_ptr, positions_ptr, block_table_ptr, block_table_stride, block_size,
                    max_num_blocks, slot_mapping_ptr, PAD_SLOT_ID: tl.constexpr, BLOCK: tl.constexpr):
        req = tl.program_id(0)
        start = tl.load(query_start_loc_ptr + req).to(tl.int64)
        end = tl.load(query_start_loc_ptr + req + 1).to(tl.int64)
        for first in range(start, end, BLOCK):
            offsets = first + tl.arange(0, BLOCK)
            live = offsets <= end  # the slip: one token past the request
            pos = tl.load(positions_ptr + offsets, mask=live, other=0)
            in_table = live & (pos // block_size < max_num_blocks)
            block = tl.load(block_table_ptr + req * block_table_stride + pos // block_size, mask=in_table, other=0)
            slot = block.to(tl.int64) * block_size + pos % block_size
            tl.store(slot_mapping_ptr + offsets, tl.where(in_table, slot, PAD_SLOT_ID), mask=live)

    binding = dataclasses.replace(load_binding(REQUEST_BINDING), kernel=one_too_far)
    model = counterexample(binding, kq.in_bounds)
    token = model["load 2 positions_ptr index[0]"]
    assert model["load 2 positions_ptr mask"] and token == model["N"]  # the token after the last live one
    end = model[f"query_start_loc_ptr[{model['load 1 query_start_loc_ptr index[0]']}]"]  # its request's end
    assert end == token  # the read one past the request's end is the last request's end, = N
    report = replay(binding, model)
    assert report.ran and any(h.kind == "load" for h in report.hits)  # the interpreter's read past positions
    assert "past the end of positions_ptr" in str(report)


def test_loops_whose_iterations_depend_on_each_other_are_refused() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401
    from kvtable.prover.bindings.binding import TensorSpec

    @triton.jit
    def accumulates(x_ptr, n, BLOCK: tl.constexpr):
        total = 0
        for i in range(0, n, BLOCK):
            total += i
        tl.store(x_ptr, total)

    @triton.jit
    def breaks(x_ptr, n, BLOCK: tl.constexpr):
        for i in range(0, n, BLOCK):
            tl.store(x_ptr + i, i)
            break

    @triton.jit
    def leaks(x_ptr, n, BLOCK: tl.constexpr):
        for i in range(0, n, BLOCK):
            last = i
        tl.store(x_ptr, last)

    @triton.jit
    def two_loops(x_ptr, n, BLOCK: tl.constexpr):  # `offs` assigned again before the second loop reads it
        for i in range(0, n, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, offs, mask=offs < n)
        for j in range(0, n, BLOCK):
            offs = j + tl.arange(0, BLOCK)
            tl.store(x_ptr + offs, -offs, mask=offs < n)

    for kernel, what in ((accumulates, r"carries \['total'\]"),
                         (leaks, r"\['last'\] assigned in a loop .* is read after it")):
        # a trip count the launch does not bound by MAX_UNROLLED: not run iteration by iteration either
        binding = Binding(kernel=kernel, clause="W3", params={"N": (1, 10**6)}, grid=("1",), scalars={"n": "N"},
                          tensors={"x_ptr": TensorSpec("int32", ("N",), (1,))}, constexprs={"BLOCK": 16})
        with pytest.raises(KernelNotSupported, match=what) as refused:
            kq.in_bounds(binding)
        assert "test_kernel_proofs.py:" in str(refused.value)
    once = Binding(kernel=breaks, clause="W3", params={"N": (1, 10**6)}, grid=("1",), scalars={"n": "N"},
                   tensors={"x_ptr": TensorSpec("int32", ("N",), (1,))}, constexprs={"BLOCK": 16})
    assert discharge(kq.in_bounds(once), TIMEOUT_MS).status == "proved"  # its `break` ends it: run as Python runs it
    binding = Binding(kernel=two_loops, clause="W3", params={"N": (1, 100)}, grid=("1",), scalars={"n": "N"},
                      tensors={"x_ptr": TensorSpec("int32", ("N",), (1,))}, constexprs={"BLOCK": 16},
                      roles={"table": "x_ptr"})
    assert discharge(kq.in_bounds(binding), TIMEOUT_MS).status == "proved"


def test_a_python_branch_on_a_scalar_runs_both_paths() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401
    from kvtable.prover.bindings.binding import TensorSpec

    @triton.jit
    def last_pads(x_ptr, n, BLOCK: tl.constexpr, SLIP: tl.constexpr):
        r = tl.program_id(0)
        i = tl.arange(0, BLOCK)
        if r == tl.num_programs(0) - 1:  # the last program pads the tail: only up to n
            tl.store(x_ptr + r * BLOCK + i, -1, mask=r * BLOCK + i < n + SLIP)
        else:
            tl.store(x_ptr + r * BLOCK + i, r * BLOCK + i)

    def binding(slip: int) -> Binding:
        return Binding(kernel=last_pads, clause="W3", params={"N": (1, 10_000)}, grid=("cdiv(N, 16)",),
                       scalars={"n": "N"}, tensors={"x_ptr": TensorSpec("int32", ("N",), (1,))},
                       constexprs={"BLOCK": 16, "SLIP": slip}, roles={"table": "x_ptr"})

    launch, trace = kq.symbolic_run(binding(0))
    assert [a.kind for a in trace.accesses] == ["store", "store"]  # one per path, each under its condition
    assert discharge(kq.in_bounds(binding(0)), TIMEOUT_MS).status == "proved"
    model = counterexample(binding(1), kq.in_bounds)
    assert model["pid0"] == -(-model["N"] // 16) - 1 and model["store 0 x_ptr index[0]"] == model["N"]
