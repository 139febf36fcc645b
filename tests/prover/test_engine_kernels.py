"""Engines' kernels, written in each engine's style under examples/, bound and proved: vLLM V1's slot mapping
(the padding program, the #54296 guard and #53982 without it), stated assumptions in the verdict, and replay
lines that name the access the counterexample is about."""

from __future__ import annotations

import dataclasses

import pytest
import z3

pytest.importorskip("kvtable.impl.triton_kernels")  # sets TRITON_INTERPRET before triton loads (no GPU)
pytest.importorskip("triton")

from kvtable.prover import prove  # noqa: E402
from kvtable.prover.bindings import queries as kq  # noqa: E402
from kvtable.prover.bindings.binding import Binding, TensorSpec, load_binding, load_object  # noqa: E402
from kvtable.prover.bindings.replay import replay  # noqa: E402
from kvtable.prover.obligations.kernels import KernelObligation, kernel_obligations, kernel_outcome  # noqa: E402
from kvtable.prover.solver.discharge import Outcome, Query, discharge  # noqa: E402
from kvtable.prover.symexec.values import KernelNotSupported  # noqa: E402

TIMEOUT_MS = 60_000
V1 = "examples/vllm_v1_slot_binding.toml"
V1_UNGUARDED = "examples/vllm_v1_slot_kernel.py:slot_mapping_kernel"


def outcomes(binding: Binding) -> dict[str, Outcome]:
    """Each of the binding's obligations (in bounds, covers, agrees, safe) as `kvtable prove` judges it."""
    return {ob.name.rsplit("-", 1)[-1].replace("bounds", "in-bounds"): kernel_outcome(ob, TIMEOUT_MS,
                                                                                      prove.SMALL_VALUES)
            for ob in kernel_obligations(binding) if isinstance(ob, KernelObligation)}


# vLLM V1: one program per request plus the padding program ---------------------------------------------
@pytest.mark.slow
def test_v1_with_the_guard_holds_under_its_stated_assumptions_only() -> None:
    binding = load_binding(V1)
    assert binding.pad_programs == "pid0 == R" and binding.grid == ("R + 1",)
    judged = outcomes(binding)
    assert set(judged) == {"in-bounds", "covers", "agrees", "safe"}
    stated = {"the host builds query_start_loc, positions", *binding.assumes}  # roles trusted, then assumes
    for name, outcome in judged.items():  # no counterexample at all, the padding program included
        assert outcome.status == "proved", (name, outcome)
        assert set(outcome.assumed) <= stated, name  # coverage needs none of them
    assert "R * W < 2**31" in judged["in-bounds"].assumed  # the int32 row offset req * stride
    assert "table entries >= 0" in judged["safe"].assumed  # a negative block id would give a negative slot


def test_v1_without_the_guard_reads_past_the_row() -> None:
    """vLLM #53982: the block-table load has no column bound; the counterexample satisfies every stated
    assumption, and its replay names the block-table read, which the guard blocks."""
    binding = dataclasses.replace(load_binding(V1), kernel=load_object(V1_UNGUARDED))
    (in_bounds,) = [ob for ob in kernel_obligations(binding) if ob.name.endswith("-in-bounds")]
    outcome = kernel_outcome(in_bounds, TIMEOUT_MS, prove.SMALL_VALUES)
    assert outcome.status == "counterexample" and not outcome.assumed
    model = dict(outcome.model)
    label = "load 3 block_table_ptr@path1"  # the request path (path 0 is the padding program's)
    assert model[f"{label} mask"] and model[f"{label} index[1]"] >= model["W"]  # a column past the row
    assert model["R"] * model["W"] < 2**31 and all(v >= 0 for k, v in model.items()
                                                    if k.startswith("block_table_ptr["))
    assert "it satisfies every stated assumption" in outcome.detail
    row, col, rows, width = (model[f"{label} index[0]"], model[f"{label} index[1]"], model["R"], model["W"])
    assert f"load 3 block_table_ptr[{row}, {col}] is outside its shape" in outcome.detail
    flat = row * width + col  # contiguous rows: a later row's block, or past the table (blocked)
    landed = (f"the interpreter read block_table_ptr[{flat // width}, {flat % width}]" if flat < rows * width
              else "the guard blocked it")
    assert landed in outcome.detail


