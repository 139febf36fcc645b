"""Backends that misbehave the way real engines' do, for the run-machinery tests (crash, hang, interrupt, bug)."""

from __future__ import annotations

import os
import signal
import time

import torch

from kvtable.backends.torch_backend import TorchBackend


class DecodeOnePageOn(TorchBackend):
    """W1: every decode location lands one page further on."""

    def decode_locs(self, table, seq_lens, page_size):
        return super().decode_locs(table, seq_lens, page_size) + page_size


class ExtendOnePageOn(TorchBackend):
    """W3: every extend location lands one page further on."""

    def extend_locs(self, table, prefix_lens, extend_lens, page_size):
        return super().extend_locs(table, prefix_lens, extend_lens, page_size) + page_size


class DecodeAndExtendOnePageOn(DecodeOnePageOn, ExtendOnePageOn):
    """W1 and W3: both bugs at once (two properties for two campaign workers to find)."""


def _unreadable(table: object) -> bool:
    """A table a kernel cannot index: not an int32 tensor of two dimensions with a column."""
    return not (isinstance(table, torch.Tensor) and table.dtype == torch.int32 and table.dim() == 2
                and table.shape[-1] > 0)


class AbortOnMalformedTable(TorchBackend):
    """The kernels die (SIGABRT, as a segfaulting kernel would) on a table they cannot index (wrong dtype, 1-D, no
    columns) before any check: three of rejects/T1's seven near-valid variants, so its 30 examples meet one at
    any seed (a zero-width decode table alone was met at some seeds only)."""

    def decode_locs(self, table, seq_lens, page_size):
        if _unreadable(table):
            os.abort()
        return super().decode_locs(table, seq_lens, page_size)

    def group_locs(self, specs, tables, batch, **kwargs):
        if any(_unreadable(t) for t in tables.values()):
            os.abort()
        return super().group_locs(specs, tables, batch, **kwargs)


class HangOnBs5(TorchBackend):
    """The lone verify kernel never returns for a batch of 5 (the largest the strategies draw; bs 7 never comes);
    group_locs is not touched, so rejects/T1 (which may draw a verify batch of 5) still passes."""

    def verify_locs(self, table, seq_lens, page_size, n, *, actual_bs=None):
        if table.shape[0] == 5:
            time.sleep(3600)
        return super().verify_locs(table, seq_lens, page_size, n, actual_bs=actual_bs)


class InterruptOnExtend(TorchBackend):
    """Ctrl-C arrives while extend runs (the process sends itself SIGINT)."""

    def extend_locs(self, table, prefix_lens, extend_lens, page_size):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)
        return super().extend_locs(table, prefix_lens, extend_lens, page_size)


class RareDecodeBug(TorchBackend):
    """W1: a rare case (a batch of 5 or more whose last row is longer than 16 tokens) gets the last location off by one;
    a fresh search needs dozens of examples to find it, a replay from the database one."""

    def decode_locs(self, table, seq_lens, page_size):
        out = super().decode_locs(table, seq_lens, page_size)
        if len(seq_lens) >= 5 and int(seq_lens[-1]) > 16:
            out[-1] += 1
        return out


class DeviceAssertOnDecode(TorchBackend):
    """A CUDA device-side assert in the decode kernel (raised as torch raises it): the worker's context is gone."""

    def decode_locs(self, table, seq_lens, page_size):
        raise RuntimeError("CUDA error: device-side assert triggered\nCompile with `TORCH_USE_CUDA_DSA` to enable "
                           "device-side assertions.")


class ReanchorOneRowOn(TorchBackend):
    """W4: re-anchor reads each row one row further on in the table's storage where the storage goes on (a
    captured view of a runner's buffer); on a copy of the same view it is right, so only a snippet that
    replays the view itself reproduces it."""

    def reanchor_locs(self, table, frontier, page_size, n):
        end = table.storage_offset() + sum((size - 1) * stride for size, stride in zip(table.shape, table.stride(),
                                                                                        strict=True)) + 1
        spare = table.untyped_storage().nbytes() // table.element_size() - end  # past the view's last element
        if table.dim() == 2 and table.shape[0] and spare >= table.stride(0):
            table = torch.as_strided(table, table.shape, table.stride(), table.storage_offset() + table.stride(0))
        return super().reanchor_locs(table, frontier, page_size, n)


