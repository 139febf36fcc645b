"""How a Triton kernel is launched, in symbols: which argument is which tensor, its sizes and strides, the grid.

A ``Binding`` is declarative (plain strings and ints, so it can live in a TOML file or a Python object):
launch parameters with their ranges, the tensors behind the pointer arguments (sizes as expressions over
the parameters, strides as the kernel's stride arguments or a literal 1 for a contiguous last dimension),
the scalar arguments as expressions, the constexprs, the grid, what the host checks before launching,
and the roles the clause's formula reads (``table``, ``lengths``, ``out``, ...).

``Launch`` turns it into z3: every parameter and stride an int32 variable (Triton passes Python ints
that fit as int32), every program id an int32 below its grid size (CUDA allows 2^31-1 programs on axis 0,
65535 on axes 1 and 2), every tensor's contents an uninterpreted function of its logical indices.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import sys
import tomllib
from collections.abc import Collection, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import z3

from kvtable.prover.symexec.tl import Trace
from kvtable.prover.symexec.values import DTYPES, INT32, INT64, IntType, KernelNotSupported, Parts, Pointer, Sym

INT32_MAX = 2**31 - 1
ROLES = frozenset({"table", "page_sizes", "widths", "lengths", "rows", "positions", "query_start_loc",
                   "row_of_program", "program_axis", "tokens", "padded", "pad", "beyond_width", "trusted", "out",
                   "n", "bs", "actual_bs", "meta", "dst_w", "packed", "packed_numel", "tail_pad", "prefix_lens",
                   "last_loc", "free_pages", "prefixes", "extend_lens", "locs"})
"""The parts of a clause a ``[roles]`` key may name (prover/bindings/contracts.py and queries.py read them)."""
MASKED_LOADS = ("undefined", "zero")
"""The values of a binding's ``masked_loads``."""
MASKED_LOADS_AS: ContextVar[str | None] = ContextVar("MASKED_LOADS_AS", default=None)
"""Set: every launch reads masked-off lanes this way, whatever its binding says (to ask whether a counterexample
rests on them: prover/obligations/kernels.py)."""
POINTER_DTYPE = "uint64"
"""The element type of a table of pointers (``torch.uint64`` of ``data_ptr()``s, vLLM V2)."""
GRID_LIMITS = (INT32_MAX, 65535, 65535)
"""CUDA's limits on the number of programs per grid axis."""


