"""An engine's slot-mapping function behind kvtable's protocol: put a call into your engine in its place, then
``kvtable conform --backend examples/minimal_adapter.py:SlotMappingAdapter --profile vllm``."""

import torch


def engine_slot_mapping(block_table, req, pos, block_size):
    """Stand-in for the engine's kernel: int64 slots; -1 (skipped by writers) where a lane has no block."""
    blocks = torch.div(pos, block_size, rounding_mode="floor")
    ok = (pos >= 0) & (blocks < block_table.shape[1])
    ids = block_table[req, torch.where(ok, blocks, 0)].long()
    ok &= ids >= 0
    return torch.where(ok, ids * block_size + pos % block_size, -1)


class SlotMappingAdapter:
    name, device = "my-engine", "cpu"

    def decode_locs(self, table, seq_lens, page_size):
        return engine_slot_mapping(table, torch.arange(len(seq_lens)), seq_lens.long() - 1, page_size)

    def verify_locs(self, table, seq_lens, page_size, n, *, actual_bs=None):
        bs = len(seq_lens)
        req = torch.arange(bs).repeat_interleave(n)
        pos = (seq_lens.long().repeat_interleave(n) - n + torch.arange(n).repeat(bs)).clamp_min(0)
        slots = engine_slot_mapping(table, req, pos, page_size)
        slots[(bs if actual_bs is None else actual_bs) * n:] = -1  # padded requests' tokens: the pad slot
        return slots

    def extend_locs(self, table, prefix_lens, extend_lens, page_size):
        req = torch.arange(len(extend_lens)).repeat_interleave(torch.tensor(extend_lens, dtype=torch.long))
        pos = [torch.arange(p, p + e) for p, e in zip(prefix_lens, extend_lens, strict=True)]
        return engine_slot_mapping(table, req, torch.cat([torch.zeros(0, dtype=torch.long), *pos]), page_size)
