"""T1-T9: the table contract validator. ``check_tables`` raises the first breach it finds.

Tables may be plain lists of lists or any object with ``tolist()`` (a torch tensor, say); an object
that declares a ``dtype`` must declare int32. The validator itself never imports torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kvtable.contract import Specs
from kvtable.errors import ContractViolation
from kvtable.reference.model import (
    DEFAULT_TAIL_PAD,
    INT32_MAX,
    NULL_PAGE,
    Batch,
    GroupSpec,
    ShortRows,
    Table,
    check_batch_form,
    check_group_spec,
    check_pad_value,
    check_page_size,
    first_query,
    is_int,
    read_start,
    write_positions,
)


def specs_by_id(specs: Specs) -> dict[str, GroupSpec]:
    """Group specs keyed by group id, from either a mapping or a sequence, each a well-formed declaration."""
    by_id = dict(specs) if isinstance(specs, Mapping) else {spec.group_id: spec for spec in specs}
    for spec in by_id.values():
        check_group_spec(spec)
    return by_id


def shed_state_groups(specs: Specs, tables: Mapping[str, Any]) -> dict[str, Any]:
    """T6 state-shed: the tables of the non-state groups only; state tables never reach location math."""
    by_id = specs_by_id(specs)
    return {gid: table for gid, table in tables.items() if not (gid in by_id and by_id[gid].is_state)}


def as_table(obj: Any, *, group: str | None = None) -> Table:
    """T1 table-shape: a rectangular 2-D list of int32 ints, from a list or anything with ``tolist()``."""
    dtype = getattr(obj, "dtype", None)
    if dtype is not None and not str(dtype).endswith("int32"):
        raise ContractViolation("T1", f"tables are int32, got dtype {dtype}", group=group)
    rows = obj.tolist() if hasattr(obj, "tolist") else obj
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise ContractViolation("T1", f"a table is 2-D [bs, max_pages], got {type(obj).__name__}", group=group)
    width = len(rows[0]) if rows else 0
    for r, row in enumerate(rows):
        if len(row) != width:
            raise ContractViolation("T1", f"ragged table: row has {len(row)} columns, row 0 has {width}",
                                    group=group, row=r)
        for c, page in enumerate(row):
            if not isinstance(page, int) or isinstance(page, bool):
                raise ContractViolation("T1", f"page ids are ints, got {page!r}", group=group, row=r, col=c)
            if not -1 <= page <= INT32_MAX:
                raise ContractViolation("T1", f"page id {page} is neither a page (>= 0) nor the pad -1",
                                        group=group, row=r, col=c)
    return rows


def check_table_shape(table: Table, batch: Batch, *, group: str | None = None) -> None:
    """T1 table-shape: at least one row per batch row and at least one column."""
    if len(table) < batch.bs:
        raise ContractViolation("T1", f"table has {len(table)} rows for a batch of {batch.bs}", group=group)
    if batch.bs and not table[0]:
        raise ContractViolation("T1", "table has no columns; col 0 must exist for dummy rows", group=group)


def length_mirror(values: object, what: str) -> tuple[Any, ...]:
    """T9 lengths: a CPU mirror is a sequence of lengths, one per request (not one number, not a string)."""
    if not isinstance(values, Iterable) or isinstance(values, (str, bytes)):
        raise ContractViolation("T9", f"{what} are a sequence of ints, got {type(values).__name__}")
    return tuple(values)


def check_lengths(batch: Batch, *, short_rows: ShortRows = "refuse") -> None:
    """T9 lengths, and W2's ``seq_len >= N`` for real verify rows (unless ``short_rows`` clamps or sinks them).

    The one place the reference checks lengths: batches and lone calls alike come here.
    """
    check_batch_form(batch)
    if batch.prefix_lens is not None and len(batch.prefix_lens) != batch.bs:
        raise ContractViolation("T9", f"{len(batch.prefix_lens)} prefix lengths for {batch.bs} rows")
    for row, seq in enumerate(batch.seq_lens):
        if not is_int(seq) or (batch.prefix_lens is not None and not is_int(batch.prefix_lens[row])):
            raise ContractViolation("T9", f"lengths are ints, got seq_len {seq!r}", row=row)
        if batch.mode == "extend":
            assert batch.prefix_lens is not None
            prefix = batch.prefix_lens[row]
            if prefix < 0 or seq < prefix:
                raise ContractViolation("T9", f"prefix {prefix} and extend {seq - prefix} must be >= 0",
                                        row=row)
        elif seq < 1:
            raise ContractViolation("T9", f"seq_len must be >= 1, got {seq}", row=row)
        if batch.mode == "verify" and not batch.is_dummy(row) and seq < batch.n and short_rows == "refuse":
            raise ContractViolation("W2", f"real row has seq_len {seq} < N={batch.n}: clamped positions would "
                                    "write the slot of position 0 more than once", row=row)


def check_dummy_rows(table: Table, batch: Batch, *, group: str | None = None) -> None:
    """T2 dummy-row: padded rows hold page 0 in every column and replay at seq_len 1."""
    for row in range(batch.live_rows, batch.bs):
        if batch.seq_lens[row] != 1:
            raise ContractViolation("T2", f"dummy row has seq_len {batch.seq_lens[row]}, expected 1",
                                    group=group, row=row)
        for col, page in enumerate(table[row]):
            if page != NULL_PAGE:
                raise ContractViolation("T2", f"dummy row holds {page}, expected page 0", group=group,
                                        row=row, col=col)


def needed_columns(batch: Batch, row: int, spec: GroupSpec) -> range:
    """The columns whose pages this step reads or writes for ``row`` (empty if it writes nothing)."""
    ps = spec.block_granularity
    if first_query(batch, row) is None:
        return range(0)
    end = -(-batch.seq_lens[row] // ps)
    return range(read_start(batch, row, spec.window) // ps, end)


def check_width(table: Table, batch: Batch, spec: GroupSpec) -> None:
    """T8 table-width: every needed column of a live row exists."""
    width = len(table[0]) if table else 0
    for row in range(batch.live_rows):
        cols = needed_columns(batch, row, spec)
        if cols and cols[-1] >= width:
            raise ContractViolation("T8", f"seq_len {batch.seq_lens[row]} needs {cols[-1] + 1} columns of "
                                    f"{spec.block_granularity} tokens, table has {width}",
                                    group=spec.group_id, row=row, col=cols[-1])


def check_live_pages(table: Table, batch: Batch, spec: GroupSpec) -> None:
    """T4 live-pages: every column a live row needs holds a real page (a front hole too, in a sliding row)."""
    gid = spec.group_id
    for row in range(batch.live_rows):
        for col in needed_columns(batch, row, spec):
            page = table[row][col]
            if page < 0:
                raise ContractViolation("T4", f"tail pad {page} inside the live length "
                                        f"(seq_len {batch.seq_lens[row]})", group=gid, row=row, col=col)
            if page == NULL_PAGE and spec.family == "full":
                raise ContractViolation("T4", "null page 0 inside the live length; full-attention rows have "
                                        "no holes", group=gid, row=row, col=col)


def check_tail_pad(table: Table, batch: Batch, spec: GroupSpec, tail_pad: int) -> None:
    """T3 tail-pad: a live row reads ``front holes, real pages, tail pad``; no real page follows a pad.

    A sliding row's hole after a real page (and before the pad) is T5's to report (``check_swa_holes``).
    """
    sliding = spec.family == "sliding"
    for row in range(batch.live_rows):
        seen_real = seen_pad = False
        for col, page in enumerate(table[row]):
            if page > 0 and not seen_pad:
                seen_real = True
            elif page == tail_pad and (seen_real or page < 0):
                seen_pad = True
            elif page != NULL_PAGE or seen_pad or (seen_real and not sliding):
                what = "a real page" if page > 0 else f"{page}"
                raise ContractViolation("T3", f"{what} where only the tail pad {tail_pad} may follow",
                                        group=spec.group_id, row=row, col=col)


def check_swa_holes(table: Table, batch: Batch, spec: GroupSpec, tail_pad: int = DEFAULT_TAIL_PAD) -> None:
    """T5 swa-front-holes: a sliding row's holes sit before its first real page and cover no needed column.

    With ``tail_pad`` 0 a 0 after a real page is the pad, so then only the needed columns are checked.
    """
    if spec.family != "sliding":
        return
    for row in range(batch.live_rows):
        for col in needed_columns(batch, row, spec):
            if table[row][col] == NULL_PAGE:
                raise ContractViolation(
                    "T5", f"hole covers a needed column: queries from position {first_query(batch, row)} with "
                    f"window {spec.window} read from position {read_start(batch, row, spec.window)}",
                    group=spec.group_id, row=row, col=col)
        if tail_pad < 0:
            _check_holes_in_front(table[row], spec, row, tail_pad)


def _check_holes_in_front(entries: list[int], spec: GroupSpec, row: int, tail_pad: int) -> None:
    """T5: no hole between a row's first real page and its tail pad."""
    seen_real = False
    for col, page in enumerate(entries):
        if page == tail_pad:
            return
        if page == NULL_PAGE and seen_real:
            raise ContractViolation("T5", "hole (page 0) after a real page; holes sit only at the front",
                                    group=spec.group_id, row=row, col=col)
        seen_real = seen_real or page > 0


