"""Allocator kernels bound to SPEC 6a's clauses (examples/sglang_kv_kernels.py, SGLang's style): the extend
allocator proved for one and two requests under SGLang's host guarantees with ``masked_loads = "zero"``, its
counterexamples named (a prefix past its length, masked-off lanes), the pointer-table writer modelled and proved;
and the pointer idioms such kernels use, modelled or refused with their line."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("kvtable.impl.triton_kernels")  # sets TRITON_INTERPRET before triton loads (no GPU)
pytest.importorskip("triton")

from kvtable.prover import prove  # noqa: E402
from kvtable.prover.bindings import queries as kq  # noqa: E402
from kvtable.prover.bindings.binding import Binding, TensorSpec, load_binding, load_object  # noqa: E402
from kvtable.prover.obligations.kernels import MASKED_NOTE, kernel_obligations, kernel_outcome  # noqa: E402
from kvtable.prover.solver.discharge import Outcome, discharge  # noqa: E402
from kvtable.prover.symexec.values import KernelNotSupported  # noqa: E402

SGLANG = "examples/sglang_kv_kernels.py"
GUARD_MS = 600_000


def judged(name: str, only: str = "") -> dict[str, Outcome]:
    """Each obligation of the example binding ``name`` (its name's last words), as `kvtable prove` judges it: in
    a forked process of its own, so no query discharged earlier in this process moves z3's search."""
    binding = load_object(f"{SGLANG}:{name}")
    prove.refuse_unprovable(binding)
    limits = prove.Limits(guard_s=GUARD_MS / 1000)
    return {ob.name.split(f"{binding.label}-")[1]: prove.prove_one(ob, limits).outcome
            for ob in kernel_obligations(binding) if only in ob.name}


def test_an_allocator_binding_gets_in_bounds_and_its_clauses_agreement() -> None:
    names = [ob.name for ob in kernel_obligations(load_object(f"{SGLANG}:ALLOC_EXTEND"))]
    assert names == ["A3.kernel-sglang-alloc-extend-2-in-bounds", "A3.kernel-sglang-alloc-extend-2-agrees"]
    names = [ob.name for ob in kernel_obligations(load_object(f"{SGLANG}:WRITE_REQ_TO_TOKEN"))]
    assert names == ["A1.kernel-sglang-write-req-to-token-in-bounds", "A1.kernel-sglang-write-req-to-token-agrees"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ALLOC_EXTEND_ONE", "ALLOC_EXTEND"])
def test_alloc_extend_holds_under_sglangs_host_guarantees(name: str) -> None:
    """Every slot from the free list (or the request's own page) at its token's output position, none outside
    an output sized to the total extend: proved, and only under the stated guarantees."""
    binding = load_object(f"{SGLANG}:{name}")
    assert binding.masked_loads == "zero"
    for what, outcome in judged(name).items():
        assert outcome.status == "proved", (what, outcome)
        assert outcome.assumed and set(outcome.assumed) <= set(binding.assumes), what


def test_without_pre_lens_at_most_seq_lens_alloc_extend_writes_before_its_output() -> None:
    """The counterexample is replayed in the interpreter, the request whose prefix exceeds its length named, and
    the write before an empty output explained (an empty tensor's data_ptr() is 0)."""
    (outcome,) = judged("ALLOC_EXTEND_UNCHECKED", "in-bounds").values()
    assert outcome.status == "counterexample"
    model = dict(outcome.model)
    longer = [j for j in range(2) if model.get(f"pre_lens_ptr[{j}]", 0) > model.get(f"seq_lens_ptr[{j}]", 0)]
    assert longer and f"request {longer[0]}'s prefix (pre_lens_ptr[{longer[0]}] = " in outcome.detail
    assert "'pre_lens_ptr[0] <= seq_lens_ptr[0]'" in outcome.detail or "'pre_lens_ptr[1] <= seq_lens_ptr[1]'" in \
        outcome.detail
    assert "replayed alloc_extend_kernel in the Triton interpreter" in outcome.detail
    store = next(k.removesuffix(" index[0]") for k, v in model.items() if k.startswith("store ")
                 and k.endswith(" index[0]") and model[k.replace("index[0]", "mask")] and v < 0)
    assert f"{store.split()[2]}[{model[f'{store} index[0]']}] is outside its shape" in outcome.detail
    assert "not reproduced" not in outcome.detail and "the guard blocked it" in outcome.detail


@pytest.mark.slow
def test_a_counterexample_resting_on_masked_lanes_says_so_first() -> None:
    """SGLang's running sums load lanes past the program's own with a mask and no other=: undefined in compiled
    Triton, so in bounds fails there, and the first line says it rests on them (with "zero" it holds)."""
    (outcome,) = judged("ALLOC_EXTEND_UNDEFINED", "in-bounds").values()
    assert outcome.status == "counterexample"
    assert outcome.detail.splitlines()[0] == MASKED_NOTE
    assert any(name.startswith("undefined#") for name, _ in outcome.model)


def test_zero_masked_loads_read_0_where_the_mask_is_off() -> None:
    binding = load_object(f"{SGLANG}:ALLOC_EXTEND")
    for masked, fresh in (("zero", False), ("undefined", True)):
        _, trace = kq.symbolic_run(dataclasses.replace(binding, masked_loads=masked))
        summed = [a for a in trace.loads if a.pointer.tensor == "seq_lens_ptr"][0]
        assert ("undefined#" in str(summed.value.term)) is fresh, masked


@pytest.mark.slow
def test_write_req_to_token_through_its_prefix_pointers_is_modelled_and_proved() -> None:
    """`.to(tl.pointer_type(tl.int64))` on each prefix entry, the running sum over `range(pid)` unrolled (the
    launch bounds pid): each chosen slot recorded at its token's own position of its own row."""
    outcomes = judged("WRITE_REQ_TO_TOKEN")
    assert {k: o.status for k, o in outcomes.items()} == {"in-bounds": "proved", "agrees": "proved"}
    binding = load_object(f"{SGLANG}:WRITE_REQ_TO_TOKEN")
    _, trace = kq.symbolic_run(binding)
    assert {"prefix_0", "prefix_1", "extend_lens"} <= {a.pointer.tensor for a in trace.loads}


def test_an_int32_table_records_a_wrapped_slot_named_as_such() -> None:
    """Without W5's bound at the table's width (an int64 slot >= 2^31 stored into int32 req_to_token), agreement
    fails, and the counterexample says the value wrapped on its way to 32 bits."""
    from kvtable.prover.bindings.explain import wrap_hint

    binding = load_object(f"{SGLANG}:WRITE_REQ_TO_TOKEN")
    query = kq.agreement(binding)
    shown = dict(query.show)
    label = next(k.removesuffix(" value") for k in shown if k.startswith("store 5 ") and k.endswith(" value"))
    model = {f"{label} mask": True, f"{label} value": -2**31, f"{label} expected": 2**31}
    (line,) = wrap_hint(binding, model)
    assert line.startswith(f"{label} stored -2147483648, the clause's 2147483648 wrapped modulo 2^32")


# Pointer idioms ------------------------------------------------------------------------------------------------
def _table_binding(kernel: object) -> Binding:
    return Binding(kernel=kernel, clause="T8", params={"N": (1, 64)}, grid=("2",),
                   tensors={"ptrs": TensorSpec("uint64", ("2",), (1,)), "a": TensorSpec("int64", ("N",), (1,)),
                            "b": TensorSpec("int64", ("N",), (1,)), "out": TensorSpec("int64", ("2",), (1,))},
                   pointer_tables={"ptrs": ("a", "b")}, roles={"out": "out"})


def test_pointer_idioms_are_modelled_or_refused_with_their_line() -> None:
    import triton
    import triton.language as tl

    import kvtable.impl.triton_kernels  # noqa: F401 (interpreter mode, set before triton decorates)

    @triton.jit
    def to_pointer(ptrs, a, b, out):
        src = tl.load(ptrs + tl.program_id(0)).to(tl.pointer_type(tl.int64))
        tl.store(out + tl.program_id(0), tl.load(src + 1))

    @triton.jit
    def bytes_then_cast(ptrs, a, b, out):
        src = tl.cast(tl.load(ptrs + tl.program_id(0)) + 8, tl.pointer_type(tl.int64))  # 8 bytes: element 1
        tl.store(out + tl.program_id(0), tl.load(src))

    @triton.jit
    def wrong_element_type(ptrs, a, b, out):
        src = tl.load(ptrs + tl.program_id(0)).to(tl.pointer_type(tl.int32))
        tl.store(out + tl.program_id(0), tl.load(src))

    @triton.jit
    def integer_as_pointer(ptrs, a, b, out):
        src = tl.load(a).to(tl.pointer_type(tl.int64))
        tl.store(out + tl.program_id(0), tl.load(src))

    for kernel in (to_pointer, bytes_then_cast):  # both read element 1 of a or b: in bounds for N >= 2 only
        binding = _table_binding(kernel)
        found = discharge(kq.in_bounds(binding), GUARD_MS, small=prove.SMALL_VALUES)
        assert found.status == "counterexample" and dict(found.model)["N"] == 1, kernel
        proved = dataclasses.replace(binding, params={"N": (2, 64)})
        assert discharge(kq.in_bounds(proved), GUARD_MS).status == "proved", kernel
    for kernel, what in ((wrong_element_type, "cast to a pointer to tl.int32"),
                         (integer_as_pointer, "an integer cast to")):
        with pytest.raises(KernelNotSupported, match=what) as refused:
            kq.in_bounds(_table_binding(kernel))
        assert f"in {kernel.fn.__name__}: src = " in str(refused.value)


@pytest.mark.slow
def test_v2s_counterexample_replays_through_its_pointer_tables_and_names_the_int32_product() -> None:
    binding = load_binding("examples/vllm_v2_slot_binding.toml")
    (agrees,) = [ob for ob in kernel_obligations(binding) if ob.name.endswith("-agrees")]
    outcome = kernel_outcome(agrees, GUARD_MS, prove.SMALL_VALUES)
    assert outcome.status == "counterexample"
    assert "an int32 product overflowed before it was widened (line" in outcome.detail
    assert "slot = block * block_size + within" in outcome.detail
    assert "replayed guarded_slot_mappings_kernel in the Triton interpreter" in outcome.detail
    assert "not replayed" not in outcome.detail and "not reproduced" not in outcome.detail
    assert "load 0 block_table_ptrs[0]: the interpreter read block_table_ptrs[0]" in outcome.detail
