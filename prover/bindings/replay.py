"""Replay a kernel obligation's counterexample in the Triton interpreter, under the guard.

The counterexample gives the launch parameters, the program id and lane, and the tensor elements the
failing lane reads. The replay builds those tensors (every element the model names set to its value, the
rest 0, or 1 for page sizes and widths): real contiguous tensors inside prover/symexec/guard.py's guarded
buffer when they fit, else, or when the model's addresses were computed below 64 bits and so depend on its
strides, virtual tensors with the model's strides (prover/symexec/memory.py: no host memory touched at all).
It launches the real kernel on the binding's grid and reports what the failing lane did: the element it
really read or wrote, any access the guard blocked, and for a store the value in the output next to the clause's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

import numpy as np
import torch

from kvtable.prover.bindings.binding import Binding
from kvtable.prover.symexec.guard import GuardBuffer, GuardHit, GuardLog, Touch, guarded
from kvtable.prover.symexec.memory import VirtualTensor, virtual_memory, virtual_tensors
from kvtable.prover.symexec.run import python_function

BUDGET_BYTES = 64 << 20
"""The most memory a replay allocates as real tensors; a counterexample needing more runs on virtual ones."""
PROGRAM_LIMIT = 1 << 12
"""The most programs a replay launches (the interpreter runs them one by one)."""
_ELEMENT = re.compile(r"^(?P<name>[A-Za-z_][\w]*)\[(?P<index>-?\d+(?:, -?\d+)*)\]$")
_ACCESS = re.compile(r"^(?P<kind>load|store) (?P<number>\d+) (?P<tensor>\w+)(?P<path>@path\d+)? (?P<what>.+)$")
_TORCH = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64,
          "uint64": torch.uint64}


@dataclass
class Replay:
    """What the interpreter did on the counterexample's inputs."""

    ran: bool
    lines: list[str] = field(default_factory=list)
    hits: list[GuardHit] = field(default_factory=list)
    """Blocked accesses of the failing program and lane."""
    touches: list[Touch] = field(default_factory=list)
    """Accesses of the failing program and lane that landed in a tensor."""
    stored: dict[tuple[int, ...], int] = field(default_factory=dict)
    """Output elements named by the counterexample, as the interpreter left them."""
    margins_intact: bool = True
    diverged: bool = False
    """The interpreter's accesses went elsewhere than the symbolic run's: the counterexample did not reproduce."""

    def __str__(self) -> str:
        return "\n".join(self.lines)


def evaluate(text: str | int, params: Mapping[str, int]) -> int:
    """A binding's size or scalar expression at concrete parameters."""
    if isinstance(text, int):
        return text
    scope = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, **params}
    return int(eval(text, {"__builtins__": {}}, scope))  # noqa: S307 (the user's own binding)


def model_parts(model: Mapping[str, int | bool]) -> tuple[dict[str, dict[tuple[int, ...], int]],
                                                          dict[tuple[str, int, str, str], dict[str, int | bool]]]:
    """The model's tensor elements by tensor, and its per-access values by (kind, number, tensor, path)."""
    elements: dict[str, dict[tuple[int, ...], int]] = {}
    accesses: dict[tuple[str, int, str, str], dict[str, int | bool]] = {}
    for name, value in model.items():
        found = _ELEMENT.match(name)
        if found:
            index = tuple(int(x) for x in found["index"].split(", "))
            elements.setdefault(found["name"], {})[index] = int(value)
            continue
        found = _ACCESS.match(name)
        if found:
            key = (found["kind"], int(found["number"]), found["tensor"], found["path"] or "")
            accesses.setdefault(key, {})[found["what"]] = value
    return elements, accesses


def _index(values: Mapping[str, int | bool], rank: int) -> tuple[int, ...] | None:
    try:
        return tuple(int(values[f"index[{k}]"]) for k in range(rank))
    except KeyError:
        return None