def test_a_replay_line_names_the_access_the_counterexample_is_about() -> None:
    """The access the model labels `load 3 block_table_ptr` is the interpreter's read at the same kernel line
    (the padding program's store on the other path does not shift it)."""
    binding = dataclasses.replace(load_binding(V1), kernel=load_object(V1_UNGUARDED))
    query = kq.replayable(binding, kq.in_bounds(binding))
    found = discharge(query, TIMEOUT_MS, small=prove.SMALL_VALUES)
    model = dict(found.model)
    label = "load 3 block_table_ptr@path1"
    report = replay(binding, model)
    assert report.ran
    line = f":{model[f'{label} line']}"
    (access,) = [x for x in [*report.hits, *report.touches] if x.site.endswith(line)]
    assert access.kind == "load" and access.number == 3  # the interpreter's access 3 of the program, at that line
    row, col, width = model[f"{label} index[0]"], model[f"{label} index[1]"], model["W"]
    if access in report.hits:
        assert access.nearest.endswith(" block_table_ptr") and access.offset == row * width + col
        landed = f"the guard blocked it ({access.nearest})"
    else:
        assert access.tensor == "block_table_ptr" and access.flat == row * width + col
        landed = f"the interpreter read block_table_ptr[{access.flat // width}, {access.flat % width}]"
    stores = [t for t in report.touches if t.kind == "store"]
    assert stores and all(t.number == 4 and t.tensor == "slot_mapping_ptr" for t in stores)
    described = [text for text in str(report).splitlines() if text.startswith("load 3 ")]
    assert described == [f"load 3 block_table_ptr[{row}, {col}] is outside its shape [{model['R']}, {width}]: {landed}"]


# Stated assumptions ----------------------------------------------------------------------------------------
def tiny(assumes: tuple[str, ...]) -> Binding:
    """A one-program kernel reading x[k] for a loaded k: in bounds only if k is."""
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def gather(k_ptr, x_ptr, out_ptr):
        k = tl.load(k_ptr)
        tl.store(out_ptr, tl.load(x_ptr + k))

    return Binding(kernel=gather, clause="W3", params={"N": (1, 100)}, grid=("1",), assumes=assumes,
                   roles={"table": "x_ptr"},
                   tensors={"k_ptr": TensorSpec("int32", ("1",), (1,)), "x_ptr": TensorSpec("int32", ("N",), (1,)),
                            "out_ptr": TensorSpec("int32", ("1",), (1,))})


def test_an_assumption_the_binding_does_not_state_hides_nothing() -> None:
    status = {assumes: discharge(kq.in_bounds(tiny(assumes)), TIMEOUT_MS).status for assumes in
              ((), ("k_ptr entries >= 0",), ("k_ptr entries >= 0", "k_ptr[0] < N"))}
    assert status == {(): "counterexample", ("k_ptr entries >= 0",): "counterexample",
                      ("k_ptr entries >= 0", "k_ptr[0] < N"): "proved"}
    model = dict(discharge(kq.in_bounds(tiny(("k_ptr entries >= 0",))), TIMEOUT_MS).model)
    assert model["k_ptr[0]"] >= model["N"]  # the one it did not state


@pytest.mark.parametrize(("text", "why"), [("q_ptr entries >= 0", "neither a tensor nor a role"),
                                           ("k_ptr[0, 1] < N", "needs 1 index"),
                                           ("N +", "assumption 'N \\+'"), ("N", "not a comparison")])
def test_a_malformed_assumption_is_refused_naming_it(text: str, why: str) -> None:
    with pytest.raises(KernelNotSupported, match=why):
        kq.in_bounds(tiny((text,)))


