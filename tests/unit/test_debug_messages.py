"""Debug mode's verdicts and messages on random valid and broken steps equal those recorded from the validator
as it was before its checks were fused into one readback (commit dbfae29): same clause, entry and wording.

``data/debug_messages.json`` holds the message that validator raised for each step (or null), in the order
``random_case`` draws the steps from its seed, and a digest of those steps: a change to ``random_case`` is named
as one, never read as a changed verdict.
"""

from __future__ import annotations

import hashlib
import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

from kvtable.contract import Batch, GroupSpec
from kvtable.errors import ContractViolation
from kvtable.impl.checker import check_write_locs
from kvtable.impl.debug import debug_check, debug_check_device

FIXTURE = Path(__file__).parent / "data" / "debug_messages.json"
CASES = 1000
MODES = ("decode", "verify", "reanchor", "extend")


def random_case(rng: random.Random) -> dict[str, Any]:
    """A step over 1-3 groups laid out as the contract says, then (often) broken in one to three places."""
    families = [rng.choice(["full", "sliding"]) for _ in range(rng.randint(1, 3))]
    groups = [{"id": "abc"[i], "family": f, "ps": rng.choice([1, 2, 4, 16]),
               "window": rng.choice([1, 3, 8, 40]) if f == "sliding" else None} for i, f in enumerate(families)]
    mode = rng.choice(MODES)
    n = 1 if mode in ("decode", "extend") else rng.randint(1, 3)
    bs = rng.randint(1, 4)
    live = rng.randint(0 if rng.random() < 0.05 else 1, bs)
    seq = [rng.randint(1, 40) for _ in range(live)] + [1] * (bs - live)
    prefix = [rng.randint(0, s) for s in seq] if mode == "extend" else None
    tail_pad = rng.choice([-1, 0])
    tables, page = {}, 1
    for g in groups:
        w = max(-(-s // g["ps"]) for s in seq) + rng.choice([-1, 0, 0, 0, 1, 2])
        w = w if w > 0 and rng.random() < 0.9 else rng.randint(1, 8)
        rows = []
        for r in range(bs):
            end = -(-seq[r] // g["ps"]) if r < live else 0
            first = (prefix[r] if prefix else max(seq[r] - (1 if mode == "decode" else n), 0)) if r < live else 0
            start = max(first - g["window"] + 1, 0) // g["ps"] if g["family"] == "sliding" else 0
            row = []
            for c in range(w):
                if r >= live:
                    row.append(0)
                elif c < end:
                    row.append(0 if c < start and rng.random() < 0.7 else page)
                    page += 1
                else:
                    row.append(tail_pad)
            rows.append(row)
        tables[g["id"]] = rows
    for _ in range(rng.choice([0, 0, 0, 1, 1, 2, 3])):
        _break(rng, tables, seq if mode != "extend" else None, bs)
    case = {"groups": groups, "mode": mode, "n": n, "seq": seq, "prefix": prefix, "live": live,
            "actual_bs": live if live < bs or rng.random() < 0.5 else None, "tail_pad": tail_pad, "tables": tables,
            "device_lengths": mode != "extend" and rng.random() < 0.3, "eager": rng.random() < 0.15}
    case["locs"] = _locs(rng, case)
    return case


def _break(rng: random.Random, tables: dict[str, list[list[int]]], seq: list[int] | None, bs: int) -> None:
    """One random breach: an entry set to a pad, a hole, another row's page, a page past int32, or a length (not
    of an extend step, whose lengths the host checks)."""
    if seq is not None and rng.random() < 0.15:
        seq[rng.randrange(bs)] = rng.choice([0, -1, 1, 2, 60, 200])
        return
    rows = tables[rng.choice(sorted(tables))]
    row = rows[rng.randrange(bs)]
    if not row:
        return
    pages = [p for r in rows for p in r if p > 0] or [1]
    row[rng.randrange(len(row))] = rng.choice([-3, -2, -1, 0, 0, rng.choice(pages), rng.choice(pages), 2**31 // 16,
                                                 2**31 - 1, rng.randint(1, 30)])


def _locs(rng: random.Random, case: dict[str, Any]) -> dict[str, list[int]]:
    """Each group's locations of the live rows' tokens as the tables give them, now and then one corrupted."""
    locs = {}
    for g in case["groups"]:
        table, ps, out = case["tables"][g["id"]], g["ps"], []
        for r in range(case["live"]):
            for pos in _positions(case, r):
                col = min(max(pos, 0) // ps, len(table[r]) - 1)
                out.append(table[r][col] * ps + pos % ps if col >= 0 else -1)
        if out and rng.random() < 0.25:
            at = rng.randrange(len(out))
            out[at] = rng.choice([-1, 0, out[0], out[at - 1], out[-1] + 1, 7 * ps + 3])
        if out and rng.random() < 0.1:  # two tokens on one slot
            out[rng.randrange(len(out))] = out[rng.randrange(len(out))]
        locs[g["id"]] = out
    return locs


def _positions(case: dict[str, Any], row: int) -> list[int]:
    """W1-W4: the positions a live row writes."""
    seq = case["seq"][row]
    if case["mode"] == "extend":
        return list(range(case["prefix"][row], seq))
    k = 1 if case["mode"] == "decode" else case["n"]
    return [max(seq - k + t, 0) for t in range(k)]


def verdict(case: dict[str, Any]) -> str | None:
    """The message debug mode raises for ``case`` (None when it passes)."""
    specs = {g["id"]: GroupSpec(g["id"], g["family"], g["ps"], window=g["window"]) for g in case["groups"]}
    tables = {gid: torch.tensor(rows, dtype=torch.int32).reshape(len(rows), -1)
              for gid, rows in case["tables"].items()}
    locs = {gid: torch.tensor(values, dtype=torch.int64) for gid, values in case["locs"].items()}
    try:
        if case["eager"]:  # the strong checker alone, on the first group (D2 without T7 ahead of it)
            gid = min(tables)
            check_write_locs(tables[gid], locs[gid], _batch(case), specs[gid].block_granularity, group=gid)
        elif case["device_lengths"]:
            debug_check_device(specs, tables, torch.tensor(case["seq"], dtype=torch.int32), case["mode"], case["n"],
                               case["live"], locs, tail_pad=case["tail_pad"])
        else:
            debug_check(specs, tables, _batch(case), locs, tail_pad=case["tail_pad"])
    except ContractViolation as err:
        return str(err)
    return None


def _batch(case: dict[str, Any]) -> Batch:
    prefix = None if case["prefix"] is None else tuple(case["prefix"])
    return Batch(tuple(case["seq"]), mode=case["mode"], n=case["n"], prefix_lens=prefix, actual_bs=case["actual_bs"])


@cache
def recorded() -> list[dict[str, Any]]:
    """The steps ``random_case`` draws from the fixture's seed, each with the message recorded for it at dbfae29."""
    fixture = json.loads(FIXTURE.read_text())
    rng = random.Random(fixture["seed"])
    steps = [random_case(rng) for _ in range(fixture["steps"])]
    digest = hashlib.sha256(json.dumps(steps, sort_keys=True).encode()).hexdigest()
    assert digest == fixture["steps_sha256"], "random_case draws other steps than those the messages were recorded for"
    return [{**step, "message": message} for step, message in zip(steps, fixture["messages"], strict=True)]


def test_the_recorded_steps_cover_every_check() -> None:
    clauses = {message.split(" ")[0] for message in (c["message"] for c in recorded()) if message}
    assert {"[T1", "[T2", "[T3", "[T4", "[T5", "[T7", "[T8", "[T9", "[W2", "[W5", "[D1", "[D2"} <= clauses
    assert sum(c["message"] is None for c in recorded()) >= 100


@pytest.mark.parametrize("index", range(0, CASES, 50))
def test_debug_mode_raises_the_recorded_message(index: int) -> None:
    for case in recorded()[index: index + 50]:
        assert verdict(case) == case["message"], case