def replay(binding: Binding, model: Mapping[str, int | bool], *, budget: int = BUDGET_BYTES) -> Replay:
    """Run ``binding``'s kernel in the guarded interpreter on the counterexample ``model``: on real contiguous
    tensors when they fit ``budget``, else (or when its addresses were computed below 64 bits, so they depend on
    its strides) on virtual tensors with the model's own strides (prover/symexec/memory.py)."""
    import kvtable.impl.triton_kernels as tk  # sets TRITON_INTERPRET before triton is first imported

    if not tk.triton_available() or not tk.interpreting():
        return Replay(False, ["not replayed: needs triton running in its interpreter (no CUDA)"])
    params = {p: int(model.get(p, lo)) for p, (lo, _) in binding.params.items()}
    shapes = {name: tuple(evaluate(s, params) for s in spec.sizes) for name, spec in binding.tensors.items()}
    if any(d < 0 for shape in shapes.values() for d in shape):
        return Replay(False, [f"not replayed: a negative size in {shapes}"])
    grid = tuple(evaluate(g, params) for g in binding.grid)
    if int(np.prod(grid, dtype=np.int64)) > PROGRAM_LIMIT:
        return Replay(False, [f"not replayed: grid {grid} has more than {PROGRAM_LIMIT} programs"])
    nbytes = sum(int(np.prod(shape, dtype=np.int64)) * 8 for shape in shapes.values())
    narrow = any(k.endswith(" hardware offset") for k in model)
    memory = _virtual(binding, model, shapes) if narrow or nbytes > budget else _real(binding, shapes)
    if isinstance(memory, str):
        return Replay(False, [f"not replayed: {memory}"])
    tensors, context, intact, what = memory
    elements, accesses = model_parts(model)
    ones = {binding.roles.get(r) for r in ("page_sizes", "widths")}  # a default that divides and spans
    for name, tensor in tensors.items():
        if name in ones:
            tensor.fill_(1)
        for index, value in elements.get(name, {}).items():
            if name not in binding.pointer_tables:  # a table of pointers holds the tensors' own addresses
                _set(tensor, index, value)
    _fill_pointer_tables(binding, tensors)
    kernel = binding.kernel_object()
    with context(tensors) as log, np.errstate(all="ignore"):  # a counterexample may well divide by 0 or wrap
        kernel[grid](**_arguments(binding, tensors, params))
    program = tuple(int(model.get(f"pid{a}", 0)) for a in range(3))
    lane = next((int(v) for k, v in model.items() if re.fullmatch(r"lane\d+", k)), 0)
    result = Replay(True, margins_intact=intact())
    result.hits = [h for h in log.hits if h.program == program and (h.lane == lane or h.lanes == 1)]
    result.touches = [t for t in log.touches if t.program == program and (t.lane == lane or t.lanes == 1)]
    name = python_function(kernel).__name__
    result.lines.append(f"replayed {name} in the Triton interpreter on {what}: grid {grid}, program {program}, "
                        f"lane {lane}, parameters {params}")
    _describe(binding, tensors, log, accesses, program, lane, result)
    if result.diverged:
        masked = any(k.startswith("undefined#") for k in model)
        result.lines.append("not reproduced: the interpreter's run is not the symbolic run's (where it accessed, or "
                            "what it stored)" + (
            "; the symbolic run gave lanes loaded with their mask off (no other=) values of their own: compiled "
            "Triton leaves them undefined, the interpreter reads 0" if masked else ""))
    if not result.margins_intact:
        result.lines.append("a poison margin was overwritten: a stray write outside every tensor")
    return result


def pad_hint(binding: Binding, model: Mapping[str, int | bool]) -> list[str]:
    """The likely cause of a counterexample whose store of the pad lands where its program may write nothing: a
    padding program (vLLM's last one) the binding does not name in ``pad_programs``."""
    if binding.pad_programs or "pad" not in binding.roles:
        return []
    params = {p: int(model.get(p, lo)) for p, (lo, _) in binding.params.items()}
    try:
        pad = evaluate(binding.roles["pad"], params)
    except Exception:  # noqa: BLE001 (a pad over names the model lacks: no hint)
        return []
    _, accesses = model_parts(model)
    padding = [key for key, values in accesses.items() if key[0] == "store" and values.get("mask")
               and values.get("value") == pad and values.get("in range") is False]
    if not padding:
        return []
    program = tuple(int(model.get(f"pid{a}", 0)) for a in range(len(binding.grid)))
    return [f"likely cause: the binding has no pad_programs. Program {program} stores the pad {pad} where the clause"
            " has it write nothing: a program that only pads [tokens, padded) is judged as a request unless"
            " pad_programs names it (vLLM's last program: pad_programs = \"pid0 == R\" for grid [\"R + 1\"])"]


Memory = tuple[dict[str, Any], Callable[..., AbstractContextManager[GuardLog]], Callable[[], bool], str]


def _real(binding: Binding, shapes: Mapping[str, tuple[int, ...]]) -> Memory:
    """Contiguous torch tensors inside one guarded buffer with poison margins."""
    guard = GuardBuffer([(name, _TORCH[spec.dtype], shapes[name]) for name, spec in binding.tensors.items()])
    return guard.tensors, guarded, guard.margins_intact, "real tensors"


