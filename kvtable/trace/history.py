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
        self.dense = np.zeros(1024, dtype)
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
        self._last: tuple[np.ndarray, np.ndarray] | None = None
        self._source: np.ndarray | None = None
        """The whole table ``_last`` was taken from (the array object a delta's base is compared with)."""

    def _hold(self, pages: np.ndarray, delta: int) -> None:
        """Count ``pages`` (one per table cell) as held by one more (``+1``) or one fewer (``-1``) live row."""
        pages = pages[pages > 0]
        if len(pages):
            self.holders.add(pages, delta)

    def observe(self, step: int, table: np.ndarray, req_ids: np.ndarray, live: int,
                delta: tuple[np.ndarray, np.ndarray] | None = None) -> list[Violation]:
        """Take the step's live rows as their requests' rows now; ``trace/pages-kept`` on each changed row.
        ``delta``: the table is the array ``delta[0]`` but for its flat cells ``delta[1]`` (as a trace stores it):
        when ``delta[0]`` is the table observed last, only those cells' rows are compared."""
        full, req_ids = table, req_ids[:live]
        table = table[:live]  # a view: the step's own arrays are kept, never written
        last, source = self._last, self._source
        self._last, self._source = (table, req_ids), full
        if last is not None and last[0].shape == table.shape and np.array_equal(last[1], req_ids):
            if delta is not None and delta[0] is source and full.ndim == 2 and full.shape[1]:
                rows = np.unique(delta[1] // full.shape[1])
                changed = rows[rows < live]
            else:
                changed = np.flatnonzero((last[0] != table).any(axis=1))
            return self._update(step, req_ids[changed], changed, last[0][changed], table[changed])
        old = np.zeros(table.shape, np.int64)
        for i, req in enumerate(req_ids.tolist()):
            row = self.rows.get(req)
            if row is not None and len(row) == table.shape[1]:
                old[i] = row
            elif row is not None:  # a table of another width: the old row leaves whole, the new one comes whole
                self._hold(row, -1)
        return self._update(step, req_ids, np.arange(len(req_ids)), old, table)

    def _update(self, step: int, reqs: np.ndarray, rows: np.ndarray, old: np.ndarray, new: np.ndarray
                ) -> list[Violation]:
        """Rows ``rows`` (requests ``reqs``) went from ``old`` (0: none yet) to ``new``: counts, reallocation, rule."""
        diff = old != new
        out = []
        bad = (old > 0) & diff & ~(self.sliding & (new == 0))
        if bad.any():
            i, col = (int(x) for x in np.argwhere(bad)[0])
            out.append(Violation(step, "correct", "trace/pages-kept", self.gid, int(rows[i]), None, None, None,
                                 f"request {int(reqs[i])}'s column {col} changed from page {int(old[i, col])} to "
                                 f"{int(new[i, col])} under it (only appending or a sliding window's release "
                                 "to 0 may change a live row)"))
        self._hold(old[diff], -1)
        gained = new[diff & (new > 0)]
        self._hold(gained, +1)
        if not self.explicit_alloc and len(gained):
            self.freed.set(gained, False)
        for req, row in zip(reqs.tolist(), new, strict=True):
            self.rows[req] = row
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
        self._last = self._source = None
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
        self._last = self._source = None
