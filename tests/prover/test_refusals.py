"""Bindings and kernels no proof could use are refused before any solving, in one line with exit 2; a kernel
whose stores leave the clause's elements unwritten fails coverage; contradictory premises are "vacuous"."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest
import z3

pytest.importorskip("kvtable.impl.triton_kernels")  # sets TRITON_INTERPRET before triton loads (no GPU)
pytest.importorskip("triton")

from kvtable.exitcodes import EXIT_FAILED, UsageError  # noqa: E402
from kvtable.prover import prove  # noqa: E402
from kvtable.prover.obligations.kernels import MASKED_NOTE  # noqa: E402
from kvtable.prover.obligations.registry import Obligation  # noqa: E402
from kvtable.prover.solver.discharge import Query, discharge  # noqa: E402

BINDING = Path("examples/vllm_slot_binding.toml")
ARGS = ("num_tokens, max_num_tokens, req_indices_ptr, positions_ptr, block_table_ptr, block_table_stride, block_size,"
        " max_num_blocks, slot_mapping_ptr, PAD_SLOT_ID: tl.constexpr, BLOCK: tl.constexpr")
KERNELS = f'''
import triton
import triton.language as tl


@triton.jit
def writes_nothing({ARGS}):
    pass


@triton.jit
def masks_every_lane_off({ARGS}):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(slot_mapping_ptr + offsets, PAD_SLOT_ID, mask=offsets < 0)


@triton.jit
def lacks_an_argument(num_tokens):
    pass


@triton.jit
def adds_a_masked_off_lane({ARGS}):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < num_tokens
    req = tl.load(req_indices_ptr + offsets, mask=live, other=0)
    pos = tl.load(positions_ptr + offsets, mask=live, other=0)
    junk = tl.load(positions_ptr + offsets, mask=offsets < 0)  # no other=: undefined in compiled Triton
    inside = live & (pos // block_size < max_num_blocks)
    block = tl.load(block_table_ptr + req * block_table_stride + pos // block_size, mask=inside, other=0)
    slot = tl.where(inside, block * block_size + pos % block_size, PAD_SLOT_ID)
    tl.store(slot_mapping_ptr + offsets, slot + junk, mask=offsets < max_num_tokens)


@triton.jit
def adds_a_masked_off_lane_to_an_int64_slot({ARGS}):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = offsets < num_tokens
    req = tl.load(req_indices_ptr + offsets, mask=live, other=0)
    pos = tl.load(positions_ptr + offsets, mask=live, other=0)
    junk = tl.load(positions_ptr + offsets, mask=offsets < 0)  # no other=: undefined in compiled Triton
    inside = live & (pos // block_size < max_num_blocks)
    block = tl.load(block_table_ptr + req * block_table_stride + pos // block_size, mask=inside, other=0)
    slot = tl.where(inside, block.to(tl.int64) * block_size + pos % block_size, PAD_SLOT_ID)
    tl.store(slot_mapping_ptr + offsets, slot + junk, mask=offsets < max_num_tokens)


@triton.jit
def pads_with_a_default({ARGS}, token_mapping=None):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if token_mapping is not None:
        offsets = offsets + 1
    tl.store(slot_mapping_ptr + offsets, PAD_SLOT_ID, mask=offsets < max_num_tokens)


def plain(num_tokens):
    return num_tokens
'''


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    prove.add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import kvtable.impl.triton_kernels  # noqa: F401 (load_object's one-time import of torch and triton, not timed)

    folder = tmp_path_factory.mktemp("bindings")
    (folder / "kernels.py").write_text(KERNELS)
    (folder / "raises.py").write_text("raise RuntimeError('no GPU here')\n")
    toml = BINDING.read_text()
    edits = {
        "no_tensors": toml[:toml.index("[tensors.")],
        "clause_z9": toml.replace('clause = "W3"', 'clause = "Z9"'),
        "role_without_tensor": toml.replace('table = "block_table_ptr"', 'table = "block_tables_ptr"'),
        "unknown_grid_param": toml.replace('grid = ["cdiv(M, 64)"]', 'grid = ["cdiv(Q, 64)"]'),
        "extra_scalar": toml.replace('[scalars]', '[scalars]\nnum_reqs = "R"'),
        "unbound_argument": toml.replace('block_size = "BS"\n', ''),
        "misspelt_role": toml.replace('beyond_width = "pad"', 'beyond_widht = "pad"'),
        "stride_as_scalar": toml.replace('[scalars]', '[scalars]\nblock_table_stride = "W"'),
        "misspelt_key": toml.replace('assumes = [', 'asumes = ['),
        "grid_not_a_list": toml.replace('grid = ["cdiv(M, 64)"]', 'grid = "cdiv(M, 64)"'),
        "assumption_unknown_name": toml.replace('assumes = ["table entries >= 0"]',
                                                'assumes = ["table entries >= 0", "R * X < 2**31"]'),
        "assumption_floor_division": toml.replace('assumes = ["table entries >= 0"]', 'assumes = ["R // 2 < W"]'),
        "pad_programs_unknown_name": toml.replace('assumes = [', 'pad_programs = "pid9 == R"\nassumes = ['),
        "requires_false": toml.replace('requires = ["N <= M", "block_table_stride == W"]', 'requires = ["1 == 0"]'),
        "requires_contradictory": toml.replace('requires = ["N <= M",', 'requires = ["N > M", "N <= M",'),
        "grid_empty": toml.replace('grid = ["cdiv(M, 64)"]', 'grid = []'),
        "block_3": toml.replace("BLOCK = 64", "BLOCK = 3"),
        "assumes_a_string": toml.replace('assumes = ["table entries >= 0"]', 'assumes = "table entries >= 0"'),
        "requires_a_string": toml.replace('requires = ["N <= M", "block_table_stride == W"]', 'requires = "N <= M"'),
        "masked_loads_typo": toml.replace('assumes = [', 'masked_loads = "zeros"\nassumes = ['),
    }
    for name, text in edits.items():
        (folder / f"{name}.toml").write_text(text)
    return folder


CASES = {
    "missing TOML file": ("{d}/nowhere.toml", None, "no binding file"),
    "no [tensors]": ("{d}/no_tensors.toml", None, "no 'tensors'"),
    "module raises at import": (str(BINDING), "{d}/raises.py:kernel", "raised RuntimeError: no GPU here"),
    "--kernel names a missing file": (str(BINDING), "{d}/absent.py:kernel", "no file"),
    'clause = "Z9"': ("{d}/clause_z9.toml", None, "clause = 'Z9': no clause 'Z9'"),
    "role naming a tensor the kernel lacks": ("{d}/role_without_tensor.toml", None, "roles.table = 'block_tables_ptr'"),
    "unbound kernel argument": ("{d}/unbound_argument.toml", None, "['block_size'] are bound by none"),
    "--kernel os.path:join": (str(BINDING), "os.path:join", "'join' is not a @triton.jit function"),
    "plain Python function": (str(BINDING), "{d}/kernels.py:plain", "'plain' is not a @triton.jit function"),
    "unknown grid parameter": ("{d}/unknown_grid_param.toml", None, "grid: 'cdiv(Q, 64)': NameError"),
    "scalar for an argument the kernel lacks": ("{d}/extra_scalar.toml", None, "names ['num_reqs'], which the kernel"),
    "kernel lacking the binding's arguments": (str(BINDING), "{d}/kernels.py:lacks_an_argument", "no argument for"),
    "store-less @triton.jit kernel": (str(BINDING), "{d}/kernels.py:writes_nothing", "stores nothing into"),
    "a stride also bound as a scalar": ("{d}/stride_as_scalar.toml", None,
                                        "['block_table_stride'] bound twice: as a tensor's stride and as a scalar"),
    "misspelt role": ("{d}/misspelt_role.toml", None, "unknown role(s) 'beyond_widht' (did you mean 'beyond_width'?)"),
    "misspelt top-level key": ("{d}/misspelt_key.toml", None, "unknown key(s) 'asumes' (did you mean 'assumes'?)"),
    "grid as a string": ("{d}/grid_not_a_list.toml", None, "a list of expressions, one per axis"),
    "assumption naming an unknown name": ("{d}/assumption_unknown_name.toml", None,
                                          "assumption 'R * X < 2**31': NameError"),
    "assumption with //": ("{d}/assumption_floor_division.toml", None, "'//' is not defined"),
    "pad_programs naming an unknown name": ("{d}/pad_programs_unknown_name.toml", None,
                                            "pad_programs: 'pid9 == R': NameError"),
    'requires = ["1 == 0"]': ("{d}/requires_false.toml", None, "requires: '1 == 0' is always false"),
    "contradictory requires": ("{d}/requires_contradictory.toml", None, "contradict each other: no launch"),
    "grid = []": ("{d}/grid_empty.toml", None, "grid = []: a launch has one to three axes"),
    "BLOCK = 3": ("{d}/block_3.toml", None, "tl.arange(0, 3): Triton compiles only a power-of-two length"),
    "assumes written as a string": ("{d}/assumes_a_string.toml", None,
                                    'assumes = "table entries >= 0": a list of expressions'),
    "requires written as a string": ("{d}/requires_a_string.toml", None, 'requires = "N <= M": a list of expressions'),
    'masked_loads = "zeros"': ("{d}/masked_loads_typo.toml", None, "masked_loads = 'zeros': one of"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_binding_is_one_usage_line_before_any_solving(case: str, files: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    binding, kernel, message = CASES[case]

    def solved(*_: object, **__: object) -> None:
        raise AssertionError(f"{case}: a query was solved before the binding was refused")

    monkeypatch.setattr(prove, "discharge", solved)
    monkeypatch.setattr(prove, "kernel_outcome", solved)
    argv = ["--binding", binding.format(d=files), *(["--kernel", kernel.format(d=files)] if kernel else [])]
    with pytest.raises(UsageError) as refused:  # the CLI prints it as one line and exits 2
        prove.run(_parse(*argv))
    assert message in str(refused.value) and "\n" not in str(refused.value), str(refused.value)


@pytest.mark.slow
@pytest.mark.parametrize("case", ['requires = ["1 == 0"]', "grid = []", "BLOCK = 3", "assumes written as a string"])
def test_the_cli_refuses_each_odd_binding_in_one_line_with_exit_2(case: str, files: Path) -> None:
    binding, _, message = CASES[case]
    done = subprocess.run([sys.executable, "-m", "kvtable.cli", "prove", "--binding", binding.format(d=files)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == "", done
    (line,) = done.stderr.splitlines()
    assert line.startswith("kvtable prove: error: ") and message in line


@pytest.mark.slow
def test_the_cli_refuses_a_store_less_kernel_with_exit_2(files: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "kvtable.cli", "prove", "--binding", str(BINDING), "--kernel",
                           f"{files}/kernels.py:writes_nothing"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.splitlines() == ["kvtable prove: error: vllm-slot-mapping: the kernel stores nothing into"
                                        " 'slot_mapping_ptr', the binding's output, so it has nothing to prove"]


@pytest.mark.slow
def test_a_kernel_that_masks_every_lane_off_fails_coverage(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parse("--binding", str(BINDING), "--kernel", f"{files}/kernels.py:masks_every_lane_off",
                  "--only", "*-covers", "--only", "*-agrees")
    assert prove.run(args) == EXIT_FAILED
    out = capsys.readouterr().out
    assert "W3.kernel-vllm-slot-mapping-agrees" in out  # agreement alone holds of a kernel that stores nothing
    assert out.splitlines()[-1] == "failed: W3.kernel-vllm-slot-mapping-covers"


@pytest.mark.slow
def test_a_counterexample_resting_on_masked_off_lanes_says_it_did_not_reproduce(
        files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A load with its mask off and no ``other=`` is undefined in compiled Triton (the symbolic run gives it any
    value) while the interpreter reads 0: the replay says the counterexample did not reproduce, and why."""
    args = _parse("--binding", str(BINDING), "--kernel", f"{files}/kernels.py:adds_a_masked_off_lane",
                  "--only", "*-agrees")
    assert prove.run(args) == EXIT_FAILED
    out = capsys.readouterr().out
    assert MASKED_NOTE not in out  # its int32 block * block_size fails with masked lanes read as 0 too
    assert "not reproduced: the interpreter's run is not the symbolic run's" in out
    assert "compiled Triton leaves them undefined, the interpreter reads 0" in out