def check_int32_range(table: Table, page_size: int, *, group: str | None = None) -> None:
    """W5 int32-locs: every slot of every real page in the table is an int32 location."""
    for r, row in enumerate(table):
        for c, page in enumerate(row):
            if page > 0 and (page + 1) * page_size - 1 > INT32_MAX:
                raise ContractViolation("W5", f"page {page} at page size {page_size} has slots past "
                                        f"2^31 - 1", group=group, row=r, col=c)


def check_page_sharing(table: Table, batch: Batch, spec: GroupSpec) -> None:
    """T7 private-write-pages: a page with a write position is in no other live row, nor twice in its own."""
    ps = spec.block_granularity
    for row in range(batch.live_rows):
        seen: set[int] = set()
        for col, page in enumerate(table[row]):
            if page in seen:
                raise ContractViolation("T7", f"page {page} appears twice in one row", group=spec.group_id,
                                        row=row, col=col)
            if page > 0:
                seen.add(page)
    rows_of: dict[int, set[int]] = {}
    for row in range(batch.live_rows):
        for page in table[row]:
            if page > 0:
                rows_of.setdefault(page, set()).add(row)
    for row in range(batch.live_rows):
        for pos in write_positions(batch, row):
            page = table[row][pos // ps]
            others = rows_of.get(page, set()) - {row}
            if others:
                raise ContractViolation("T7", f"write page {page} (position {pos}) is shared with rows "
                                        f"{sorted(others)}", group=spec.group_id, row=row, col=pos // ps)


def check_group_table(table_like: Any, batch: Batch, spec: GroupSpec, *, tail_pad: int = DEFAULT_TAIL_PAD) -> Table:
    """Every table clause for one group; returns the table as plain lists."""
    table = as_table(table_like, group=spec.group_id)
    check_table_shape(table, batch, group=spec.group_id)
    check_dummy_rows(table, batch, group=spec.group_id)
    check_width(table, batch, spec)
    check_swa_holes(table, batch, spec, tail_pad)
    check_live_pages(table, batch, spec)
    check_tail_pad(table, batch, spec, tail_pad)
    check_page_sharing(table, batch, spec)
    check_int32_range(table, spec.block_granularity, group=spec.group_id)
    return table


LONE_GROUP = "table"
"""The group a lone table (a call without group specs) goes by in errors."""


def check_lone_table(table_like: Any, batch: Batch, page_size: int, *, short_rows: ShortRows = "refuse") -> Table:
    """A lone call's table, validated like a batch's: every clause a table without family or tail pad can break.

    A lone call declares neither the group's family nor its tail pad, and decode and re-anchor calls do not
    say which rows are padding; so the table is read as a sliding group of window 1 (it needs exactly the
    columns it writes) whose pad may be -1 or 0, and page 0 at a written column is a dummy row writing the
    sink. Page sharing (T7) and W5 need neither and are checked; the tail-pad grammar (T3) and T5 are left to
    the batch call (SPEC.md, "Lone calls").
    """
    check_page_size(page_size, group=LONE_GROUP)
    check_lengths(batch, short_rows=short_rows)
    spec = GroupSpec(LONE_GROUP, "sliding", page_size, window=1)
    table = as_table(table_like, group=LONE_GROUP)
    check_table_shape(table, batch, group=LONE_GROUP)
    check_dummy_rows(table, batch, group=LONE_GROUP)
    check_width(table, batch, spec)
    check_live_pages(table, batch, spec)
    check_page_sharing(table, batch, spec)
    check_int32_range(table, page_size, group=LONE_GROUP)
    return table


def check_tables(specs: Specs, tables: Mapping[str, Any], batch: Batch, *,
                 tail_pad: int = DEFAULT_TAIL_PAD) -> dict[str, Table]:
    """Validate a batch's tables against clauses T1-T9 and W2/W5; return the non-state tables as lists.

    Raises ``ContractViolation`` naming the clause, group, row and column of the first breach.
    """
    check_pad_value(tail_pad)
    by_id = specs_by_id(specs)
    check_lengths(batch)
    if not isinstance(tables, Mapping):
        raise ContractViolation("T1", f"tables are a mapping of group id to table, got {type(tables).__name__}")
    live = shed_state_groups(by_id, tables)
    check_group_ids(by_id, live)
    return {gid: check_group_table(live[gid], batch, by_id[gid], tail_pad=tail_pad) for gid in sorted(live)}


def check_group_ids(by_id: Mapping[str, GroupSpec], tables: Iterable[str]) -> None:
    """T1 table-shape: one table for every non-state group, none for an undeclared one."""
    delivered = set(tables)
    unknown = sorted(delivered - set(by_id))
    if unknown:
        raise ContractViolation("T1", f"tables for undeclared groups {unknown}; declared: {sorted(by_id)}")
    missing = sorted(gid for gid, spec in by_id.items() if not spec.is_state and gid not in delivered)
    if missing:
        raise ContractViolation("T1", f"no table for groups {missing}; every non-state group has one")