def test_stated_assumptions_are_z3_facts_about_each_load() -> None:
    from kvtable.prover.bindings.assumptions import stated

    launch, trace = kq.symbolic_run(tiny(("k_ptr entries >= 0", "N <= 7")))
    (named, fact), (expression, bound) = stated(launch, trace)
    assert (named, expression) == ("k_ptr entries >= 0", "N <= 7")
    solver = z3.Solver()
    solver.add(fact, trace.accesses[0].mask, launch.read("k_ptr", trace.accesses[0].pointer) < 0)
    assert solver.check() == z3.unsat  # the loaded k is never negative under it
    solver = z3.Solver()
    solver.add(bound, launch.params["N"] == 8)
    assert solver.check() == z3.unsat


# vLLM Model Runner V2: per-group tables through a table of pointers ---------------------------------------
V2 = "examples/vllm_v2_slot_binding.toml"
V2_UNGUARDED = "examples/vllm_v2_slot_kernel.py:slot_mappings_kernel"


def store_label(model: dict[str, int | bool], tensor: str) -> str:
    """The label of the store the counterexample is about: the one to ``tensor`` whose mask holds."""
    (label,) = [k.removesuffix(" mask") for k, v in model.items()
                if k.startswith("store ") and f" {tensor}" in k and k.endswith(" mask") and v]
    return label


def test_v2_loads_every_group_table_through_the_pointer_table() -> None:
    launch, trace = kq.symbolic_run(load_binding(V2))
    read = {a.pointer.tensor for a in trace.loads}
    assert {"block_table_ptrs", "block_table_strides", "table_g0", "table_g1"} <= read
    (first,) = {a.site for a in trace.loads if a.pointer.tensor == "table_g0"}
    assert {a.site for a in trace.loads if a.pointer.tensor == "table_g1"} == {first}  # one line, two tables
    assert discharge(kq.in_bounds(load_binding(V2)), TIMEOUT_MS).status == "proved"


@pytest.mark.slow
def test_v2_int32_block_times_block_size_is_found() -> None:
    """vLLM V2 multiplies the int32 block id by the int32 block size before it meets the int64 offset: past
    2^31 slots in a group the stored slot wraps (its int64 slot buffer could hold the right one)."""
    binding = load_binding(V2)
    outcome = discharge(kq.agreement(binding), TIMEOUT_MS, small=prove.SMALL_VALUES)
    assert outcome.status == "counterexample"
    model = dict(outcome.model)
    label = store_label(model, "slot_mappings_ptr")
    group, token = model[f"{label} index[0]"], model[f"{label} index[1]"]
    page, size, position = model[f"{label} page"], model[f"block_sizes[{group}]"], model[f"{label} position"]
    assert page >= 0 and page * size >= 2**31  # a real block of a group whose pool passes 2^31 slots
    wrapped = (page * size + 2**31) % 2**32 - 2**31 + position % size
    assert model[f"{label} value"] == wrapped != model[f"{label} expected"] == page * size + position % size
    assert 0 <= token < model["N"]


def test_v2_entries_assumption_covers_the_tables_behind_the_pointer_table() -> None:
    """``table entries >= 0`` names the table of pointers; it holds of every entry loaded from the per-group tables
    behind it, so no counterexample rests on a negative block id (vLLM's pool hands out none)."""
    model = dict(discharge(kq.safety(load_binding(V2)), TIMEOUT_MS).model)
    loaded = [k.removesuffix(" mask") for k, v in model.items()
              if k.startswith("load ") and " table_g" in k and k.endswith(" mask") and v]
    assert loaded
    for label in loaded:
        tensor = label.split()[2].split("@")[0]
        entry = f"{tensor}[{model[f'{label} index[0]']}, {model[f'{label} index[1]']}]"
        assert model[entry] >= 0, (entry, model[entry])


