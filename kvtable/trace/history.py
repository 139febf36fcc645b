"""The rules across steps, from request ids and free / alloc / finish events, per group.

- ``T7`` private-write-pages, across the run: a page written by one live request is in no other live
  request's row (requests not in the step count too, from their last recorded rows).
- ``trace/pages-kept``: a request's pages do not change under it, except by appending (a column that held no
  page gets one) or, in a sliding group, by releasing a page to the hole 0 (front holes).
- ``trace/freed-page-write``: a page freed is not written until it is allocated again (an ``alloc`` event; a
  trace that records no ``alloc`` for a group reallocates a freed page when a request's row gains it).
"""

from __future__ import annotations

import numpy as np

from kvtable.trace.judge import Violation

DENSE_PAGES = 2**22
"""Page ids below this are counted in arrays; above, in a dict (a wild page id costs no memory)."""


class PageValues:
    """An integer per page id (0 by default): an array for the ids below ``DENSE_PAGES``, a dict above."""

    def __init__(self, dtype: type) -> None:
        self.dense: np.ndarray = np.zeros(1024, dtype)
        self.far: dict[int, int] = {}

    def _near(self, pages: np.ndarray) -> np.ndarray:
        near = pages < DENSE_PAGES
        if near.any():
            top = int(pages[near].max()) + 1
            if top > len(self.dense):
                grown = np.zeros(min(max(top, 2 * len(self.dense)), DENSE_PAGES), self.dense.dtype)
                grown[: len(self.dense)] = self.dense
                self.dense = grown
        return near

    def add(self, pages: np.ndarray, delta: int) -> None:
        """Add ``delta`` once per entry of ``pages`` (a page listed twice gains it twice)."""
        near = self._near(pages)
        np.add.at(self.dense, pages[near], delta)
        for page in pages[~near].tolist():
            self.far[page] = self.far.get(page, 0) + delta

    def set(self, pages: np.ndarray, value: int) -> None:
        near = self._near(pages)
        self.dense[pages[near]] = value
        self.far.update(dict.fromkeys(pages[~near].tolist(), value))

    def get(self, pages: np.ndarray) -> np.ndarray:
        """Each page's value (pages >= 1)."""
        out = np.zeros(len(pages), self.dense.dtype)
        near = pages < len(self.dense)
        out[near] = self.dense[pages[near]]
        far = np.flatnonzero(pages >= DENSE_PAGES)
        if len(far) and self.far:
            out[far] = [self.far.get(page, 0) for page in pages[far].tolist()]
        return out


