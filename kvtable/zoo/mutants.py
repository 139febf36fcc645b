"""Source-level mutation check of impl/: realistic one-line slips, each applied to the real source text.

Each mutant is a list of ``(old, new)`` edits to one module of ``kvtable.impl``; every ``old`` snippet
must occur exactly once in the current source, so the list cannot silently rot when impl/ changes
(``SnippetMismatch``). ``mutated_backend`` imports a fresh copy of impl/ and of the torch backend with
the mutated module in place (the rest of the process keeps the original modules), and the
conformance suite then has to kill the mutant with the clause it names.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any


class SnippetMismatch(AssertionError):
    """A mutant's ``old`` snippet is not in the module's source exactly once (impl/ changed under it)."""


@dataclass(frozen=True)
class SourceMutant:
    """One slip in one impl/ module, and the clause that must kill it."""

    name: str
    module: str
    """Module under ``kvtable.impl`` (``"tokens"`` is ``kvtable.impl.tokens``)."""
    edits: tuple[tuple[str, str], ...]
    clause: str
    what: str
    equivalent: str = ""
    """Why no test can kill it (it computes the same int32 values on every input), when that is so."""
    gap: str = ""
    """The property the suite lacks to kill it, while it survives (a gap in the suite, not a pass)."""
    examples: int = 10
    """Examples per property the suite gets to kill it."""
    killer: str = ""
    """The conformance property that must kill it on its own (the validator's mutants name one)."""

    @property
    def qualified(self) -> str:
        return f"kvtable.impl.{self.module}"


MUTANTS: tuple[SourceMutant, ...] = (
    SourceMutant("pos-off-by-one", "torch_kernels",
                 (("positions = torch.add(seq.view(bs, 1), _steps(",
                   "positions = torch.add(seq.view(bs, 1) + 1, _steps("),),
                 "W1", "decode/verify positions start one past seq_len - N"),
    SourceMutant("missing-clamp", "torch_kernels",
                 (("return positions.clamp_min_(0) if clamp else positions", "return positions"),),
                 "W2", "verify positions not clamped at 0 (padded rows reach position -1)"),
    SourceMutant("request-major", "torch_kernels",
                 (("return out[:groups, : bs * n].view(groups, bs, n)",
                   "return out[:groups, : bs * n].view(groups, n, bs).transpose(1, 2)"),),
                 "W2", "verify tokens laid out request-major ([t][b]) instead of token-major ([b][t])"),
    SourceMutant("extend-block-column-unscaled", "extend_blocks",
                 (("col = _floor_div(unit_col, np.asarray([size // unit for size in page_sizes])[:, None])",
                   "col = unit_col"),),
                 "W3", "an extend block's column is its index in the smallest page size: a group with larger pages "
                       "reads a later column for the request's later tokens"),
    SourceMutant("holes-expanded", "torch_kernels",
                 (("    real = src.clamp(0, 1)\n", "    src, real = src.clamp_min(0), torch.ones_like(src)\n"),),
                 "E2", "holes and pads expanded to sub-pages 0..r-1 of block 0 (upstream's convention)"),
    SourceMutant("ring-index-off-by-one", "ring",
                 (("    index = pos % window\n", "    index = (pos + 1) % window\n"),),
                 "R1", "a ring's index is (p + 1) % window: each write takes the slot of the next position, a token "
                       "still in the window", killer="ring/slots-safe"),
    SourceMutant("wrong-tail-pad", "torch_kernels",
                 (("live[:, filled:].fill_(tail_pad)", "live[:, filled:].fill_(-1)"),),
                 "G3", "tail pad hard-coded to -1, ignoring a backend's 0 pad"),
    SourceMutant("dummy-rows-not-zeroed", "torch_kernels",
                 (("dst[rows:bs].zero_()", "dst[rows:rows].zero_()"),),
                 "G3", "replay fill writes only the live rows; padded rows keep what they held"),
    SourceMutant("int32-product", "torch_kernels",
                 (("return torch.addcmul(positions, page.sub_(col), ps)",
                   "return torch.addcmul(positions.int(), page.sub_(col).int(), ps.int())"),),
                 "W5", "page * ps computed in int32",
                 equivalent="stored as int32, a wrapped int32 product plus the offset equals the int64 one "
                            "truncated (mod 2^32), so no input tells them apart; W5's precondition "
                            "(p+1)*ps <= 2^31 is what makes both exact"),
    SourceMutant("width-mask-dropped", "torch_kernels",
                 (("page.clamp_min_(0).masked_fill_(col >= width, 0)", "page.clamp_min_(0)"),),
                 "G4", "the kernel's col < width mask is gone (a stale seq_len reads past the row)"),
    SourceMutant("grouped-col-clamped-not-masked", "torch_kernels",
                 (("        page.masked_fill_(col > plan.last, 0)\n", "        pass\n"),),
                 "G4", "the grouped location path clamps a column past the width into the row instead of sinking it "
                       "(a stale seq_len writes into the row's last page)"),
    SourceMutant("page-clamp-dropped", "torch_kernels",
                 (("page.clamp_min_(0).masked_fill_", "page.masked_fill_"),),
                 "G4", "a pad read (-1) is not sent to the null page: the location goes negative"),
    SourceMutant("grouped-pad-not-sunk", "read_plan",
                 (("return torch.minimum(page, bound, out=page).clamp_min_(0)",
                   "return torch.minimum(page, bound, out=page)"),),
                 "G4", "the grouped location path does not send a pad read (-1) to the null page (power-of-two page "
                       "sizes): its location goes negative"),
    SourceMutant("stale-block-size", "graph",
                 (("self.page_sizes[gid] = block // self.ratios[gid]", "self.page_sizes[gid] = block"),),
                 "G4", "replay divides expanded tables by the block granularity B, not the kernel page size"),
    SourceMutant("width-floor", "graph",
                 (("-(-max_kernel_pages * kernel_page_size // block)",
                   "max_kernel_pages * kernel_page_size // block"),),
                 "G1", "buffer width rounds down instead of up"),
    SourceMutant("stale-guard-dropped", "graph",
                 (("if not captured or delivered != captured:", "if not captured or not delivered <= captured:"),),
                 "G5", "replay no longer refuses a delivery missing a captured group"),
    SourceMutant("padded-locs-not-recomputed", "graph",
                 (("seq, self.loc_stack, bs,", "seq, self.loc_stack, cap,"),),
                 "G4", "replay recomputes locations for the live rows only"),
    SourceMutant("loc-view-per-request", "graph",
                 (("self.loc_buffers[gid][: bs * tokens_per_req]", "self.loc_buffers[gid][:bs]"),),
                 "G2", "capture's location view has bs entries, not bs*N"),
    SourceMutant("state-not-shed", "locs",
                 (("live = shed_state_groups(by_id, tables)", "live = dict(tables)"),),
                 "T6", "state-group tables reach location maths"),
    SourceMutant("one-page-size", "locs",
                 (("sizes = validate.check_group_page_sizes(by_id, live)\n    if not debug:",
                   "sizes = validate.check_group_page_sizes(by_id, live)\n"
                   "    sizes = {gid: min(sizes.values()) for gid in sizes}\n    if not debug:"),),
                 "W1", "every group divides by the smallest block size (per-group page sizes lost)"),
    SourceMutant("width-check-dropped", "validate",
                 (("        if longest <= width * ps:\n            continue\n", "        continue\n"),),
                 "T8", "the host-side width check (CPU lengths) never fires", killer="rejects-cheap/T8"),
    # impl's own validator: each clause's check dropped in turn, killed by that clause's own property ----------
    SourceMutant("validator-drops-T1", "validate_tables", (("    _t1_entries,\n", ""),),
                 "T1", "debug mode no longer looks for entries below -1", examples=200, killer="rejects/T1"),
    SourceMutant("validator-drops-T2", "validate_tables", (("    _t2_dummy_rows,\n", ""),),
                 "T2", "debug mode no longer checks padded rows (page 0, seq_len 1)", killer="rejects/T2"),
    SourceMutant("validator-drops-T3", "validate_tables", (("    _t3_tail_pad,\n", ""),),
                 "T3", "debug mode no longer reads a row's layout (any pad, any page after it)", examples=30,
                 killer="rejects/T3"),
    SourceMutant("validator-drops-T4", "validate_tables", (("    _t4_live_pages,\n", ""),),
                 "T4", "debug mode no longer demands real pages in the columns a step needs", examples=30,
                 killer="rejects/T4"),
    SourceMutant("validator-drops-T5", "validate_tables", (("    _t5_front_holes,\n", ""),),
                 "T5", "debug mode lets a sliding row's hole cover a needed column or follow a real page", examples=30,
                 killer="rejects/T5"),
    SourceMutant("validator-drops-T7-twice", "validate_tables", (("    _t7_twice_in_row,\n", ""),),
                 "T7", "debug mode lets a page appear twice in one row", examples=100, killer="rejects/T7"),
    SourceMutant("validator-drops-T7-shared", "validate_tables", (("    _t7_shared_write,\n", ""),),
                 "T7", "debug mode lets two live rows share a page one of them writes", examples=30,
                 killer="rejects/T7"),
    SourceMutant("validator-drops-T8", "validate_tables", (("    _t8_width,\n", ""),),
                 "T8", "debug mode no longer checks that a row's last column exists", killer="rejects/T8"),
    # No validator-drops-T9/W2: CPU lengths are checked on the host first in debug mode too (the reference's
    # order, T9/W2 before T1; host-drops-T9/W2 below); validate_tables' length checks serve CUDA lengths only
    # (group_seq_locs), which no CPU run reaches.
    SourceMutant("validator-drops-W5", "validate_tables", (("    _w5_int32,\n", ""),),
                 "W5", "debug mode lets page ids whose slots pass 2^31 - 1 through", killer="rejects/W5"),
    SourceMutant("host-drops-T1", "validate",
                 (("    if table.dtype != torch.int32:\n", "    if False:\n"),),
                 "T1", "the host accepts tables of any dtype", examples=30, killer="rejects-cheap/T1"),
    SourceMutant("host-drops-T9", "validate", (("    t9 = _first_below(seq, 1)\n", "    t9 = None\n"),),
                 "T9", "the host lets a decode / verify / re-anchor row have seq_len < 1", examples=30,
                 killer="rejects-cheap/T9"),
    SourceMutant("host-drops-W2", "validate",
                 (('w2 = _first_below(seq[: batch.live_rows], batch.n) if batch.mode == "verify" else None',
                   "w2 = None"),),
                 "W2", "the host lets a real verify row be shorter than N", killer="rejects-cheap/W2"),
    SourceMutant("host-drops-E1", "validate",
                 (("or block_granularity < 1 or block_granularity % kernel_page_size:", "or block_granularity < 1:"),),
                 "E1", "a block granularity that is no multiple of the kernel page size is accepted",
                 killer="page-ratio"),
    # the entry a stale graph replay's refusal names (cosmic-ray survivors until graph/stale-seq-lens checked it)
    SourceMutant("stale-col-unscaled", "graph",
                 (("col = max(lengths[row] - n, 0, boundary * ps) // ps",
                   "col = max(lengths[row] - n, 0, boundary * ps) - ps"),),
                 "G4", "a stale replay's refusal names a position less a page, not a column", examples=100,
                 killer="graph/stale-seq-lens"),
    SourceMutant("stale-clause-swapped", "graph",
                 (("            if col >= width:\n", "            if not col >= width:\n"),),
                 "G4", "a stale replay past the buffer is refused as T4 and one on a tail pad as T8", examples=100,
                 killer="graph/stale-seq-lens"),
    # S1/S2 selection (impl/groups.py, used by CacheGroupsMixin), killed through the backend's cache_groups adapter
    SourceMutant("select-no-sole-fallback", "groups", (("    if len(entries) != 1:\n", "    if True:\n"),),
                 "S1", "an empty or unknown layer group id raises even when one group is present", examples=30,
                 killer="groups/select"),
    SourceMutant("select-first-group", "groups",
                 (("        return entries[group_id]\n", "        return next(iter(entries.values()))\n"),),
                 "S1", "a layer gets the first group's entry, not its own", examples=30, killer="groups/select"),
    SourceMutant("select-locs-ignores-draft", "groups",
                 (("    if per_group is None or prefer_caller:\n", "    if per_group is None:\n"),),
                 "S2", "a draft chain gets the per-group locations, not the caller's", examples=30,
                 killer="groups/select-locs"),
    SourceMutant("checker-anywhere", "checker",
                 (("foreign = page != own",
                   "foreign = ~torch.isin(page, table[:live_rows].to(torch.int64))"),),
                 "D1", "checker asks only that the page is somewhere in the table (upstream's check)"),
    SourceMutant("checker-page0", "checker",
                 (("null = (loc < 0) | (page == NULL_PAGE)", "null = loc < 0"),),
                 "D1", "checker accepts a real token writing page 0 (caught only by a write through a hole)"),
    SourceMutant("checker-no-d2", "checker",
                 ((" | (first_writer != torch.arange(tokens, device=loc.device))", ""),),
                 "D2", "checker does not look for two tokens sharing a slot"),
)

BY_NAME = {m.name: m for m in MUTANTS}


def original_source(module: str) -> tuple[str, str]:
    """(path, text) of ``kvtable.impl.<module>`` as it is on disk."""
    spec = importlib.util.find_spec(f"kvtable.impl.{module}")
    if spec is None or spec.origin is None:
        raise SnippetMismatch(f"kvtable.impl.{module} not found")
    return spec.origin, Path(spec.origin).read_text()


def mutated_source(mutant: SourceMutant) -> str:
    """The module's source with every edit applied; each ``old`` must occur exactly once."""
    _, text = original_source(mutant.module)
    for old, new in mutant.edits:
        count = text.count(old)
        if count != 1:
            raise SnippetMismatch(f"mutant {mutant.name!r}: snippet {old!r} occurs {count} times in "
                                  f"{mutant.qualified}, expected once (impl/ changed: update the mutant)")
        text = text.replace(old, new)
    return text


_FRESH = ("kvtable.impl", "kvtable.backends.torch_backend", "kvtable.backends.triton_backend")


def _fresh(name: str) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in _FRESH)