def test_v2_without_the_guard_reads_past_a_groups_row() -> None:
    binding = dataclasses.replace(load_binding(V2), kernel=load_object(V2_UNGUARDED))
    model = dict(discharge(kq.in_bounds(binding), TIMEOUT_MS).model)
    (label,) = [k.removesuffix(" index[1]") for k in model if k.startswith("load ") and " table_g" in k
                and k.endswith(" index[1]") and model[k.replace("index[1]", "mask")]
                and model[k] >= model["W" + k.split(" table_g")[1][0]]]
    assert label.split()[2].startswith("table_g")


def test_a_read_outside_the_pointer_tables_entries_is_out_of_bounds() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def third(ptrs, out_ptr, k):
        table = tl.cast(tl.load(ptrs + k), tl.pointer_type(tl.int32))
        tl.store(out_ptr, tl.load(table))

    def binding(bound: int) -> Binding:
        return Binding(kernel=third, clause="W3", params={"G": (1, 2), "K": (0, bound)}, grid=("1",),
                       scalars={"k": "K"}, pointer_tables={"ptrs": ("a", "b")}, roles={"table": "a"},
                       tensors={"ptrs": TensorSpec("uint64", ("G",), (1,)), "a": TensorSpec("int32", ("1",), (1,)),
                                "b": TensorSpec("int32", ("1",), (1,)), "out_ptr": TensorSpec("int32", ("1",), (1,))})

    launch, trace = kq.symbolic_run(binding(2))
    assert [a.pointer.tensor for a in trace.accesses] == ["ptrs", "a", "out_ptr", "ptrs", "b", "out_ptr", "ptrs"]
    model = dict(discharge(kq.in_bounds(binding(2)), TIMEOUT_MS).model)
    assert model["K"] >= model["G"]  # the path that selects no entry still reads the pointer table, outside it
    assert discharge(kq.in_bounds(dataclasses.replace(binding(2), requires=("K < G",))), TIMEOUT_MS).status == "proved"


@pytest.mark.slow
def test_three_obligations_of_one_binding_run_together_in_forked_children() -> None:
    """Each obligation runs in a child forked from one parent: the replay's modules are imported there, whole,
    before the first fork (they once raised ImportError for `replay` / `VirtualTensor` when run together)."""
    import sys

    binding = dataclasses.replace(load_binding(V1), kernel=load_object(V1_UNGUARDED))
    results = prove.prove(kernel_obligations(binding), isolate=True)
    assert "kvtable.prover.bindings.replay" in sys.modules
    assert [r.outcome.status for r in results] == ["counterexample", "proved", "counterexample", "counterexample"]
    for r in (results[0], *results[2:]):  # the covers obligation (proved) replays nothing
        assert "error:" not in r.outcome.detail and "replayed slot_mapping_kernel" in r.outcome.detail


# SGLang: the flashinfer kv-indices copy and the paged allocator's extend ----------------------------------
SGLANG = "examples/sglang_kv_kernels.py"


def test_sglang_flashinfer_kv_indices_is_in_bounds_under_what_its_host_builds() -> None:
    binding = load_object(f"{SGLANG}:FLASHINFER_KV_INDICES")
    (only,) = kernel_obligations(binding)  # no clause gives the copy's values: in bounds only
    outcome = kernel_outcome(only, TIMEOUT_MS, prove.SMALL_VALUES)
    assert outcome.status == "proved" and set(outcome.assumed) == set(binding.assumes)
    launch, trace = kq.symbolic_run(binding)  # the `if kv_start_idx:` taken, the cdiv-bounded loop modelled
    assert [a.pointer.tensor for a in trace.accesses] == ["req_pool_indices_ptr", "kv_indptr", "kv_start_idx",
                                                          "page_kernel_lens_ptr", "req_to_token_ptr", "kv_indices_ptr"]
    model = dict(discharge(dataclasses.replace(kq.in_bounds(binding), stated=()), TIMEOUT_MS).model)
    assert model  # without them: some read or write leaves its tensor


