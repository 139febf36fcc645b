"""The clauses a kernel's stores are checked against, over the integers, reading the kernel's own inputs.

For an output element a contract gives: whether the element is one the clause writes (``in_range``),
the clause's preconditions there, the value the clause gives it (W0's slot for W1-W4 and G4, E2's
expansion inside G3's fill), and for the safety tier the set of values a write may take on any input
(the token's own slot, a slot of page 0, or the pad). Inputs are read through ``Launch.element``, the
same function the kernel's loads read, so a kernel that reads the right element agrees by congruence.

Roles (``Binding.roles``) say which tensor argument or parameter plays which part; tables are
``[G, R, W]`` stacks (per-group ``widths`` and ``page_sizes`` tensors) or one ``[R, W]`` table (the
page size an expression, the width the table's).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import z3

from kvtable.prover.bindings.binding import Launch, dtype_of
from kvtable.prover.symexec.values import KernelNotSupported

TWO_31 = 2**31
LOCATION_CLAUSES = ("W1", "W2", "W3", "W4", "G4")
FILL_CLAUSES = ("G3", "E2")
ALLOC_CLAUSES = ("A1", "A3")
"""SPEC 6a's allocator clauses a kernel may be bound to (prover/bindings/alloc_contracts.py)."""


def signed(x: z3.BitVecRef) -> z3.ArithRef:
    return z3.BV2Int(x, is_signed=True)


@dataclass(frozen=True)
class Element:
    """What the clause says about one output element: is it written, under which facts, with what value."""

    in_range: z3.BoolRef
    preconditions: tuple[z3.BoolRef, ...]
    """The clause's facts about this element's inputs, assumed where the store's mask holds."""
    expected: z3.ArithRef
    allowed: z3.BoolRef | None = None
    """The safety tier's allowed values (None where the clause has no safety reading)."""
    show: tuple[tuple[str, z3.ExprRef], ...] = ()
    layout: tuple[z3.BoolRef, ...] = ()
    """Facts about the launch's layout (page sizes, widths, packing), assumed for every lane."""


class Roles:
    """Reads the clause's inputs through a ``Launch``: tensors by role, parameters as expressions."""

    def __init__(self, launch: Launch) -> None:
        self.launch = launch
        self.roles = launch.binding.roles

    def has(self, role: str) -> bool:
        return role in self.roles

    def tensor(self, role: str) -> str:
        name = self.roles.get(role)
        if name is None or name not in self.launch.binding.tensors:
            raise KernelNotSupported(f"the binding's role {role!r} must name a tensor argument, got {name!r}")
        return name

    def is_tensor(self, role: str) -> bool:
        return self.roles.get(role) in self.launch.binding.tensors

    def value(self, role: str, *index: z3.ArithRef) -> z3.ArithRef:
        """A role's value: the tensor element at ``index``, or the parameter expression."""
        if role not in self.roles:
            raise KernelNotSupported(f"the binding has no role {role!r}")
        if self.is_tensor(role):
            return signed(self.launch.element(self.tensor(role), tuple(index)))
        return signed(self.launch.expr(self.roles[role]))

    def size(self, role: str, dim: int) -> z3.ArithRef:
        return signed(self.launch.sizes(self.tensor(role))[dim])