@pytest.mark.slow
def test_a_counterexample_only_masked_off_lanes_make_says_so_first_and_zero_proves_it(
        files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kernel = f"{files}/kernels.py:adds_a_masked_off_lane_to_an_int64_slot"
    assert prove.run(_parse("--binding", str(BINDING), "--kernel", kernel, "--only", "*-agrees")) == EXIT_FAILED
    out = capsys.readouterr().out
    assert f"    why: {MASKED_NOTE}\n" in out  # the first line of the why says what it rests on
    zero = files / "zero.toml"  # the same kernel on a target that fills 0: prover and interpreter agree
    zero.write_text(BINDING.read_text().replace("assumes = [", 'masked_loads = "zero"\nassumes = ['))
    assert prove.run(_parse("--binding", str(zero), "--kernel", kernel, "--only", "*-agrees")) == 0


def test_an_argument_with_a_default_left_unbound_keeps_it(files: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """SGLang's ``create_flashinfer_kv_indices_triton(..., token_mapping=None)``: TOML cannot write None, and the
    binding need not: the kernel runs with its default (here: no +1, so its stores stay in bounds)."""
    args = _parse("--binding", str(BINDING), "--kernel", f"{files}/kernels.py:pads_with_a_default",
                  "--only", "*-in-bounds")
    assert prove.run(args) == 0
    assert "W3.kernel-vllm-slot-mapping-in-bounds" in capsys.readouterr().out


def test_contradictory_premises_are_vacuous_not_proved() -> None:
    x = z3.BitVec("x", 32)
    outcome = discharge(Query((x > 5, x < 3), x == 7))
    assert outcome.status == "vacuous" and "premises are unsatisfiable" in outcome.detail
    result = prove.prove_one(Obligation("W5.fake-vacuous", "W5", "a fake", lambda: Query((x > 5, x < 3), x == 7)),
                             isolate=False)
    assert result.verdict == "vacuous" and not result.passed and prove.exit_status([result]) == EXIT_FAILED
    assert discharge(Query((x > 5,), x > 4)).status == "proved"  # satisfiable premises: the goal is asked