def _virtual(binding: Binding, model: Mapping[str, int | bool], shapes: Mapping[str, tuple[int, ...]]) -> Memory | str:
    """Virtual tensors with the model's strides (a contiguous last dimension where the binding says 1)."""
    specs = [(name, _TORCH[spec.dtype], shapes[name],
              tuple(int(model.get(s, 1)) if isinstance(s, str) else s for s in spec.strides))
             for name, spec in binding.tensors.items()]
    try:
        tensors = virtual_tensors(specs)
    except ValueError as error:
        return str(error)
    extent = sum(t.extent * t.itemsize for t in tensors.values())
    return tensors, virtual_memory, lambda: True, (f"virtual tensors with the model's strides ({extent / 2**30:.1f}"
                                                    f" GiB of address space, only the touched elements stored)")


def _set(tensor: torch.Tensor | VirtualTensor, index: tuple[int, ...], value: int) -> None:
    """Element ``index`` through the strides (a model's out-of-shape index lands where the kernel reads it)."""
    offset = sum(i * tensor.stride(dim) for dim, i in enumerate(index))
    if isinstance(tensor, VirtualTensor):
        if 0 <= offset < tensor.extent:
            tensor.write(offset, value)
    elif 0 <= offset < tensor.numel():
        tensor.view(-1)[offset] = value


def _address(tensor: torch.Tensor | VirtualTensor) -> int:
    """Where a tensor starts: its virtual base, or its ``data_ptr()``."""
    return tensor.base if isinstance(tensor, VirtualTensor) else tensor.data_ptr()


def _strides(binding: Binding, tensors: Mapping[str, torch.Tensor | VirtualTensor]) -> dict[str, int]:
    """Every stride argument's value: the stride of the tensor dimension it names."""
    return {stride: tensors[name].stride(dim) for name, spec in binding.tensors.items()
            for dim, stride in enumerate(spec.strides) if isinstance(stride, str)}


def _fill_pointer_tables(binding: Binding, tensors: Mapping[str, torch.Tensor | VirtualTensor]) -> None:
    """Entry ``k`` of each table of pointers: the address of the ``k``-th tensor it names (inside the guard, so a
    load through it is checked like any other), or the stride it names (vLLM V2's per-group row strides)."""
    strides = _strides(binding, tensors)
    for table, names in binding.pointer_tables.items():
        target = tensors[table]
        for k, name in enumerate(names[:target.shape[0]]):
            value = _address(tensors[name]) if name in tensors else strides[name]
            if isinstance(target, VirtualTensor):
                target.write(target.offset((k,)), value)
            else:
                target[k] = value


def _arguments(binding: Binding, tensors: Mapping[str, torch.Tensor], params: Mapping[str, int]) -> dict[str, Any]:
    behind = binding.behind_pointers()  # reached through a table of pointers: no argument of their own
    args: dict[str, Any] = {**binding.constexprs, **{n: t for n, t in tensors.items() if n not in behind}}
    for name, spec in binding.tensors.items():
        for dim, stride in enumerate(spec.strides):
            if isinstance(stride, str) and stride not in behind:
                args[stride] = tensors[name].stride(dim)
    args.update({name: evaluate(text, params) for name, text in binding.scalars.items()})
    return args


def _wrapped(tensor: torch.Tensor | VirtualTensor, index: tuple[int, ...] | None,
             values: Mapping[str, int | bool]) -> str:
    """Where the model's hardware offset (an address computed below 64 bits) is not the element's own."""
    offset = values.get("hardware offset")
    if offset is None or index is None:
        return ""
    exact = sum(i * tensor.stride(dim) for dim, i in enumerate(index))
    if int(offset) == exact:
        return ""
    return f", element {exact}, at hardware offset {int(offset)} (computed below 64 bits, it wrapped)"


def _relative(tensor: str, flat: int | None, region: Any) -> str:
    """Where element ``flat`` of ``tensor`` lies outside it (before its start, or past its last element)."""
    extent = region.nbytes // region.itemsize
    if flat is None or 0 <= flat < extent:
        return f"element {flat} of {tensor}"
    return f"{-flat} element(s) before {tensor}" if flat < 0 else f"{flat - extent + 1} element(s) past the end of " \
        f"{tensor}"


NULL_PAGE = 4096
"""Addresses this close to 0 are a null pointer plus an offset (an empty tensor's ``data_ptr()`` is 0)."""


def _signed64(address: int) -> int:
    address %= 2**64
    return address - 2**64 if address >= 2**63 else address


