"""``CacheGroupsMixin``: the per-group table plumbing an attention backend mixes in, on impl/'s functional API.

It learns the groups from their specs, sheds state groups, builds each step's per-group locations
(on the raw block tables, at each group's block granularity) and kernel-unit tables, picks a layer's
table and locations (S1, S2), re-anchors draft chains (W4) and delegates CUDA-graph buffers to
``GroupGraphBuffers``. The debug checker runs on eager steps only, behind ``KVTABLE_DEBUG=1``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import ClassVar, TypeVar

import torch

from kvtable.contract import GroupSpec
from kvtable.errors import ContractViolation, StaleGraphState
from kvtable.impl import validate
from kvtable.impl.expand import expand_table
from kvtable.impl.graph import GroupGraphBuffers
from kvtable.impl.groups import select_group, select_locs, shed_state_groups, specs_by_id
from kvtable.impl.kernels import Kernels
from kvtable.impl.locs import group_locs, group_seq_locs
from kvtable.impl.torch_kernels import TORCH_KERNELS

T = TypeVar("T")
Tables = Mapping[str, torch.Tensor]


@dataclass(frozen=True)
class GroupMetadata:
    """One forward step's per-group view: kernel-unit page tables, write locations, and the lengths."""

    page_tables: dict[str, torch.Tensor] | None
    out_cache_locs: dict[str, torch.Tensor] | None
    seq_lens: torch.Tensor | None = None
    tokens_per_req: int = 1