class EagerGatherDecode(TorchBackend):
    """An eager decode (torch ops, as an engine's Python fallback): ``table[row, pos // page_size]`` with no column
    bound, so a table narrower than its sequence is read past its width (IndexError on CPU, garbage on CUDA)."""

    def decode_locs(self, table, seq_lens, page_size):
        if not isinstance(table, torch.Tensor) or table.dim() != 2 or len(seq_lens) != table.shape[0]:
            return super().decode_locs(table, seq_lens, page_size)
        pos = seq_lens.to(torch.int64) - 1
        pages = table[torch.arange(table.shape[0]), pos.clamp(min=0) // page_size]
        return (pages.clamp(min=0).to(torch.int64) * page_size + pos % page_size).to(torch.int32)


class EagerGatherDecodeChecked(EagerGatherDecode):
    """The same eager decode, refusing a column past the table's width with its own check first (no read)."""

    def decode_locs(self, table, seq_lens, page_size):
        if isinstance(table, torch.Tensor) and table.dim() == 2 and len(seq_lens) == table.shape[0] and len(seq_lens):
            if int(((seq_lens.to(torch.int64) - 1).clamp(min=0) // page_size).max()) >= table.shape[1]:
                raise ValueError("a sequence is longer than its table row")
        return super().decode_locs(table, seq_lens, page_size)


class RowByRowDecode(TorchBackend):
    """An eager decode row by row, ``table[row]`` with a Python int (tokenspeed's extend does this): a batch with
    more rows than its table raises torch's own host-side IndexError before any element is read, on every device."""

    def decode_locs(self, table, seq_lens, page_size):
        out = [int(table[row][(int(seq) - 1) // page_size]) * page_size + (int(seq) - 1) % page_size
               for row, seq in enumerate(seq_lens.tolist())] if isinstance(table, torch.Tensor) else None
        return super().decode_locs(table, seq_lens, page_size) if out is None else torch.tensor(out, dtype=torch.int32)


class ZeroesTheTable(TorchBackend):
    """Right locations, then the caller's block table zeroed (a buffer reused as scratch)."""

    def decode_locs(self, table, seq_lens, page_size):
        out = super().decode_locs(table, seq_lens, page_size)
        table.zero_()
        return out


class BumpsSeqLens(TorchBackend):
    """Right locations, then the caller's seq_lens bumped in place (a step's advance done on the input)."""

    def decode_locs(self, table, seq_lens, page_size):
        out = super().decode_locs(table, seq_lens, page_size)
        seq_lens += 1
        return out


class WritesPageIntoTable(TorchBackend):
    """Right locations, then a page id written into the caller's table (an allocation recorded in the input)."""

    def decode_locs(self, table, seq_lens, page_size):
        out = super().decode_locs(table, seq_lens, page_size)
        if table.numel():
            table.view(-1)[-1] = 7
        return out


def segfault_on_load(debug=False):
    """A factory whose native extension crashes while it loads (SIGSEGV)."""
    import ctypes

    ctypes.string_at(0)


def abort_on_load(debug=False):
    """A factory that aborts while it loads (a failed native assert)."""
    os.abort()


def hang_on_load(debug=False):
    """A factory that never returns (waiting for a device that is not there)."""
    time.sleep(3600)


def raise_on_load(debug=False):
    """A factory that raises while it loads."""
    raise RuntimeError("no device for this backend")


class LeaksOnDecode(TorchBackend):
    """Every decode call keeps 64 MiB it never frees (a cache that only grows): 3 GiB by call 48."""

    kept: list[bytearray] = []
    mib = 64

    def decode_locs(self, table, seq_lens, page_size):
        self.kept.append(bytearray(b"\x01") * (self.mib << 20))  # written: resident, not merely reserved
        return super().decode_locs(table, seq_lens, page_size)


class LeaksALittleOnDecode(LeaksOnDecode):
    """Every decode call keeps 4 MiB: a leak a test may run in its own process (120 MiB in 30 examples)."""

    kept: list[bytearray] = []
    mib = 4
