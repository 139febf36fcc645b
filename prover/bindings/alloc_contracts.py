"""SPEC 6a's allocator clauses as kernel contracts: what an allocator-driven engine's kernels must store.

- ``A3`` (alloc-free-slot), for a paged extend allocator (SGLang's ``alloc_extend_kernel``): request ``b``'s
  extend tokens, positions ``[prefix_b, seq_b)``, get output positions ``[O_b, O_b + seq_b - prefix_b)`` where
  ``O_b`` sums the earlier requests' extend lengths; the token at position ``p`` gets the next slot of the
  request's own partial last page (``last_loc_b + 1 + p - prefix_b``) while ``p`` is inside it, else slot
  ``p % ps`` of free page ``N_b + p // ps - ceil(prefix_b / ps)`` (``N_b`` the earlier requests' new pages,
  taken from the free list in order). So every slot comes from the free list given (or the request's own
  page) and is recorded at its own token's output position; A4's "nothing before or after its output" is the
  in-bounds obligation on an output sized to the total extend.
- ``A1`` (alloc-recorded), for the kernel that records the chosen slots in the token table (SGLang's
  ``write_req_to_token_pool_triton``): row ``rows[b]`` gets the prefix (through its pointer) at ``[0, prefix_b)``
  and ``locs[E_b + c]`` at position ``prefix_b + c`` (``E_b`` the sum of the earlier ``extend_lens``), every
  recorded slot inside a pool that the table's dtype holds (W5 at its width: an int32 table, fewer than 2^31).

Roles: ``prefix_lens``, ``lengths`` (seq lens), ``bs`` (the request count, a parameter with a small bound: the
sums over earlier requests are unrolled over it), and for A3 ``last_loc``, ``free_pages``, ``page_sizes`` (an
expression), ``out``; for A1 ``rows``, ``prefixes`` (a table of pointers), ``extend_lens``, ``locs``, ``out``.
"""

from __future__ import annotations

from collections.abc import Callable

import z3

from kvtable.prover.bindings.contracts import Element, NoTableFacts, Roles, request_program
from kvtable.prover.symexec.values import DTYPES, KernelNotSupported

MAX_REQUESTS = 16
"""The largest request count an allocator binding may range over (its sums are unrolled)."""


def _ceil(a: z3.ArithRef, ps: z3.ArithRef) -> z3.ArithRef:
    """``ceil(a / ps)`` for ``a >= 0``, ``ps >= 1`` (z3's ``/`` floors for a positive divisor)."""
    return (a + ps - 1) / ps


class _Requests:
    """Sums over the requests before program ``b`` (one term per request the binding's ``bs`` allows)."""

    def __init__(self, roles: Roles) -> None:
        self.r = roles
        bs = roles.roles.get("bs", "")
        if bs not in roles.launch.binding.params:
            raise KernelNotSupported("an allocator binding's role 'bs' must name the parameter that counts requests")
        self.most = roles.launch.binding.params[bs][1]
        if self.most > MAX_REQUESTS:
            raise KernelNotSupported(f"params.{bs}: an allocator kernel is proved for at most {MAX_REQUESTS} requests"
                                     f" (its sums over earlier requests are unrolled), not {self.most}")
        self.b = request_program(roles.launch)

    def before(self, term: Callable[[z3.ArithRef], z3.ArithRef]) -> z3.ArithRef:
        """``sum(term(j) for j < b)``."""
        return z3.Sum(*[z3.If(z3.IntVal(j) < self.b, term(z3.IntVal(j)), 0) for j in range(self.most)], z3.IntVal(0))

    def value(self, role: str, j: z3.ArithRef | None = None) -> z3.ArithRef:
        return self.r.value(role, self.b if j is None else j)


class AllocExtendContract(NoTableFacts):
    """A3: ``out[i]`` of an extend allocation is the slot of the token at output position ``i``."""

    def __init__(self, roles: Roles) -> None:
        self.r, self.q = roles, _Requests(roles)

    def element(self, index: tuple[z3.ArithRef, ...], stored: z3.ArithRef, *, safety: bool = False) -> Element:
        del stored, safety
        (i,) = index
        q = self.q
        ps = self.r.value("page_sizes")
        pre, seq = q.value("prefix_lens"), q.value("lengths")
        start = q.before(lambda j: q.value("lengths", j) - q.value("prefix_lens", j))
        pages = q.before(lambda j: _ceil(q.value("lengths", j), ps) - _ceil(q.value("prefix_lens", j), ps))
        pos = pre + (i - start)
        own_page_end = _ceil(pre, ps) * ps  # a multiple of ps: past it, position pos is new page (pos - end) / ps
        fresh = pos - own_page_end
        free = self.r.value("free_pages", pages + fresh / ps)
        last = q.value("last_loc")
        expected = z3.If(pos < own_page_end, last + 1 + (pos - pre), free * ps + fresh % ps)
        in_range = z3.And(start <= i, i < start + seq - pre)
        pool = 2**63  # int64 slots: every slot of a real page fits
        preconditions = (ps >= 1, z3.Implies(pos < own_page_end, last + ps <= pool),
                         z3.Implies(pos >= own_page_end, z3.And(free >= 0, (free + 1) * ps <= pool)))
        show = (("request", q.b), ("position", pos), ("output start", start), ("new pages before", pages))
        return Element(in_range, preconditions, expected, None, show)



class RecordContract(NoTableFacts):
    """A1: ``out[rows[b], c]`` is the request's prefix entry (``c < prefix_b``) or its chosen slot there."""

    def __init__(self, roles: Roles) -> None:
        self.r, self.q = roles, _Requests(roles)
        table = roles.roles.get("prefixes")
        prefixes = None if table is None else roles.launch.binding.pointer_tables.get(table)
        if prefixes is None:
            raise KernelNotSupported("role 'prefixes' must name one of the binding's pointer_tables (the prefix"
                                     " tensors' addresses, one per request)")
        self.prefixes = prefixes

    def element(self, index: tuple[z3.ArithRef, ...], stored: z3.ArithRef, *, safety: bool = False) -> Element:
        del stored, safety
        row, col = index
        q = self.q
        pre, seq = q.value("prefix_lens"), q.value("lengths")
        first = q.before(lambda j: q.value("extend_lens", j))
        launch = self.r.launch
        prefix = z3.IntVal(0)
        for k in reversed(range(len(self.prefixes))):
            entry = z3.BV2Int(launch.element(self.prefixes[k], (col,)), is_signed=True)
            prefix = entry if k == len(self.prefixes) - 1 else z3.If(q.b == k, entry, prefix)
        expected = z3.If(col < pre, prefix, self.r.value("locs", first + col - pre))
        in_range = z3.And(row == q.value("rows"), col >= 0, col < seq)
        out = launch.binding.tensors[self.r.tensor("out")].dtype
        fits = z3.And(expected >= 0, expected < 2 ** (DTYPES[out].bits - 1))  # W5 at the table's width: a pool of
        show = (("request", q.b), ("prefix length", pre), ("first chosen slot's index", first))  # fewer slots
        return Element(in_range, (fits,), expected, None, show)



def alloc_contract(clause: str, roles: Roles) -> AllocExtendContract | RecordContract:
    return AllocExtendContract(roles) if clause == "A3" else RecordContract(roles)