class CacheGroupsMixin:
    """Per-group tables for an attention backend. Subclasses set the sizes and may override the class policy.

    ``expand_tables`` True means the backend's kernels see kernel pages (K tokens, consumer page size
    K, tables expanded); False means they see each group's blocks as they are (consumer page size B).
    """

    table_tail_pad: ClassVar[int] = -1
    """Pad past a table's columns in graph buffers and expanded tables; a full-width-table backend sets 0."""
    expand_tables: ClassVar[bool] = True

    kernel_page_size: int
    """K, the page size the kernels see; no default: a backend that forgets it fails at its first use by name."""
    max_num_pages: int
    """Kernel pages per request the graph buffers and expanded tables hold; no default either."""
    spec_num_tokens: int = 1
    is_draft: bool = False
    device: torch.device | str = "cpu"
    kernels: Kernels = TORCH_KERNELS
    cache_debug: bool | None = None
    """None defers to ``KVTABLE_DEBUG``; the checker never runs on graph replay."""

    cache_group_specs: Mapping[str, GroupSpec] = MappingProxyType({})
    state_group_ids: frozenset[str] = frozenset()
    forward_metadata: GroupMetadata | None = None
    graph_buffers: GroupGraphBuffers | None = None

    # Groups -------------------------------------------------------------------------------------------
    def learn_cache_groups(self, specs: Sequence[GroupSpec] | Mapping[str, GroupSpec]) -> None:
        """Record the pool's group specs: which are state groups and each group's block granularity."""
        self.cache_group_specs = specs_by_id(specs)
        self.state_group_ids = frozenset(g for g, s in self.cache_group_specs.items() if s.is_state)

    @property
    def group_block_granularities(self) -> dict[str, int]:
        """Block granularity B of every non-state group."""
        return {g: s.block_granularity for g, s in self.cache_group_specs.items() if not s.is_state}

    def group_block_granularity(self, group_id: str) -> int:
        """A group's B; the kernel page size for an empty or undeclared id."""
        return self.group_block_granularities.get(group_id, self.kernel_page_size)

    def group_page_ratio(self, group_id: str) -> int:
        """r = B // K when tables are expanded (E1), else 1."""
        if not self.expand_tables:
            return 1
        return validate.page_ratio(self.group_block_granularity(group_id), self.kernel_page_size, group=group_id)

    def consumer_page_size(self, group_id: str) -> int:
        """The page size the backend's kernels divide by: K when expanded, else B."""
        return self.group_block_granularity(group_id) // self.group_page_ratio(group_id)

    def shed_state_groups(self, tables: Tables | None) -> dict[str, torch.Tensor] | None:
        """T6 state-shed: the non-state tables, or None when none are left."""
        if tables is None:
            return None
        attention = sorted(gid for gid, spec in self.cache_group_specs.items() if not spec.is_state)
        if isinstance(tables, Mapping) and not tables and attention:
            raise ContractViolation("T1", f"no tables for the declared attention groups {attention}; pass None "
                                    "for a step without tables")
        return shed_state_groups(self.cache_group_specs, tables) or None

    # Selection ----------------------------------------------------------------------------------------
    def select_group(self, entries: Mapping[str, T], group_id: str | None) -> T:
        """S1 group-select: the layer's own group; the sole group for an empty or unknown id; else KeyError."""
        return select_group(entries, group_id)

    def select_page_table(self, group_id: str | None, fallback: torch.Tensor | None = None) -> torch.Tensor | None:
        """The layer's kernel-unit table, or ``fallback`` (the single-table path) when there are none."""
        md = self.forward_metadata
        if md is None or md.page_tables is None:
            return fallback
        return self.select_group(md.page_tables, group_id)

    def select_out_cache_loc(self, group_id: str | None, caller: T) -> T | torch.Tensor:
        """S2 loc-select: draft chains and steps without per-group locations keep the caller's locations."""
        md = self.forward_metadata
        per_group: Mapping[str, T | torch.Tensor] | None = None if md is None else md.out_cache_locs
        return select_locs(per_group, group_id, caller, prefer_caller=self.is_draft)

    # Eager metadata -----------------------------------------------------------------------------------
    def init_decode_metadata(self, tables: Tables | None, seq_lens: torch.Tensor, *, n: int = 1,
                             actual_bs: int | None = None) -> GroupMetadata:
        """W1 (n = 1) or W2 verify (n > 1) locations on the raw tables, then the kernel-unit tables."""
        live = self.shed_state_groups(tables)
        locs = None if live is None else group_seq_locs(
            self.cache_group_specs, live, seq_lens, n, mode="decode" if n == 1 else "verify",
            actual_bs=actual_bs, kernels=self.kernels, debug=self.cache_debug)
        return self._publish(live, locs, seq_lens, n)

    def init_extend_metadata(self, tables: Tables | None, prefix_lens: Sequence[int],
                             extend_lens: Sequence[int]) -> GroupMetadata:
        """W3 locations from the CPU mirrors of the lengths, then the kernel-unit tables."""
        live = self.shed_state_groups(tables)
        batch = validate.extend_batch(prefix_lens, extend_lens)
        locs = None if live is None else group_locs(self.cache_group_specs, live, batch, kernels=self.kernels,
                                                    debug=self.cache_debug)
        seq = torch.tensor(batch.seq_lens, dtype=torch.int32)
        return self._publish(live, locs, seq, 1)

    def update_draft_forward_metadata(self, frontier: torch.Tensor) -> GroupMetadata:
        """W4 reanchor-loc: a draft chain re-anchored to ``frontier`` writes frontier-N .. frontier-1.

        Recomputed over the metadata's kernel-unit tables at each group's consumer page size (the
        units those tables are in), with N = ``spec_num_tokens`` and the checks ``reanchor_locs`` makes (the
        frontier's T9 and T8 on CPU mirrors, the full table contract in debug mode); nothing is read back
        from the device outside debug mode.
        """
        md = self.forward_metadata
        if md is None:
            raise RuntimeError("update_draft_forward_metadata needs forward metadata; run an init first")
        locs = md.out_cache_locs
        if locs is not None and md.page_tables is not None:
            specs = {gid: replace(self.cache_group_specs[gid], block_granularity=self.consumer_page_size(gid))
                     for gid in md.page_tables}
            locs = group_seq_locs(specs, md.page_tables, frontier, self.spec_num_tokens, mode="reanchor",
                                  kernels=self.kernels, debug=self.cache_debug, tail_pad=self.table_tail_pad)
        self.forward_metadata = replace(md, seq_lens=frontier, out_cache_locs=locs,
                                        tokens_per_req=self.spec_num_tokens)
        return self.forward_metadata

    def kernel_page_tables(self, tables: Tables) -> Tables:
        """E2: each group's table in kernel pages, ``max_num_pages`` wide; the same dict when no group expands."""
        ratios = {gid: self.group_page_ratio(gid) for gid in tables}
        if all(r == 1 for r in ratios.values()):
            return tables
        return {gid: expand_table(t, ratios[gid], max_kernel_pages=self.max_num_pages,
                                  tail_pad=self.table_tail_pad, kernels=self.kernels) for gid, t in tables.items()}

    def _publish(self, live: dict[str, torch.Tensor] | None, locs: dict[str, torch.Tensor] | None,
                 seq_lens: torch.Tensor, n: int) -> GroupMetadata:
        page_tables = None if live is None else dict(self.kernel_page_tables(live))
        self.forward_metadata = GroupMetadata(page_tables, locs, seq_lens, n)
        return self.forward_metadata

    # CUDA graphs --------------------------------------------------------------------------------------
    def init_graph_state(self, max_bs: int) -> GroupGraphBuffers:
        """G1 graph-init: persistent buffers for every non-state group, sized for ``spec_n = max(spec_num_tokens,
        1)`` tokens per request (an engine without speculation may say 0)."""
        self.graph_buffers = GroupGraphBuffers(
            self.cache_group_specs, max_bs=max_bs, max_kernel_pages=self.max_num_pages,
            kernel_page_size=self.kernel_page_size, spec_n=max(self.spec_num_tokens, 1), tail_pad=self.table_tail_pad,
            expand=self.expand_tables, device=self.device, kernels=self.kernels)
        return self.graph_buffers

    def capture_group_views(self, bs: int, group_ids: Sequence[str], tokens_per_req: int = 1
                            ) -> tuple[dict[str, torch.Tensor] | None, dict[str, torch.Tensor] | None]:
        """G2 capture-views of the persistent buffers; (None, None) when no attention group is asked for."""
        return self._graph().capture(bs, group_ids, tokens_per_req)

    def replay_group_buffers(self, bs: int, tables: Tables | None, seq_lens: torch.Tensor,
                             tokens_per_req: int = 1, *, actual_bs: int | None = None) -> None:
        """G3-G5: stale guard, refill of rows [:bs] and locations [:bs*N], in place."""
        self._graph().replay(bs, tables, seq_lens, tokens_per_req, actual_bs=actual_bs)

    def _graph(self) -> GroupGraphBuffers:
        if self.graph_buffers is None:
            raise StaleGraphState("G5", "the backend published no cache groups: init_graph_state never ran")
        return self.graph_buffers