def before_the_buffer(binding: Binding) -> Query:
    """Does any store write before ``out_indices``? (a counterexample is one that does)"""
    query = kq.in_bounds(binding)
    shown = dict(query.show)
    stores = [k.removesuffix(" mask") for k in shown if k.startswith("store ") and k.endswith(" mask")]
    return dataclasses.replace(query, goal=z3.And(*[z3.Not(z3.And(shown[f"{s} mask"], shown[f"{s} index[0]"] < 0))
                                                    for s in stores]))


def test_sglang_alloc_extend_writes_before_its_buffer_when_a_prefix_exceeds_its_length() -> None:
    binding = load_object(f"{SGLANG}:ALLOC_EXTEND_UNCHECKED")
    found = discharge(before_the_buffer(binding), TIMEOUT_MS, small=prove.SMALL_VALUES)
    assert found.status == "counterexample"
    model = dict(found.model)
    pid = model["pid0"]
    longer = [j for j in range(pid) if model.get(f"pre_lens_ptr[{j}]", 0) > model.get(f"seq_lens_ptr[{j}]", 0)]
    assert longer, model  # an earlier request's prefix exceeds its sequence: this one starts before out_indices
    stated = dataclasses.replace(binding, assumes=(*binding.assumes, *(f"pre_lens_ptr[{j}] <= seq_lens_ptr[{j}]"
                                                                       for j in range(2))))
    assert discharge(before_the_buffer(stated), TIMEOUT_MS).status == "proved"


@pytest.mark.slow
def test_v2_context_parallel_branch_is_modelled() -> None:
    """CP_SIZE 2 takes V2's other constexpr branch (cp_rank an argument): in bounds fails there only through
    the int32 `block_size * CP_SIZE`, which wraps negative for a block size of 2^30 and reads column -1."""
    binding = load_binding(V2)
    binding = dataclasses.replace(binding, constexprs={**binding.constexprs, "CP_SIZE": 2, "CP_INTERLEAVE": 4},
                                  scalars={**binding.scalars, "cp_rank": "1"})
    model = dict(discharge(kq.in_bounds(binding), TIMEOUT_MS, small=prove.SMALL_VALUES).model)
    (label,) = [k.removesuffix(" mask") for k, v in model.items() if k.endswith(" mask") and v
                and " table_g" in k and model[k.replace("mask", "index[1]")] < 0]
    group = int(label.split(" table_g")[1][0])
    assert model[f"block_sizes[{group}]"] * 2 >= 2**31  # the product that wrapped


