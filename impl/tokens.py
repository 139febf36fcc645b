"""Which (row, position) pairs a batch writes, as int64 tensors built without a per-request loop; and
``upload``, the host-to-device copy every impl/ module uses so a step never stalls on the stream."""

from __future__ import annotations

import struct
from collections.abc import Sequence

import numpy as np
import torch

from kvtable.contract import Batch

_PACKED: dict[torch.dtype, tuple[str, type[np.integer]]] = {torch.int32: ("i", np.int32), torch.int64: ("q", np.int64)}
"""``struct`` codes and numpy dtypes of the integer dtypes ``_mirror`` packs host ints into."""


def upload(values: Sequence[int] | torch.Tensor, device: torch.device | str,
           dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """Host ints (or a tensor) as ``dtype`` on ``device``; to a GPU through pinned memory, non-blocking.

    A plain copy from pageable memory would wait for the stream to drain (a host-device sync); the
    caching host allocator keeps the pinned block alive until the copy has run.
    """
    device = torch.device(device)
    host = values if isinstance(values, torch.Tensor) else _host_ints(values, dtype)
    if host.device == device or device.type != "cuda" or host.device.type != "cpu":
        return host.to(device=device, dtype=dtype)
    return host.to(dtype).pin_memory().to(device, non_blocking=True)


def int32_mirror(values: Sequence[int]) -> np.ndarray | None:
    """Host ints as an int32 numpy array (torch reads it in place), or None when there are none or one is no
    int32."""
    if not len(values):
        return None
    return _mirror(values, *_PACKED[torch.int32])


def int64_mirror(values: Sequence[int] | np.ndarray) -> np.ndarray | None:
    """Host ints (or an int64 array, as it is) as an int64 numpy array, or None when one is no int64."""
    if isinstance(values, np.ndarray) and values.dtype == np.int64 and values.ndim == 1:
        return values
    return _mirror(values, *_PACKED[torch.int64])


def _mirror(values: Sequence[int] | np.ndarray, code: str, dtype: type[np.integer]) -> np.ndarray | None:
    """``struct`` packs each value through ``__index__`` and range-checks it (nothing wraps, no float passes),
    several times faster than ``array.array`` on a tuple of python ints."""
    host = bytearray(len(values) * np.dtype(dtype).itemsize)  # writable: torch may read it in place
    try:
        struct.pack_into(f"={len(values)}{code}", host, 0, *values)
    except struct.error:
        return None
    return np.frombuffer(host, dtype=dtype)


def host_ints(values: Sequence[int] | np.ndarray) -> list[int]:
    """Host ints as a list of python ints (a numpy array's own ``tolist``)."""
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _host_ints(values: Sequence[int], dtype: torch.dtype = torch.int32) -> torch.Tensor:
    """Python ints as a CPU tensor of ``dtype``, packed by ``_mirror`` when every value fits (several times
    faster than ``torch.tensor`` of a list); anything else takes ``torch.tensor``'s own way."""
    items = values if isinstance(values, (list, tuple)) else list(values)
    host = _mirror(items, *_PACKED[dtype]) if dtype in _PACKED and items else None
    return torch.tensor(list(items), dtype=dtype) if host is None else torch.from_numpy(host)


def extend_runs(prefix_lens: Sequence[int], extend_lens: Sequence[int], device: torch.device | str
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """W3 per request, as int64 ``[bs]`` tensors: its token count, the flat index of its first token, and
    how far its positions lead the flat token index (its first token sits at position ``prefix_i``)."""
    lengths = upload([*extend_lens, *prefix_lens], device, torch.int64)
    extend, prefix = lengths[: len(extend_lens)], lengths[len(extend_lens):]
    starts = torch.cumsum(extend, 0) - extend
    return extend, starts, prefix - starts


def extend_tokens(prefix_lens: Sequence[int], extend_lens: Sequence[int], device: torch.device | str
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """W3: request i writes positions ``[prefix_i, prefix_i + extend_i)``, flattened in request order."""
    total = sum(extend_lens)
    extend, starts, lead = extend_runs(prefix_lens, extend_lens, device)
    rows = token_requests(extend, starts + extend, total)
    return rows, torch.arange(total, device=device) + lead[rows]


def token_requests(extend: torch.Tensor, ends: torch.Tensor, total: int) -> torch.Tensor:
    """int64 ``[total]``: each flat token's request (``extend``: int64 token counts, ``ends``: their exclusive
    ends). ``repeat_interleave`` on a GPU or on one CPU thread; on several CPU threads it forks a thread
    team even for three requests (10-24 ms a call on a busy machine), so there the number of requests
    ending at or before each token is counted instead (an index_add, then a running sum)."""
    if ends.device.type != "cpu" or torch.get_num_threads() == 1:
        return torch.repeat_interleave(extend, output_size=total)
    marks = torch.zeros(total + 1, dtype=torch.int64, device=ends.device)
    marks.index_add_(0, ends, torch.ones_like(ends))
    return marks[:total].cumsum_(0)


def fixed_tokens(seq_lens: torch.Tensor, rows: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """W1/W2/W4: request b writes ``max(seq_b - n + t, 0)`` for t < n, token-major."""
    token = torch.arange(rows * n, device=seq_lens.device)
    row = token // n
    positions = (seq_lens[:rows].to(torch.int64)[row] - n + token % n).clamp_min(0)
    return row, positions


def batch_tokens(batch: Batch, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The live rows' writes of ``batch`` (dummy rows excluded), in output order."""
    live = batch.live_rows
    if batch.mode == "extend":
        assert batch.prefix_lens is not None
        prefix = batch.prefix_lens[:live]
        extend = [seq - p for seq, p in zip(batch.seq_lens[:live], prefix, strict=True)]
        return extend_tokens(prefix, extend, device)
    return fixed_tokens(upload(batch.seq_lens, device, torch.int64), live, batch.tokens_per_row)