class _SourceLoader(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from a given source text; every other import goes the usual way."""

    def __init__(self, name: str, origin: str, source: str) -> None:
        self.name, self.origin, self.source = name, origin, source

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.origin)

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__file__ = self.origin
        exec(compile(self.source, f"{self.origin} [mutant]", "exec"), module.__dict__)


@contextmanager
def mutated_backend(mutant: SourceMutant) -> Iterator[type]:
    """``TorchBackend`` from a fresh import of impl/ with the mutant applied; the originals are restored after."""
    origin, _ = original_source(mutant.module)
    loader = _SourceLoader(mutant.qualified, origin, mutated_source(mutant))
    saved = {name: module for name, module in sys.modules.items() if _fresh(name)}
    for name in saved:
        del sys.modules[name]
    sys.meta_path.insert(0, loader)
    try:
        base = importlib.import_module("kvtable.backends.torch_backend").TorchBackend
        # named after the mutant, so a counterexample never reads as the conforming "torch" backend
        yield type(f"mutant[{mutant.name}]", (base,), {"name": f"mutant:{mutant.name}", "__module__": __name__})
    finally:
        sys.meta_path.remove(loader)
        _restore(saved)


def _restore(saved: dict[str, ModuleType]) -> None:
    """Put the original modules back, in ``sys.modules`` and as attributes of their parent packages."""
    for name in [name for name in sys.modules if _fresh(name)]:
        module = sys.modules.pop(name)
        parent, _, child = name.rpartition(".")
        if name not in saved and getattr(sys.modules.get(parent), child, None) is module:
            delattr(sys.modules[parent], child)
    sys.modules.update(saved)
    for name, module in saved.items():
        parent, _, child = name.rpartition(".")
        if parent in sys.modules:
            setattr(sys.modules[parent], child, module)