def test_a_loop_may_assign_a_name_in_both_branches_of_an_if() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def both(x_ptr, n, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        for i in range(0, n, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            if WIDE:
                v = offs * 2
            else:
                v = offs
                v = tl.where(offs > 0, v, 0)  # reads the v this iteration assigned
            tl.store(x_ptr + offs, v, mask=offs < n)

    @triton.jit
    def one(x_ptr, n, BLOCK: tl.constexpr, WIDE: tl.constexpr):
        for i in range(0, n, BLOCK):
            offs = i + tl.arange(0, BLOCK)
            if WIDE:
                v = offs
            tl.store(x_ptr + offs, v, mask=offs < n)  # the last iteration's v when WIDE is off

    def binding(kernel: object, wide: int) -> Binding:  # N: more iterations than a loop is ever unrolled for
        return Binding(kernel=kernel, clause="W3", params={"N": (1, 10**6)}, grid=("1",), scalars={"n": "N"},
                       tensors={"x_ptr": TensorSpec("int32", ("N",), (1,))}, constexprs={"BLOCK": 16, "WIDE": wide},
                       roles={"table": "x_ptr"})

    for wide in (0, 1):
        assert discharge(kq.in_bounds(binding(both, wide)), TIMEOUT_MS).status == "proved"
    with pytest.raises(KernelNotSupported, match=r"carries \['v'\]"):
        kq.in_bounds(binding(one, 1))


def test_a_loop_that_advances_its_offsets_is_one_iteration_of_induction_variables() -> None:
    """SGLang's older kv-indices copy advances `ld_offset += BLOCK` each round: iteration k sees the offsets
    before the loop plus k blocks (not a value carried), so a read one past the length is still found."""
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def advancing_copy(req_to_token_ptr, kv_indptr, lens_ptr, kv_indices_ptr, stride, SLIP: tl.constexpr):
        BLOCK: tl.constexpr = 512
        b = tl.program_id(axis=0)
        out = tl.load(kv_indptr + b)
        end = tl.load(lens_ptr + b)
        ld_offset = tl.arange(0, BLOCK)
        st_offset = tl.arange(0, BLOCK)
        for _ in range(tl.cdiv(end, BLOCK)):
            live = ld_offset < end + SLIP
            token = tl.load(req_to_token_ptr + b * stride + ld_offset, mask=live)
            tl.store(kv_indices_ptr + out + st_offset, token, mask=live)
            ld_offset += BLOCK
            st_offset += BLOCK

    def binding(slip: int) -> Binding:
        return Binding(kernel=advancing_copy, clause="T8", params={"B": (1, 64), "C": (1, 10**6), "T": (0, 10**8)},
                       grid=("B",), requires=("stride == C",), constexprs={"SLIP": slip},
                       tensors={"req_to_token_ptr": TensorSpec("int32", ("B", "C"), ("stride", 1)),
                                "kv_indptr": TensorSpec("int32", ("B",), (1,)),
                                "lens_ptr": TensorSpec("int32", ("B",), (1,)),
                                "kv_indices_ptr": TensorSpec("int32", ("T",), (1,))},
                       roles={"table": "req_to_token_ptr"},
                       assumes=("kv_indptr entries >= 0", "lens_ptr entries >= 0", "lens_ptr[pid0] <= C",
                                "kv_indptr[pid0] + lens_ptr[pid0] <= T"))

    assert discharge(kq.in_bounds(binding(0)), TIMEOUT_MS).status == "proved"
    model = dict(discharge(kq.in_bounds(binding(1)), TIMEOUT_MS, small=prove.SMALL_VALUES).model)
    row, col = model["load 2 req_to_token_ptr index[0]"], model["load 2 req_to_token_ptr index[1]"]
    assert model["load 2 req_to_token_ptr mask"] and col == model[f"lens_ptr[{row}]"]  # one token past the length



def test_replay_lines_name_each_access_in_a_kernel_of_two_block_lengths() -> None:
    """A load over a block of 4 and a store over a block of 16: each replay line is the interpreter's access at
    the element the model's label gives, whichever block's lane the counterexample names first."""
    import re

    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def two_blocks(x_ptr, y_ptr, n):
        few = tl.arange(0, 4)
        first = tl.load(x_ptr + few)
        tl.store(y_ptr + few, first)
        many = tl.arange(0, 16)
        tl.store(y_ptr + many, many, mask=many < n + 1)  # one past n

    binding = Binding(kernel=two_blocks, clause="T8", params={"N": (4, 16)}, grid=("1",), scalars={"n": "N"},
                      tensors={"x_ptr": TensorSpec("int32", ("4",), (1,)), "y_ptr": TensorSpec("int32", ("N",), (1,))},
                      roles={"table": "x_ptr", "out": "y_ptr"})
    model = dict(discharge(kq.in_bounds(binding), TIMEOUT_MS, small=prove.SMALL_VALUES).model)
    assert model["store 2 y_ptr index[0]"] == model["N"]
    report = replay(binding, model)
    text = str(report)
    assert report.ran and f"store 2 y_ptr[{model['N']}] is outside its shape [{model['N']}]: the guard blocked" in text
    (read,) = re.findall(r"load 0 x_ptr\[(\d+)\]: the interpreter read x_ptr\[(\d+)\]", text)
    assert read[0] == read[1] == str(model["load 0 x_ptr index[0]"])
