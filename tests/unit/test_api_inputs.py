"""Every public input of impl's Python API gets a clause-named ContractViolation or the right answer.

One row per input: what is passed, the call, and what must come back: ``Refused("T9")`` (a
ContractViolation naming that clause) or the value (a tensor as its list; a meta tensor as ``Meta(shape)``).
The table doubles as the README's list of refused and accepted inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from kvtable import ContractViolation
from kvtable.backends import load
from kvtable.contract import Batch, GroupSpec
from kvtable.impl import (
    DEBUG_ENV,
    CacheGroupsMixin,
    GroupGraphBuffers,
    check_write_locs,
    decode_locs,
    expand_table,
    extend_locs,
    group_locs,
    group_seq_locs,
    reanchor_locs,
    verify_locs,
)
from kvtable.reference import check_tables


@dataclass(frozen=True)
class Refused:
    """A ContractViolation naming ``clause``."""

    clause: str


@dataclass(frozen=True)
class Meta:
    """A tensor on the meta device of this shape (shape inference: no values to compare)."""

    shape: tuple[int, ...]


def i32(values: Any, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device)


TABLE = i32([[3, 4, -1]])
"""One request with pages 3 and 4 at page size 4: position p sits at 4 * page + p % 4 (position 5 -> 17)."""
META_TABLE = torch.empty(1, 3, dtype=torch.int32, device="meta")
FULL = [GroupSpec("f", "full", 4)]


class Backend(CacheGroupsMixin):
    """The mixin as an attention backend would use it: one full-attention group, block 4 = kernel page 4."""

    kernel_page_size = 4
    max_num_pages = 3
    spec_num_tokens = 2

    def __init__(self) -> None:
        self.learn_cache_groups(FULL)
        self.init_decode_metadata({"f": TABLE}, i32([6]))


def replayed(seq_lens: list, *, n: int, actual_bs: Any = None) -> list[int]:
    """The location buffer after one replay of ``TABLE`` (one live row, the rest padding) at ``bs = len(seq_lens)``."""
    runner = GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3, kernel_page_size=4, spec_n=2)
    runner.replay(len(seq_lens), {"f": TABLE}, seq_lens, n, actual_bs=actual_bs)
    return runner.loc_buffers["f"][: len(seq_lens) * n]


ROWS: list[tuple[str, Callable[[], Any], Any]] = [
    # Page sizes ---------------------------------------------------------------------------------------------
    ("page size 4 (a valid call)", lambda: decode_locs(TABLE, i32([6]), 4), [17]),
    ("page size numpy.int64(4)", lambda: decode_locs(TABLE, i32([6]), np.int64(4)), [17]),
    ("page size 2**40 (page 3's slot would wrap int32)", lambda: decode_locs(TABLE, i32([6]), 2**40), Refused("W5")),
    ("page size 0", lambda: decode_locs(TABLE, i32([6]), 0), Refused("E1")),
    ("page size 4.0", lambda: decode_locs(TABLE, i32([6]), 4.0), Refused("E1")),
    ("page size True", lambda: decode_locs(TABLE, i32([6]), True), Refused("E1")),
    ("block granularity numpy.int64(4)", lambda: group_locs([GroupSpec("f", "full", np.int64(4))], {"f": TABLE},
                                                              Batch((6,))), {"f": [17]}),
    ("block granularity 0", lambda: group_locs([GroupSpec("f", "full", 0)], {"f": TABLE}, Batch((6,))),
     Refused("E1")),
    ("expand_table ratio True", lambda: expand_table(TABLE, True), Refused("E1")),
    # Groups and tables --------------------------------------------------------------------------------------
    ("specs None", lambda: group_locs(None, {"f": TABLE}, Batch((6,))), Refused("T1")),
    ("tables None", lambda: group_locs(FULL, None, Batch((6,))), Refused("T1")),
    ("a table for an undeclared group", lambda: group_locs(FULL, {"f": TABLE, "x": TABLE}, Batch((6,))),
     Refused("T1")),
    ("full-attention group declared with a window (a hole at a needed column would pass as out of window)",
     lambda: group_locs([GroupSpec("f", "full", 4, window=2)], {"f": i32([[0, 4, -1]])}, Batch((6,)), debug=True),
     Refused("T4")),
    ("table of int64", lambda: decode_locs(TABLE.long(), i32([6]), 4), Refused("T1")),
    ("table on the meta device", lambda: decode_locs(META_TABLE, torch.empty(1, dtype=torch.int32, device="meta"), 4),
     Meta((1,))),
    ("table on the meta device, debug mode (it reads page ids)",
     lambda: decode_locs(META_TABLE, torch.empty(1, dtype=torch.int32, device="meta"), 4, debug=True),
     Refused("T1")),
    ("kernels=None (the torch kernels)", lambda: group_locs(FULL, {"f": TABLE}, Batch((6,)), kernels=None),
     {"f": [17]}),
    ("tail pad 7 for the debug check", lambda: group_locs(FULL, {"f": TABLE}, Batch((6,)), tail_pad=7),
     Refused("T3")),
    ("expand_table with tail pad 7 (it would write 7 into the tail)",
     lambda: expand_table(TABLE, 2, max_kernel_pages=8, tail_pad=7), Refused("T3")),
    ("expand_table with tail pad 0", lambda: expand_table(TABLE, 2, max_kernel_pages=8, tail_pad=0),
     [[6, 7, 8, 9, -1, -1, 0, 0]]),
    # Lengths ------------------------------------------------------------------------------------------------
    ("seq_lens None", lambda: decode_locs(TABLE, None, 4), Refused("T9")),
    ("seq_lens as a list, not a tensor", lambda: decode_locs(TABLE, [6], 4), Refused("T9")),
    ("seq_lens of float32", lambda: decode_locs(TABLE, torch.tensor([6.0]), 4), Refused("T9")),
    ("seq_lens on the meta device, tables on the CPU",
     lambda: decode_locs(TABLE, torch.empty(1, dtype=torch.int32, device="meta"), 4), Refused("T9")),
    ("Batch seq_lens None", lambda: group_locs(FULL, {"f": TABLE}, Batch(None)), Refused("T9")),
    ("Batch seq_lens (6.5,)", lambda: group_locs(FULL, {"f": TABLE}, Batch((6.5,))), Refused("T9")),
    ("Batch seq_lens (6.0,) (a float, even a whole one)", lambda: group_locs(FULL, {"f": TABLE}, Batch((6.0,))),
     Refused("T9")),
    ("Batch seq_lens from a generator", lambda: group_locs(FULL, {"f": TABLE}, Batch(s for s in [6])), {"f": [17]}),
    ("extend lengths None", lambda: extend_locs(TABLE, None, [2], 4), Refused("T9")),
    ("extend lengths as generators", lambda: extend_locs(TABLE, iter([4]), (e for e in [2]), 4), [16, 17]),
    ("extend lengths of floats", lambda: extend_locs(TABLE, [4.0], [2], 4), Refused("T9")),
    ("extend lengths of different counts", lambda: extend_locs(TABLE, [4, 0], [2], 4), Refused("T9")),
    ("seq_len 0", lambda: decode_locs(TABLE, i32([0]), 4), Refused("T9")),
    # Counts -------------------------------------------------------------------------------------------------
    ("actual_bs 1.0", lambda: verify_locs(TABLE, i32([6]), 4, 2, actual_bs=1.0), Refused("T9")),
    ("actual_bs True", lambda: verify_locs(TABLE, i32([6]), 4, 2, actual_bs=True), Refused("T9")),
    ("actual_bs 2 for a batch of 1", lambda: verify_locs(TABLE, i32([6]), 4, 2, actual_bs=2), Refused("T9")),
    ("verify n True", lambda: verify_locs(TABLE, i32([6]), 4, True), Refused("W2")),
    ("verify n 2.0", lambda: verify_locs(TABLE, i32([6]), 4, 2.0), Refused("W2")),
    ("re-anchor n 0", lambda: reanchor_locs(TABLE, i32([6]), 4, 0), Refused("W4")),
    ("group_seq_locs with numpy.int64 n", lambda: group_seq_locs(FULL, {"f": TABLE}, i32([6]), np.int64(2),
                                                                 mode="verify"), {"f": [16, 17]}),
    # Graph replay (impl's GroupGraphBuffers, CPU lengths) -----------------------------------------------------
    ("replay seq_lens [6] (a valid call)", lambda: replayed([6], n=1), [17]),
    ("replay, a padded row shorter than N (clamped at 0, dummy page)", lambda: replayed([6, 1], n=2, actual_bs=1),
     [16, 17, 0, 0]),
    ("replay seq_lens [6.5]", lambda: replayed([6.5], n=1), Refused("G4")),
    ("replay actual_bs 0.5", lambda: replayed([6], n=1, actual_bs=0.5), Refused("T9")),
    ("replay seq_lens on the meta device, buffers on the CPU",
     lambda: GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3, kernel_page_size=4).replay(
         1, {"f": TABLE}, torch.empty(1, dtype=torch.int32, device="meta")), Refused("G4")),
    # Graph init (issue 21: raw errors from torch before) -----------------------------------------------------
    ("graph buffers of 2^40 rows x 2^20 pages (26 TB)",
     lambda: GroupGraphBuffers(FULL, max_bs=2**40, max_kernel_pages=2**20, kernel_page_size=4), Refused("G1")),
    ("graph max_kernel_pages 3.0", lambda: GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3.0, kernel_page_size=4),
     Refused("G1")),
    ("graph max_bs 2.0", lambda: GroupGraphBuffers(FULL, max_bs=2.0, max_kernel_pages=3, kernel_page_size=4),
     Refused("G1")),
    ("graph device 'tpu'", lambda: GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3, kernel_page_size=4,
                                                     device="tpu"), Refused("G1")),
    *([] if torch.cuda.is_available() else [  # a machine with CUDA has the buffers
        ("graph device 'cuda' without CUDA",
         lambda: GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3, kernel_page_size=4, device="cuda"),
         Refused("G1"))]),
    ("graph kernel_page_size -16, expand=False",
     lambda: GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3, kernel_page_size=-16, expand=False),
     Refused("E1")),
    ("graph kernel_page_size 0, expand=False",
     lambda: GroupGraphBuffers(FULL, max_bs=2, max_kernel_pages=3, kernel_page_size=0, expand=False), Refused("E1")),
    # Specs (issue 21: silently the last one, or a key naming another group) ---------------------------------
    ("two specs with one group id", lambda: group_locs([GroupSpec("f", "full", 4), GroupSpec("f", "full", 8)],
                                                       {"f": TABLE}, Batch((6,))), Refused("T1")),
    ("a specs mapping whose key is not the spec's group id",
     lambda: group_locs({"x": GroupSpec("f", "full", 4)}, {"x": TABLE}, Batch((6,))), Refused("T1")),
    # Debug switches (issue 21: 'x' and KVTABLE_DEBUG=true were read as off) -----------------------------------
    ("debug='x'", lambda: raises(lambda: decode_locs(TABLE, i32([6]), 4, debug="x")), "TypeError: debug must be "
     "True, False or None, got 'x'"),
    ("load('torch', debug='x')", lambda: raises(lambda: load("torch", debug="x")),
     "TypeError: debug must be True, False or None, got 'x'"),
    ("KVTABLE_DEBUG=true (on, so the debug check reads the table)",
     lambda: with_env("true", lambda: group_locs(FULL, {"f": i32([[3, 3, -1]])}, Batch((6,)))), Refused("T7")),
    ("KVTABLE_DEBUG=maybe", lambda: with_env("maybe", lambda: raises(lambda: decode_locs(TABLE, i32([6]), 4))),
     "ValueError: KVTABLE_DEBUG='maybe': use 1 (debug checks on) or 0 (off)"),
    ("init_decode_metadata({}) with an attention group declared",
     lambda: Backend().init_decode_metadata({}, i32([6])), Refused("T1")),
    ("the reference's check_tables(tables=None)", lambda: check_tables(FULL, None, Batch((6,))), Refused("T1")),
    ("the reference backend's group_locs with seq_lens None",
     lambda: load("reference").group_locs(FULL, {"f": TABLE}, Batch(None)), Refused("T9")),
    ("group_seq_locs mode='bogus' (was answered about extend lengths)",
     lambda: raises(lambda: group_seq_locs(FULL, {"f": TABLE}, i32([6]), mode="bogus")),
     "ValueError: mode 'bogus' is none of 'decode', 'verify', 'reanchor' (group_seq_locs' modes)"),
    ("Batch mode='bogus'", lambda: raises(lambda: group_locs(FULL, {"f": TABLE}, Batch((6,), mode="bogus"))),
     "ValueError: mode 'bogus' is none of ('decode', 'verify', 'extend', 'reanchor')"),
    # Empty batches in debug mode (issue 21 point 8) ---------------------------------------------------------
    ("decode_locs of no rows, debug", lambda: decode_locs(TABLE[:0], i32([]), 4, debug=True), []),
    ("group_locs of no rows, debug", lambda: group_locs(FULL, {"f": TABLE[:0]}, Batch(()), debug=True), {"f": []}),
    # The strong checker -------------------------------------------------------------------------------------
    ("checker, the right int location", lambda: check_write_locs(TABLE, i32([17]), Batch((6,)), 4), None),
    ("checker, float location 17.9 (would pass as 17)",
     lambda: check_write_locs(TABLE, torch.tensor([17.9]), Batch((6,)), 4), Refused("D1")),
    ("checker, locations as a list", lambda: check_write_locs(TABLE, [17], Batch((6,)), 4), Refused("D1")),
    ("checker, page size 0", lambda: check_write_locs(TABLE, i32([17]), Batch((6,)), 0), Refused("E1")),
    ("checker, seq_len -1 (a length, not a write)", lambda: check_write_locs(TABLE, i32([17]), Batch((-1,)), 4),
     Refused("T9")),
    # Draft re-anchor on the mixin: the checks reanchor_locs makes ------------------------------------------
    ("re-anchor frontier 6 (a valid call)", lambda: Backend().update_draft_forward_metadata(i32([6])).out_cache_locs,
     {"f": [16, 17]}),
    ("re-anchor frontier 0", lambda: Backend().update_draft_forward_metadata(i32([0])), Refused("T9")),
    ("reanchor_locs frontier 0", lambda: reanchor_locs(TABLE, i32([0]), 4, 2), Refused("T9")),
    ("re-anchor frontier 13, past the table's 3 pages",
     lambda: Backend().update_draft_forward_metadata(i32([13])), Refused("T8")),
    ("reanchor_locs frontier 13", lambda: reanchor_locs(TABLE, i32([13]), 4, 2), Refused("T8")),
    ("re-anchor frontier of float32", lambda: Backend().update_draft_forward_metadata(torch.tensor([6.0])),
     Refused("T9")),
]


def raises(call: Callable[[], Any]) -> str:
    """The exception the call raises, as ``Type: message`` (an argument-named refusal that is no clause)."""
    try:
        call()
    except Exception as err:  # the row says which type and message it must be
        return f"{type(err).__name__}: {err}"
    return "no exception"


def with_env(value: str, call: Callable[[], Any]) -> Any:
    """``call()`` with ``KVTABLE_DEBUG=value``, its outcome in the table's terms."""
    saved = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = value
    try:
        return outcome(call)
    finally:
        if saved is None:
            del os.environ[DEBUG_ENV]
        else:
            os.environ[DEBUG_ENV] = saved


def outcome(call: Callable[[], Any]) -> Any:
    """The call's result in the table's terms: ``Refused(clause)``, ``Meta(shape)``, lists, or the value."""
    try:
        value = call()
    except ContractViolation as err:
        return Refused(err.clause_id)
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return Meta(tuple(value.shape)) if value.is_meta else value.tolist()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("what", "call", "expected"), ROWS, ids=[row[0] for row in ROWS])
def test_public_input(what: str, call: Callable[[], Any], expected: Any) -> None:
    assert outcome(call) == expected