class LocationContract:
    """W1-W4 and G4: ``out[g, i]`` is W0's slot of the token the clause puts at output position ``i``."""

    def __init__(self, clause: str, roles: Roles) -> None:
        self.clause, self.r = clause, roles
        table = roles.tensor("table")
        # a table of pointers: the per-group tables it points to (vLLM V2); None for a table or a stack
        self.named = roles.launch.binding.pointer_tables.get(table)
        if self.named is not None and len({roles.launch.binding.tensors[t].sizes[0] for t in self.named}) != 1:
            raise KernelNotSupported(f"the tables {self.named} behind {table} must have the same rows")
        self.grouped = self.named is not None or len(roles.launch.binding.tensors[table].sizes) == 3
        out = roles.roles.get("out")
        bits = dtype_of(roles.launch.binding, out).bits if out is not None and out in roles.launch.binding.tensors \
            else 32
        # W5 at the output's width: every slot of a real page fits it (2^31 for kvtable's int32 locations,
        # 2^63 for vLLM's int64 slots, where an int32 product wraps long before)
        self.pool = 2 ** (bits - 1)

    def _split(self, index: tuple[z3.ArithRef, ...]) -> tuple[tuple[z3.ArithRef, ...], z3.ArithRef]:
        """(the group index, if the table is a stack; the output position)."""
        return index[:-1] if self.grouped else (), index[-1]

    def _per_group(self, role: str, group: tuple[z3.ArithRef, ...]) -> z3.ArithRef:
        return self.r.value(role, *group) if self.r.is_tensor(role) else self.r.value(role)

    def _by_group(self, group: tuple[z3.ArithRef, ...], of: Callable[[str], z3.ArithRef]) -> z3.ArithRef:
        """``of(tensor)`` of the group's own table behind a table of pointers (the last one past them)."""
        assert self.named is not None
        value = of(self.named[-1])
        for k in reversed(range(len(self.named) - 1)):
            value = z3.If(group[0] == k, of(self.named[k]), value)
        return value

    def table_size(self, dim: int, group: tuple[z3.ArithRef, ...]) -> z3.ArithRef:
        """Size ``dim`` of the group's table (rows -2, width -1)."""
        if self.named is None:
            return self.r.size("table", dim)
        return self._by_group(group, lambda t: signed(self.r.launch.sizes(t)[dim]))

    def entry(self, group: tuple[z3.ArithRef, ...], row: z3.ArithRef, col: z3.ArithRef) -> z3.ArithRef:
        """The group's table entry at ``(row, col)``, read through ``Launch.element`` as the kernel's loads are."""
        if self.named is None:
            return self.r.value("table", *group, row, col)
        return self._by_group(group, lambda t: signed(self.r.launch.element(t, (row, col))))

    def table_index(self, tensor: str, index: tuple[z3.ArithRef, ...]) -> tuple[z3.ArithRef, ...] | None:
        """``(group..., row, col)`` of a load from a table the clause reads, None for any other tensor."""
        if self.named is not None:
            return (z3.IntVal(self.named.index(tensor)), *index) if tensor in self.named else None
        return index if tensor == self.r.roles.get("table") else None

    def geometry(self, group: tuple[z3.ArithRef, ...]) -> tuple[z3.ArithRef, z3.ArithRef, list[z3.BoolRef]]:
        """The group's page size and width, and E1/T1 (ps >= 1, 1 <= width <= the table's width)."""
        table_w = self.table_size(-1, group)
        ps = self._per_group("page_sizes", group)
        width = self._per_group("widths", group) if self.r.has("widths") else table_w
        facts = [ps >= 1, width >= 1, width <= table_w]
        if group:
            groups = len(self.named) if self.named is not None else self.r.size("table", 0)
            facts.append(z3.And(group[0] >= 0, group[0] < groups))
        return ps, width, facts

    def token(self, i: z3.ArithRef, group: tuple[z3.ArithRef, ...] = ()
              ) -> tuple[z3.ArithRef, z3.ArithRef, z3.BoolRef, list[z3.BoolRef]]:
        """(row, position, in range, the clause's facts on the lengths) of output position ``i``."""
        if self.clause == "W3":
            live = signed(self.r.launch.expr(self.r.roles["tokens"]))
            padded = signed(self.r.launch.expr(self.r.roles.get("padded", self.r.roles["tokens"])))
            in_range, facts = z3.And(i >= 0, i < padded), []
            if self.r.roles.get("rows") == "program":  # one program per request, its tokens [qsl[r], qsl[r+1])
                request = request_program(self.r.launch)
                row = self.r.value("row_of_program", request) if self.r.has("row_of_program") else request
                start, end = (self.r.value("query_start_loc", request + k) for k in (0, 1))
                in_range = z3.And(in_range, start <= i, i < end)
                facts.append(z3.And(0 <= start, start <= end, end <= live))  # sorted, inside the live tokens
            else:
                row = self.r.value("rows", i)
            pos = self.r.value("positions", i)
            facts.append(z3.Implies(i < live, z3.And(row >= 0, row < self.table_size(-2, group), pos >= 0)))
            return row, pos, in_range, facts
        n, bs = self.r.value("n"), self.r.value("bs")
        row, t = i / n, i % n
        seq = self.r.value("lengths", row)
        position = z3.If(seq - n + t > 0, seq - n + t, 0)
        facts = [n >= 1, z3.Implies(z3.And(i >= 0, i < bs * n), seq >= 1)]
        if self.clause == "W1":
            facts.append(n == 1)
        if self.clause == "W2":  # a real row holds N tokens; a padded row replays at seq_len 1
            facts.append(z3.Implies(z3.And(i >= 0, i < bs * n), z3.Or(seq >= n, seq == 1)))
        return row, position, z3.And(i >= 0, i < bs * n), facts

    def pad(self) -> z3.ArithRef | None:
        return signed(self.r.launch.expr(self.r.roles["pad"])) if self.r.has("pad") else None

    def element(self, index: tuple[z3.ArithRef, ...], stored: z3.ArithRef, *, safety: bool = False) -> Element:
        """The clause's element; from a program the binding's ``pad_programs`` names, the pad into
        ``[tokens, padded)`` (vLLM's extra program) and nothing else."""
        own = self._element(index, stored, safety=safety)
        text = self.r.launch.binding.pad_programs
        if not text:
            return own
        padding, pad = self.r.launch.condition(text), self.pad()
        if pad is None or not (self.r.has("padded") and self.r.has("tokens")):
            raise KernelNotSupported("pad_programs needs the roles pad, tokens and padded (the range they fill)")
        _, i = self._split(index)
        live, padded = (signed(self.r.launch.expr(self.r.roles[role])) for role in ("tokens", "padded"))
        return Element(z3.If(padding, z3.And(i >= live, i < padded), own.in_range),
                       tuple(z3.Implies(z3.Not(padding), p) for p in own.preconditions),
                       z3.If(padding, pad, own.expected),
                       None if own.allowed is None else z3.If(padding, stored == pad, own.allowed),
                       own.show, own.layout)

    def _element(self, index: tuple[z3.ArithRef, ...], stored: z3.ArithRef, *, safety: bool) -> Element:
        group, i = self._split(index)
        ps, width, facts = self.geometry(group)
        row, pos, in_range, length_facts = self.token(i, group)
        col, offset = pos / ps, pos % ps
        entry = self.entry(group, row, col)
        slot = entry * ps + offset
        live = in_range
        if self.clause == "W3":
            live = z3.And(in_range, i < signed(self.r.launch.expr(self.r.roles["tokens"])))
        pad = self.pad()
        expected = slot if pad is None else z3.If(live, slot, pad)
        past_width = self.r.roles.get("beyond_width") == "pad"
        if past_width:  # vLLM's guard (#53982): a column past the table's width writes the pad
            expected = z3.If(z3.And(live, col >= width), pad, expected)
        show = (("row", row), ("position", pos), ("column", col), ("page", entry), ("slot", slot))
        own = z3.And(entry > 0, row >= 0, col >= 0, col < width, pos >= 0, stored == slot)
        sink = z3.And(stored >= 0, stored < ps)
        allowed = z3.Or(own, sink, *([stored == pad] if pad is not None else []))
        if safety:
            return Element(in_range, (), expected, allowed, show, tuple(facts))
        fits = z3.BoolVal(True) if past_width else pos < width * ps
        t8 = z3.Implies(z3.And(live, z3.Or(col < width, not past_width)),
                        z3.And(fits, entry >= 0, (entry + 1) * ps <= self.pool))
        return Element(in_range, (*length_facts, t8), expected, allowed, show, tuple(facts))

    def entry_facts(self, table_index: tuple[z3.ArithRef, ...], value: z3.ArithRef) -> list[z3.BoolRef]:
        """Any table entry the kernel reads is a page id or the pad -1 (T1), within W5 for its group."""
        ps, _, _ = self.geometry(table_index[:1] if self.grouped else ())
        return [value >= -1, (value + 1) * ps <= self.pool]


