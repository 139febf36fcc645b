"""Replay a kernel obligation's counterexample in the Triton interpreter, on real tensors, under the guard.

The counterexample gives the launch parameters, the program id and lane, and the tensor elements the
failing lane reads. The replay builds those tensors (contiguous, inside spec/kernel_guard.py's guarded
buffer, every element the model names set to its value, the rest 0, or 1 for page sizes and widths),
launches the real kernel on the binding's grid, and reports what the failing lane did: the element it
really read or wrote, any access the guard blocked, and for a store the value in the output next to the clause's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kvtable.spec.kernel_binding import Binding
from kvtable.spec.kernel_guard import GuardBuffer, GuardHit, GuardLog, Touch, guarded
from kvtable.spec.kernel_symexec import python_function

BUDGET_BYTES = 64 << 20
"""The most memory a replay allocates; a counterexample needing more is reported, not run."""
_ELEMENT = re.compile(r"^(?P<name>[A-Za-z_][\w]*)\[(?P<index>-?\d+(?:, -?\d+)*)\]$")
_ACCESS = re.compile(r"^(?P<kind>load|store) (?P<number>\d+) (?P<tensor>\w+) (?P<what>.+)$")
_TORCH = {"int8": torch.int8, "int16": torch.int16, "int32": torch.int32, "int64": torch.int64}


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

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _evaluate(text: str | int, params: Mapping[str, int]) -> int:
    if isinstance(text, int):
        return text
    scope = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max, **params}
    return int(eval(text, {"__builtins__": {}}, scope))  # noqa: S307 (the user's own binding)


def model_parts(model: Mapping[str, int | bool]) -> tuple[dict[str, dict[tuple[int, ...], int]],
                                                          dict[tuple[str, int, str], dict[str, int | bool]]]:
    """The model's tensor elements by tensor, and its per-access values by (kind, number, tensor)."""
    elements: dict[str, dict[tuple[int, ...], int]] = {}
    accesses: dict[tuple[str, int, str], dict[str, int | bool]] = {}
    for name, value in model.items():
        found = _ELEMENT.match(name)
        if found:
            index = tuple(int(x) for x in found["index"].split(", "))
            elements.setdefault(found["name"], {})[index] = int(value)
            continue
        found = _ACCESS.match(name)
        if found:
            key = (found["kind"], int(found["number"]), found["tensor"])
            accesses.setdefault(key, {})[found["what"]] = value
    return elements, accesses


def _index(values: Mapping[str, int | bool], rank: int) -> tuple[int, ...] | None:
    try:
        return tuple(int(values[f"index[{k}]"]) for k in range(rank))
    except KeyError:
        return None


