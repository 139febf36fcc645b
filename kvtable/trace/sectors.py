"""``trace/shared-sector``: where the groups' pages are blocks of sectors of one shared cache, no sector holds live
pages of two groups at once.

transformers' continuous batching (``CachePool``) splits one cache tensor into sectors and gives each to one
group's allocator at a time; a group's block ``b`` lies in sector ``b // blocks_per_sector`` of that group. A
recorded page is a block id in its own group's units, so equal ids in two groups are no aliasing, but two groups'
live blocks in one sector are the same memory written by both. A step records each group's blocks per sector in
its meta (``Recorder.locations(blocks_per_sector=)``); a step without it is not judged here.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from kvtable.trace.judge import Violation
from kvtable.trace.store import Step

RULE = "trace/shared-sector"


def judge_sectors(step: Step, live: int, families: Mapping[str, str]) -> list[Violation]:
    """Each sector holding real pages (``> 0``) of two groups in the step's first ``live`` rows, once."""
    per_sector = step.meta.get("blocks_per_sector")
    if not isinstance(per_sector, dict) or not all(isinstance(n, int) and n >= 1 for n in per_sector.values()):
        return []
    owner: dict[int, tuple[str, int, int]] = {}
    reported: set[int] = set()
    out: list[Violation] = []
    for gid, group in step.groups.items():
        if group.table is None or families.get(gid) == "state" or not per_sector.get(gid):
            continue
        rows = np.asarray(group.table, np.int64)[:live]
        for row, col in zip(*np.nonzero(rows > 0), strict=True):
            page = int(rows[row, col])
            sector = page // int(per_sector[gid])
            first = owner.setdefault(sector, (gid, int(row), page))
            if first[0] != gid and sector not in reported:
                reported.add(sector)
                out.append(Violation(step.index, "safety", RULE, gid, int(row), None, None, None,
                                     f"block {page} lies in sector {sector}, which also holds block {first[2]} of "
                                     f"group {first[0]!r} (row {first[1]}): two groups' live blocks in one sector"))
    return out