class NoTableFacts:
    """A contract that states no facts about the table entries its kernel loads and indexes no table element."""

    def entry_facts(self, table_index: tuple[z3.ArithRef, ...], value: z3.ArithRef) -> list[z3.BoolRef]:
        del table_index, value
        return []

    def table_index(self, tensor: str, index: tuple[z3.ArithRef, ...]) -> tuple[z3.ArithRef, ...] | None:
        del tensor, index
        return None


class FillContract(NoTableFacts):
    """G3 (and E2 within it): ``dst[g, b, w]`` of a replay fill from the packed live tables."""

    def __init__(self, clause: str, roles: Roles) -> None:
        self.clause, self.r = clause, roles

    def element(self, index: tuple[z3.ArithRef, ...], stored: z3.ArithRef, *, safety: bool = False) -> Element:
        del stored, safety
        g, b, col = index
        meta = [self.r.value("meta", g, z3.IntVal(k)) for k in range(3)]
        offset, cols, ratio = meta
        bs, live_rows = self.r.value("bs"), self.r.value("actual_bs")
        numel, width = self.r.value("packed_numel"), self.r.value("dst_w")
        src_col = col / ratio
        v = self.r.value("packed", offset + b * cols + src_col)
        live, in_src = b < live_rows, src_col < cols
        expanded = z3.If(v > 0, v * ratio + col % ratio, v)
        expected = z3.If(live, z3.If(in_src, expanded, self.r.value("tail_pad")), 0)
        in_range = z3.And(g >= 0, g < self.r.size("meta", 0), b >= 0, b < bs, col >= 0, col < width)
        layout = (ratio >= 1, cols >= 0, offset >= 0, offset + live_rows * cols <= numel, live_rows <= bs)
        facts = [z3.Implies(z3.And(in_range, live, in_src), (v + 1) * ratio <= TWO_31)]
        if self.clause == "E2":  # the expansion itself: live rows, columns inside the source
            facts += [live, in_src]
        show = (("source column", src_col), ("source value", v), ("live row", live))
        return Element(in_range, tuple(facts), expected, None, show, layout)


def request_program(launch: Launch) -> z3.ArithRef:
    """The program id that is the request, for one program per request (role ``program_axis``, default 0)."""
    return signed(launch.pids[int(launch.binding.roles.get("program_axis", "0"))])