def replay(binding: Binding, model: Mapping[str, int | bool], *, budget: int = BUDGET_BYTES) -> Replay:
    """Run ``binding``'s kernel in the guarded interpreter on the counterexample ``model``."""
    import kvtable.impl.triton_kernels as tk  # sets TRITON_INTERPRET before triton is first imported

    if not tk.triton_available() or not tk.interpreting():
        return Replay(False, ["not replayed: needs triton running in its interpreter (no CUDA)"])
    params = {p: int(model.get(p, lo)) for p, (lo, _) in binding.params.items()}
    shapes = {name: tuple(_evaluate(s, params) for s in spec.sizes) for name, spec in binding.tensors.items()}
    nbytes = sum(int(np.prod(shape, dtype=np.int64)) * 8 for shape in shapes.values())
    if any(d < 0 for shape in shapes.values() for d in shape):
        return Replay(False, [f"not replayed: a negative size in {shapes}"])
    if nbytes > budget:
        return Replay(False, [f"not replayed: the counterexample's tensors need {nbytes / 2**30:.1f} GiB "
                              f"(shapes {shapes}); the replay budget is {budget >> 20} MiB"])
    narrow = [k.removesuffix(" hardware offset") for k, v in model.items() if k.endswith(" hardware offset")]
    if narrow:  # the wrap lives in the model's strides; a contiguous replay would not show it
        extent = sum(1 + sum((d - 1) * int(model.get(s, 1) if isinstance(s, str) else s)
                             for d, s in zip(shapes[name], spec.strides, strict=True))
                     for name, spec in binding.tensors.items()) * 8
        return Replay(False, [f"not replayed: the counterexample's addresses are computed below 64 bits ({narrow[0]}"
                              f"), so they depend on its strides, and its tensors need {extent / 2**30:.1f} GiB "
                              f"with them; the replay builds contiguous tensors"])
    guard = GuardBuffer([(name, _TORCH[spec.dtype], shapes[name]) for name, spec in binding.tensors.items()])
    elements, accesses = model_parts(model)
    ones = {binding.roles.get(r) for r in ("page_sizes", "widths")}  # a default that divides and spans
    for name, tensor in guard.tensors.items():
        flat = tensor.view(-1)
        if name in ones:
            flat.fill_(1)
        for index, value in elements.get(name, {}).items():
            offset = sum(i * s for i, s in zip(index, tensor.stride(), strict=True))
            if 0 <= offset < flat.numel():
                flat[offset] = value
    arguments = _arguments(binding, guard.tensors, params)
    grid = tuple(_evaluate(g, params) for g in binding.grid)
    kernel = binding.kernel_object()
    with guarded(guard.tensors) as log:
        kernel[grid](**arguments)
    program = tuple(int(model.get(f"pid{a}", 0)) for a in range(3))
    lane = next((int(v) for k, v in model.items() if re.fullmatch(r"lane\d+", k)), 0)
    result = Replay(True, margins_intact=guard.margins_intact())
    result.hits = [h for h in log.hits if h.program == program and h.lane == lane]
    result.touches = [t for t in log.touches if t.program == program and t.lane == lane]
    name = python_function(kernel).__name__
    result.lines.append(f"replayed {name} in the Triton interpreter: grid {grid}, program {program}, lane {lane}, "
                        f"parameters {params}")
    _describe(binding, guard.tensors, log, accesses, program, lane, result)
    if not result.margins_intact:
        result.lines.append("a poison margin was overwritten: a stray write outside every tensor")
    return result


def _arguments(binding: Binding, tensors: Mapping[str, torch.Tensor], params: Mapping[str, int]) -> dict[str, Any]:
    args: dict[str, Any] = {**binding.constexprs, **tensors}
    for name, spec in binding.tensors.items():
        for dim, stride in enumerate(spec.strides):
            if isinstance(stride, str):
                args[stride] = tensors[name].stride(dim)
    args.update({name: _evaluate(text, params) for name, text in binding.scalars.items()})
    return args


def _describe(binding: Binding, tensors: Mapping[str, torch.Tensor], log: GuardLog,
              accesses: Mapping[tuple[str, int, str], Mapping[str, int | bool]], program: tuple[int, ...],
              lane: int, result: Replay) -> None:
    """One line per access of the failing lane that the model names with its mask on."""
    regions = {r.name: r for r in log.regions}
    for (kind, number, tensor), values in sorted(accesses.items(), key=lambda kv: kv[0][1]):
        if not values.get("mask", False):
            continue
        shape = tuple(tensors[tensor].shape)
        index = _index(values, len(shape))
        outside = index is not None and any(not 0 <= i < s for i, s in zip(index, shape, strict=True))
        hit = next((h for h in result.hits if h.number == number), None)
        touch = next((t for t in result.touches if t.number == number), None)
        where = f"{kind} {number} {tensor}{list(index) if index else ''}"
        if outside:
            where += f" is outside its shape {list(shape)}"
        if hit is not None:
            result.lines.append(f"{where}: the guard blocked it ({hit.nearest})")
        elif touch is not None:
            real = regions[tensor].index(touch.flat) if touch.tensor == tensor else None
            landed = f"{touch.tensor}{list(real) if real is not None else f' element {touch.flat}'}"
            result.lines.append(f"{where}: the interpreter {'read' if kind == 'load' else 'wrote'} {landed}")
        if kind == "store" and index is not None and not outside:
            got = int(tensors[tensor][index])
            result.stored[index] = got
            expected = values.get("expected")
            said = [f"the symbolic run stored {values['value']}"] if "value" in values else []
            said += [f"the clause says {expected}"] if expected is not None else []
            result.lines.append(f"{tensor}{list(index)} = {got} after the run" + "".join(f"; {x}" for x in said))