@dataclass(frozen=True)
class TensorSpec:
    """A pointer argument's tensor: element dtype, sizes (expressions) and strides (argument names or 1)."""

    dtype: str
    sizes: tuple[str, ...]
    strides: tuple[str | int, ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES and self.dtype != POINTER_DTYPE:
            raise ValueError(f"tensor dtype {self.dtype!r}: one of {sorted(DTYPES)} (or {POINTER_DTYPE} for a"
                             " table of pointers)")
        if len(self.sizes) != len(self.strides):
            raise ValueError(f"sizes {self.sizes} and strides {self.strides} differ in rank")
        literal = [s for s in self.strides if not isinstance(s, str)]
        if any(s != 1 for s in literal) or len(literal) > 1:
            raise ValueError(f"strides {self.strides}: argument names, and at most one literal 1 (contiguous)")


@dataclass(frozen=True)
class Binding:
    """What ``kvtable prove --kernel`` needs to know about a kernel's launch and the clause it implements."""

    kernel: Any
    """The ``@triton.jit`` function, or ``"pkg.mod:name"``."""
    clause: str
    """``W1``-``W4``, ``G4`` (location kernels) or ``G3`` (the replay fill); prover/bindings/contracts.py."""
    params: Mapping[str, tuple[int, int]]
    """Launch parameters and their inclusive ranges (sizes, counts)."""
    tensors: Mapping[str, TensorSpec]
    grid: tuple[str, ...]
    scalars: Mapping[str, str] = field(default_factory=dict)
    """Integer arguments as expressions over the parameters (each must fit int32)."""
    constexprs: Mapping[str, int] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    """What the host checks before the launch, as expressions over the parameters."""
    roles: Mapping[str, str] = field(default_factory=dict)
    """The clause's inputs: tensor argument names (``table``, ``lengths``, ...) or parameter expressions."""
    stride_ranges: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Ranges for stride arguments; default ``[0, 2^31-1]``."""
    name: str = ""
    """A short name for obligation names (default: the kernel's function name)."""
    assumes: tuple[str, ...] = ()
    """What the kernel trusts beyond the host checks (prover/bindings/assumptions.py); printed with the verdict."""
    pad_programs: str = ""
    """A condition over ``pid0``..``pid2`` and the parameters: the programs that only write the pad into
    ``[tokens, padded)`` (vLLM's last program), judged as padding rather than as a request."""
    pointer_tables: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """A tensor of pointers (or of row strides) -> the tensor (or stride argument) each entry is, in order:
    a load through an entry reads that named tensor (vLLM V2's per-group block tables)."""
    masked_loads: str = "undefined"
    """What a masked-off lane of a ``tl.load`` without ``other=`` reads: ``"undefined"`` (any value: compiled
    Triton's documented semantics, sound on every target) or ``"zero"`` (a target the user knows fills 0, as the
    interpreter does)."""

    def kernel_object(self) -> Any:
        if not isinstance(self.kernel, str):
            return self.kernel
        return load_object(self.kernel)

    @property
    def label(self) -> str:
        if self.name:
            return self.name
        from kvtable.prover.symexec.run import python_function
        return python_function(self.kernel_object()).__name__.strip("_").replace("_", "-")

    def strides(self) -> set[str]:
        return {s for t in self.tensors.values() for s in t.strides if isinstance(s, str)}

    def behind_pointers(self) -> set[str]:
        """Tensors and strides reached only through a table of pointers: no kernel argument of their own
        (a binding's check that every tensor is an argument skips these)."""
        return {name for names in self.pointer_tables.values() for name in names}


def load_object(reference: str) -> Any:
    """``"pkg.mod:attr"`` or ``"path/to/file.py:attr"``: the attribute, imported (where no GPU is present, after
    impl/triton_kernels.py has set ``TRITON_INTERPRET``, so the module's kernels replay in the interpreter)."""
    module_name, _, attr = reference.partition(":")
    if not attr:
        raise ValueError(f"{reference!r}: expected MODULE:NAME or FILE.py:NAME")
    import kvtable.impl.triton_kernels  # noqa: F401 (its import sets TRITON_INTERPRET where CUDA is absent)
    if module_name.endswith(".py") and not Path(module_name).is_file():
        raise ValueError(f"{reference}: no file {module_name}")
    try:
        module = _import(module_name)
    except Exception as exc:  # the user's module raised while importing: one line, not its traceback
        raise ValueError(f"{reference}: importing {module_name} raised {type(exc).__name__}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"{module_name} has no attribute {attr!r}") from None


def _import(module_name: str) -> Any:
    """A module by dotted name, or a ``.py`` file as a module of its own."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name)
    spec = importlib.util.spec_from_file_location(f"_kvtable_binding_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    if str(path.resolve().parent) not in sys.path:  # its sibling modules import, as under ``python file.py``
        sys.path.append(str(path.resolve().parent))
    spec.loader.exec_module(module)
    return module


def binding_from_toml(path: str | Path) -> Binding:
    """A binding written as TOML: the same fields, tensors as ``[tensors.NAME]`` tables; a file that is missing,
    malformed or lacks a required table is a ``ValueError`` naming it."""
    try:
        return _from_toml(path)
    except FileNotFoundError:
        raise ValueError(f"no binding file {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    except KeyError as exc:
        raise ValueError(f"{path}: no {exc.args[0]!r} (a binding needs [tensors], [params] and grid)") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from None


def hinted(unknown: list[str], known: Collection[str]) -> str:
    """The unknown names, each with the known one it is closest to, where one is close (a likely typo)."""
    return ", ".join(f"{u!r} (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(u, known, 1))
                     else repr(u) for u in unknown)


def _from_toml(path: str | Path) -> Binding:
    data = tomllib.loads(Path(path).read_text())
    keys = {f.name for f in fields(Binding)}
    unknown = sorted(set(data) - keys)
    if unknown:
        raise ValueError(f"unknown key(s) {hinted(unknown, keys)}; a binding has {sorted(keys)}")
    for key in LIST_KEYS:
        if key in data and not isinstance(data[key], list):
            raise ValueError(not_a_list(key, data[key]))
    tensors = {name: TensorSpec(t["dtype"], tuple(t["sizes"]), tuple(t["strides"]))
               for name, t in data.pop("tensors").items()}
    params = {name: (int(lo), int(hi)) for name, (lo, hi) in data.pop("params").items()}
    ranges = {name: (int(lo), int(hi)) for name, (lo, hi) in data.pop("stride_ranges", {}).items()}
    pointers = {name: tuple(entries) for name, entries in data.pop("pointer_tables", {}).items()}
    return Binding(tensors=tensors, params=params, stride_ranges=ranges, grid=tuple(data.pop("grid")),
                   requires=tuple(data.pop("requires", ())), assumes=tuple(data.pop("assumes", ())),
                   pointer_tables=pointers, **data)


LIST_KEYS = ("grid", "requires", "assumes")
"""The keys whose value is a list of expressions (one string is refused, not read letter by letter)."""


def not_a_list(key: str, value: object) -> str:
    what = "expressions, one per axis" if key == "grid" else "expressions"
    shown = json.dumps(value) if isinstance(value, str | int | float | list | dict) else repr(value)
    return f"{key} = {shown}: a list of {what} ({key} = [{shown}]), not one {type(value).__name__}"


def load_binding(reference: str) -> Binding:
    """``FILE.toml``, ``FILE.py:NAME`` or ``pkg.mod:NAME`` naming a ``Binding``."""
    if reference.endswith(".toml"):
        return binding_from_toml(reference)
    found = load_object(reference)
    if not isinstance(found, Binding):
        raise ValueError(f"{reference} is a {type(found).__name__}, not a kvtable Binding")
    return found


def _cdiv(a: Any, b: Any) -> Any:
    return (a + b - 1) / b


def _min(a: Any, b: Any) -> Any:
    return z3.If(a < b, a, b)


def _max(a: Any, b: Any) -> Any:
    return z3.If(a > b, a, b)


class Launch:
    """A binding in z3: parameters, strides, program ids, tensor contents; and the facts a launch implies."""

    def __init__(self, binding: Binding, prefix: str = "") -> None:
        self.binding = binding
        self.prefix = prefix
        self.params = {name: z3.BitVec(prefix + name, 32) for name in binding.params}
        self.stride_vars = {name: z3.BitVec(prefix + name, 32) for name in sorted(binding.strides())}
        self.pids = tuple(z3.BitVec(f"{prefix}pid{axis}", 32) for axis in range(len(binding.grid)))
        self._functions: dict[str, z3.FuncDeclRef] = {}

    # Expressions over the parameters (int64, exact for int32 parameters) ---------------------------
    def expr(self, text: str | int) -> z3.BitVecRef:
        if isinstance(text, int):
            return z3.BitVecVal(text, 64)
        scope = {name: z3.SignExt(32, v) for name, v in self.params.items()}
        scope.update(cdiv=_cdiv, min=_min, max=_max)
        value = eval(text, {"__builtins__": {}}, scope)  # noqa: S307 (a binding is the user's own code)
        return value if isinstance(value, z3.ExprRef) else z3.BitVecVal(value, 64)

    def condition(self, text: str) -> z3.BoolRef:
        """A host check over the parameters and the stride arguments (or a condition on the program ids
        ``pid0``..``pid2``: ``pad_programs``)."""
        scope = {name: z3.SignExt(32, v) for name, v in {**self.params, **self.stride_vars}.items()}
        scope.update({f"pid{axis}": z3.SignExt(32, pid) for axis, pid in enumerate(self.pids)})
        scope.update(cdiv=_cdiv, min=_min, max=_max)
        return eval(text, {"__builtins__": {}}, scope)  # noqa: S307

    def grid(self) -> tuple[z3.BitVecRef, ...]:
        return tuple(self.expr(g) for g in self.binding.grid)

    # Tensor contents --------------------------------------------------------------------------------
    def element(self, tensor: str, indices: tuple[z3.ArithRef, ...]) -> z3.BitVecRef:
        """The element at integer ``indices`` of tensor argument ``tensor`` (one function per tensor)."""
        spec = self.binding.tensors[tensor]
        fn = self._functions.get(tensor)
        if fn is None:
            sorts = [z3.IntSort()] * len(spec.sizes) + [z3.BitVecSort(element_type(spec.dtype).bits)]
            fn = z3.Function(self.prefix + tensor, *sorts)
            self._functions[tensor] = fn
        return fn(*indices)

    def indices(self, pointer: Pointer) -> tuple[z3.BitVecRef, ...]:
        """The per-dimension indices (int64) of an address in ``pointer.tensor``: each stride's coefficient."""
        spec = self.binding.tensors[pointer.tensor]
        own = {s for s in spec.strides if isinstance(s, str)}
        foreign = [n for n, _ in pointer.parts.coeffs if n not in own]
        if foreign:
            raise KernelNotSupported(f"an address into {pointer.tensor} uses the stride(s) {foreign} of another"
                                     f" tensor, or a product of strides")
        zero = z3.BitVecVal(0, 64)
        out = []
        for stride in spec.strides:
            if isinstance(stride, str):
                out.append(pointer.parts.coeff(stride) if pointer.parts.coeff(stride) is not None else zero)
            else:
                out.append(pointer.parts.rest)
        return tuple(out)

    def rest_is_zero(self, pointer: Pointer) -> z3.BoolRef:
        """Without a contiguous dimension, a stride-free part of the address leaves the tensor's layout."""
        if any(not isinstance(s, str) for s in self.binding.tensors[pointer.tensor].strides):
            return z3.BoolVal(True)
        return pointer.parts.rest == 0

    def read(self, tensor: str, pointer: Pointer) -> z3.BitVecRef:
        return self.element(tensor, tuple(z3.BV2Int(i, is_signed=True) for i in self.indices(pointer)))

    def sizes(self, tensor: str) -> tuple[z3.BitVecRef, ...]:
        return tuple(self.expr(s) for s in self.binding.tensors[tensor].sizes)

    # The kernel's arguments -------------------------------------------------------------------------
    def arguments(self) -> dict[str, Any]:
        b = self.binding
        args: dict[str, Any] = dict(b.constexprs)
        for name, spec in b.tensors.items():
            if spec.dtype == POINTER_DTYPE and name not in b.pointer_tables:
                raise KernelNotSupported(f"tensor {name} holds {POINTER_DTYPE} values but is not one of the"
                                         " binding's pointer_tables")
            args[name] = self.base(name)
        for name, var in self.stride_vars.items():
            args[name] = Sym.stride(name, var, INT32)
        for name, text in b.scalars.items():
            args[name] = Sym(self.params[text] if text in self.params else z3.Extract(31, 0, self.expr(text)), INT32)
        return args

    def base(self, tensor: str) -> Pointer:
        """A pointer to element 0 of ``tensor``."""
        zero = z3.BitVecVal(0, 64)
        return Pointer(tensor, element_type(self.binding.tensors[tensor].dtype), zero, Parts((), zero))

    def entries(self, pointer: Pointer) -> list[tuple[z3.BoolRef, object]] | None:
        """A load from a table of pointers: entry ``k`` (a named tensor's pointer, or a stride argument as an
        int64 stride) where the load's index is ``k``; None for any other tensor."""
        names = self.binding.pointer_tables.get(pointer.tensor)
        if names is None:
            return None
        (index,) = self.indices(pointer)
        out: list[tuple[z3.BoolRef, object]] = []
        for k, name in enumerate(names):
            if name in self.binding.tensors:
                entry: object = self.base(name)
            elif name in self.stride_vars:
                entry = Sym.stride(name, z3.SignExt(32, self.stride_vars[name]), INT64)
            else:
                raise KernelNotSupported(f"pointer_tables.{pointer.tensor}: {name!r} is neither a tensor nor a"
                                         " stride of one")
            out.append((index == k, entry))
        return out

    def trace(self) -> Trace:
        masked = MASKED_LOADS_AS.get() or self.binding.masked_loads
        return Trace(read=self.read, grid=self.pids, sizes=tuple(z3.Extract(31, 0, g) for g in self.grid()),
                     entries=self.entries, masked_zero=masked == "zero", facts=self.facts)

    def facts(self) -> list[z3.BoolRef]:
        """Parameter and stride ranges, int32 scalars, grid limits, program ids in the grid, host checks."""
        b = self.binding
        facts = [z3.And(v >= lo, v <= hi) for (lo, hi), v in
                 ((b.params[n], var) for n, var in self.params.items())]
        for name, var in self.stride_vars.items():
            lo, hi = b.stride_ranges.get(name, (0, INT32_MAX))
            facts.append(z3.And(var >= lo, var <= hi))
        for text in b.scalars.values():
            value = self.expr(text)
            facts.append(z3.And(value >= -(2**31), value <= INT32_MAX))
        for pid, size, limit in zip(self.pids, self.grid(), GRID_LIMITS, strict=False):
            # the constant bound on the id is implied; stated, it gives prover/solver/intblast.py an interval
            facts += [size >= 1, size <= limit, z3.SignExt(32, pid) >= 0, z3.SignExt(32, pid) < size,
                      z3.SignExt(32, pid) <= limit - 1]
        facts += [z3.BoolVal(c) if isinstance(c, bool) else c for c in map(self.condition, b.requires)]
        for table, names in b.pointer_tables.items():  # each entry of a table of pointers is one it names
            facts += [size <= len(names) for size in self.sizes(table)]
        return facts


def element_type(dtype: str) -> IntType:
    """The Triton type of a tensor's elements (a table of pointers' uint64 read as int64 bits)."""
    return INT64 if dtype == POINTER_DTYPE else DTYPES[dtype]


def dtype_of(binding: Binding, tensor: str) -> IntType:
    return element_type(binding.tensors[tensor].dtype)
