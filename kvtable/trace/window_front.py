"""Sliding-window columns a step never reads, as holes: for engines whose tables keep stale ids there.

vLLM V1's KV-cache manager replaces the blocks that left a request's window by its null block, but the worker's
block table keeps the old ids (``BlockTable.append_row`` only ever appends); those blocks go back to the pool and
may already be another request's, or this one's again. No token of the step reads them: a query at position ``q``
reads keys ``(q - window, q]``. Under a profile with ``stale_window_front`` the rules across steps see each live
row's columns wholly below the window of its first token as the hole 0, as the manager's own row has them.
"""

from __future__ import annotations

import numpy as np

from kvtable.backends.profiles import Profile
from kvtable.trace.judge import step_tokens
from kvtable.trace.store import GroupStep, Step


def unread_front(profile: Profile, step: Step, kind: str, group: GroupStep, window: int | None) -> GroupStep:
    """``group`` with the columns no token of the step can read in a sliding group set to 0 (unchanged unless the
    profile says such columns may hold stale ids)."""
    table = group.table
    if not profile.stale_window_front or window is None or table is None or step.seq_lens is None:
        return group
    tokens = step_tokens(kind, step.seq_lens, step.n, step.prefix_lens, step.actual_bs)
    first = np.full(len(table), np.iinfo(np.int64).max, np.int64)
    np.minimum.at(first, tokens.rows[tokens.rows < len(table)], tokens.pos[tokens.rows < len(table)])
    first[first == np.iinfo(np.int64).max] = 0
    unread = np.maximum(first - window + 1, 0) // group.page_size
    masked = np.where(np.arange(table.shape[1])[None, :] < unread[:, None], 0, table)
    return GroupStep(group.page_size, masked, group.locs, group.buf, group.pages)