def _near_null(address: int) -> str:
    """``"; address -8: a null pointer's neighbourhood"`` where the address is within a page of 0."""
    signed = _signed64(address)
    if signed == 0:
        return "; address 0: a null pointer"
    return f"; address {signed}: a null pointer plus an offset" if abs(signed) < NULL_PAGE else ""


def _blocked(tensor: str, flat: int | None, region: Any, address: int) -> str:
    """Why the guard blocked an access the model predicted: an empty tensor, a null address, before or past it."""
    if region.nbytes == 0:
        null = " (no storage: its data_ptr() is 0)" if region.start == 0 else ""
        return (f"{tensor} is empty, 0 elements{null}, so every access to it is outside it; this one at element"
                f" {flat}{_near_null(address)}")
    return _relative(tensor, flat, region) + _near_null(address)


Logged = TypeVar("Logged", GuardHit, Touch)


def _same_access(logged: list[Logged], kind: str, number: int, line: int | bool | None, lane: int,
                 predicted: Callable[[Logged], bool]) -> Logged | None:
    """The interpreter's record of the symbolic access ``kind number`` in the failing program: made by the same
    kernel line (its number otherwise); of several (a loop's iterations, the lanes of another block), the one at
    the element the model predicts, else the failing lane's."""
    same = [x for x in logged if x.kind == kind and (x.site.endswith(f":{line}") if line is not None
                                                     else x.number == number)]
    own = [x for x in same if x.lane == lane or x.lanes == 1]
    return next((x for x in same if predicted(x)), own[0] if own else None)


def _at_address(hit: GuardHit, address: int | None) -> bool:
    return hit.address % 2**64 == address


def _at_element(touch: Touch, tensor: str, exact: int | None) -> bool:
    return touch.tensor == tensor and touch.flat == exact


def _describe(binding: Binding, tensors: Mapping[str, torch.Tensor | VirtualTensor], log: GuardLog,
              accesses: Mapping[tuple[str, int, str, str], Mapping[str, int | bool]], program: tuple[int, ...],
              lane: int, result: Replay) -> None:
    """One line per access of the failing lane that the model names with its mask on."""
    regions = {r.name: r for r in log.regions}
    hits = [h for h in log.hits if h.program == program]
    touches = [t for t in log.touches if t.program == program]
    for (kind, number, tensor, _), values in sorted(accesses.items(), key=lambda kv: kv[0][1]):
        if not values.get("mask", False):
            continue
        shape = tuple(tensors[tensor].shape)
        index = _index(values, len(shape))
        outside = index is not None and any(not 0 <= i < s for i, s in zip(index, shape, strict=True))
        exact = None if index is None else sum(i * tensors[tensor].stride(d) for d, i in enumerate(index))
        region = regions[tensor]
        address = None if exact is None else (region.start + exact * region.itemsize) % 2**64
        hit = _same_access(hits, kind, number, values.get("line"), lane,
                           partial(_at_address, address=address))
        touch = _same_access(touches, kind, number, values.get("line"), lane,
                             partial(_at_element, tensor=tensor, exact=exact))
        where = f"{kind} {number} {tensor}{list(index) if index else ''}"
        if outside:
            where += f" is outside its shape {list(shape)}"
        wrapped = _wrapped(tensors[tensor], index, values)
        if wrapped:
            where += wrapped
        if hit is not None:
            own = hit.address % 2**64 == address
            result.diverged |= not own and not wrapped
            result.lines.append(f"{where}: the guard blocked it ({_blocked(tensor, exact, region, hit.address)})"
                                if own else f"{where}: the interpreter's access went elsewhere, and the guard blocked"
                                f" it ({hit.nearest}{_near_null(hit.address)})")
        elif touch is not None:
            real = regions[tensor].index(touch.flat) if touch.tensor == tensor and not wrapped else None
            landed = f"{touch.tensor}{list(real) if real is not None else f' element {touch.flat}'}"
            result.diverged |= (touch.tensor, touch.flat) != (tensor, exact) and not wrapped
            result.lines.append(f"{where}: the interpreter {'read' if kind == 'load' else 'wrote'} {landed}")
        if kind == "store" and index is not None and not outside:
            got = int(tensors[tensor][index])
            result.stored[index] = got
            result.diverged |= "value" in values and got != int(values["value"]) and not wrapped
            expected = values.get("expected")
            said = [f"the symbolic run stored {values['value']}"] if "value" in values else []
            if values.get("in range") is False:  # the clause writes nothing here from this program
                said += [f"the clause has program {program} write no element {list(index)} of {tensor}"]
            elif expected is not None:
                said += [f"the clause says {expected}"]
            result.lines.append(f"{tensor}{list(index)} = {got} after the run" + "".join(f"; {x}" for x in said))