class GroupHistory:
    """One group's live rows by request, holders per page, and freed pages."""

    def __init__(self, gid: str, sliding: bool) -> None:
        self.gid = gid
        self.sliding = sliding
        self.rows: dict[int, np.ndarray] = {}
        self.holders = PageValues(np.int32)
        self.freed = PageValues(np.bool_)
        self.freed_at: dict[int, int] = {}
        self.explicit_alloc = False
        self._last: tuple[int | None, tuple[int, ...], np.ndarray] | None = None
        """The table observed last: its version (None: not read as a delta), shape and request ids."""

    def _hold(self, pages: np.ndarray, delta: int) -> None:
        """Count ``pages`` (one per table cell) as held by one more (``+1``) or one fewer (``-1``) live row."""
        pages = pages[pages > 0]
        if len(pages):
            self.holders.add(pages, delta)

    def observe(self, step: int, table: np.ndarray, req_ids: np.ndarray, live: int,
                delta: tuple[int, np.ndarray, np.ndarray] | None = None) -> list[Violation]:
        """Take the step's live rows as their requests' rows now; ``trace/pages-kept`` on each changed cell.
        ``delta``: ``(version, cells, before)`` where the trace stored the table as a change to the group's table
        version ``version - 1`` (``GroupStep.changed``): when that is the table observed last, only those flat
        cells are compared, against their values ``before``. Nothing here keeps a view of ``table``: a table read in
        place changes under it (``TraceReader.steps(shared=True)``), so the rows kept are copies."""
        req_ids, table = req_ids[:live], table[:live]
        last = self._last
        self._last = (None if delta is None else delta[0], table.shape, req_ids)
        if (delta is not None and last is not None and last[0] == delta[0] - 1 and last[1] == table.shape
                and np.array_equal(last[2], req_ids)):
            _, cells, before = delta
            rows, cols = np.divmod(cells, table.shape[1])
            keep = rows < live
            rows, cols = rows[keep], cols[keep]
            return self._update(step, req_ids, rows, cols, before[keep], table[rows, cols])
        table = table.astype(np.int64)  # a copy, wide enough for any page a later delta brings
        old = np.zeros(table.shape, np.int64)
        for i, req in enumerate(req_ids.tolist()):
            row = self.rows.get(req)
            if row is not None and len(row) == table.shape[1]:
                old[i] = row
            elif row is not None:  # a table of another width: the old row leaves whole, the new one comes whole
                self._hold(row, -1)
        for req, row in zip(req_ids.tolist(), table, strict=True):
            self.rows[req] = row  # rows of this step's own copy: changed in place by later deltas
        rows, cols = np.nonzero(old != table)
        return self._update(step, req_ids, rows, cols, old[rows, cols], table[rows, cols], stored=True)

    def _update(self, step: int, req_ids: np.ndarray, rows: np.ndarray, cols: np.ndarray, old: np.ndarray,
                new: np.ndarray, *, stored: bool = False) -> list[Violation]:
        """Cells ``(rows, cols)`` (row i: request ``req_ids[i]``) went from ``old`` (0: none yet) to ``new``: page
        counts, reallocation, the rule, and (unless ``stored``) each request's kept row."""
        out = []
        bad = (old > 0) & (old != new) & ~(self.sliding & (new == 0))
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            out.append(Violation(step, "correct", "trace/pages-kept", self.gid, int(rows[k]), None, None, None,
                                 f"request {int(req_ids[rows[k]])}'s column {int(cols[k])} changed from page "
                                 f"{int(old[k])} to {int(new[k])} under it (only appending or a sliding window's "
                                 "release to 0 may change a live row)"))
        self._hold(old, -1)
        gained = new[new > 0]
        self._hold(gained, +1)
        if not self.explicit_alloc and len(gained):
            self.freed.set(gained, False)
        if not stored:
            for row, col, value in zip(rows.tolist(), cols.tolist(), new.tolist(), strict=True):
                self.rows[int(req_ids[row])][col] = value
        return out

    def writes(self, step: int, locs: np.ndarray, page_size: int, tokens: np.ndarray, rows: np.ndarray,
               req_ids: np.ndarray) -> list[Violation]:
        """``T7`` across live requests and ``trace/freed-page-write`` for the pages this step's live tokens write."""
        if not len(locs):
            return []
        pages = locs // page_size
        for mask, rule in ((self.freed.get(pages), "trace/freed-page-write"), (self.holders.get(pages) > 1, "T7")):
            if mask.any():
                k = int(np.flatnonzero(mask)[0])
                page, row = int(pages[k]), int(rows[k])
                return [Violation(step, "safety", rule, self.gid, row, int(tokens[k]), None, int(locs[k]),
                                  self._why(rule, page, int(req_ids[row])))]
        return []

    def _why(self, rule: str, page: int, req: int) -> str:
        if rule == "trace/freed-page-write":
            return (f"request {req} writes page {page}, freed at step {self.freed_at.get(page)} and not "
                    "allocated since")
        others = sorted(q for q, row in self.rows.items() if q != req and page in row)
        return (f"request {req} writes page {page}, which the live rows of requests {others} hold too "
                "(shared since an earlier step)")

    def free(self, step: int, pages: np.ndarray) -> None:
        """Freed pages leave every live row that still names them (a sliding window's release, a finish)."""
        pages = pages[pages > 0]
        for req, row in self.rows.items():
            gone = np.isin(row, pages)
            if gone.any():
                self._hold(row[gone], -1)
                row = row.copy()
                row[gone] = 0
                self.rows[req] = row
        self._last = None
        if len(pages):
            self.freed.set(pages, True)
            self.freed_at.update({int(p): step for p in pages})

    def alloc(self, pages: np.ndarray) -> None:
        self.explicit_alloc = True
        pages = pages[pages > 0]
        if len(pages):
            self.freed.set(pages, False)

    def finish(self, reqs: np.ndarray) -> None:
        for req in reqs.tolist():
            old = self.rows.pop(int(req), None)
            if old is not None:
                self._hold(old, -1)
        self._last = None
