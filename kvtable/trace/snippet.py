"""The snippet printed with a violation: the failing step's inputs as one kvtable call, pasteable."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kvtable.trace.allocation import OPERATION, alloc_step
from kvtable.trace.judge import Violation
from kvtable.trace.ring import ring_lengths
from kvtable.trace.schema import Header
from kvtable.trace.store import Step

RING_CLAUSES = ("R1", "R2", "R3")
"""A ring group's violations: redone by ``ring_locs``."""
CALLS = {"decode": "decode_locs", "verify": "verify_locs", "reanchor": "reanchor_locs", "extend": "extend_locs"}


def _tensor(array: np.ndarray) -> str:
    return f"torch.tensor({array.astype(np.int64).tolist()}, dtype=torch.int32)"


def _load(header: Header) -> list[str]:
    name = header.backend
    load = f"load({name!r})" if name else "...  # your backend (the trace names none)"
    if name and header.backend_problem:
        load += f"  # this name did not load when the trace was recorded: {header.backend_problem}"
    return ["import torch", "from kvtable.backends import load", "", f"backend = {load}"]


def _call(step: Step, gid: str) -> str:
    group = step.groups[gid]
    table, seq, ps = _tensor(step.need("table", gid)), step.need("seq_lens").astype(np.int64).tolist(), group.page_size
    if step.kind == "extend":
        prefix = step.need("prefix_lens").astype(np.int64).tolist()
        extend = [s - p for s, p in zip(seq, prefix, strict=True)]
        return f"backend.extend_locs({table}, {prefix}, {extend}, {ps})"
    lengths = f"torch.tensor({seq}, dtype=torch.int32)"
    if step.kind == "decode":
        return f"backend.decode_locs({table}, {lengths}, {ps})"
    extra = f", actual_bs={step.actual_bs}" if step.kind == "verify" and step.actual_bs is not None else ""
    return f"backend.{CALLS[step.kind]}({table}, {lengths}, {ps}, {step.n}{extra})"


def _ring_call(header: Header, step: Step, gid: str, violation: Violation) -> str:
    """``ring_locs`` on the step's ring group, indexed at the side (writes, or reads for R3 and read breaches)."""
    window = next(g["window"] for g in header.groups if g["group_id"] == gid)
    prefix, extend = ring_lengths(step, step.kind)
    side = 1 if violation.clause == "R3" or violation.reason.startswith("read") else 0
    return f"backend.ring_locs({_tensor(step.need('table', gid))}, {prefix}, {extend}, {step.groups[gid].page_size}, " \
           f"{window})[{side}]"


def _replays(steps: Sequence[Step]) -> list[str]:
    """The graph built, captured and replayed as the trace did, up to the failing replay."""
    lines = []
    for step in steps:
        if step.kind == "graph":
            specs = ", ".join(f"GroupSpec(**{s!r})" for s in step.meta["specs"])
            sizes = ", ".join(f"{k}={v!r}" for k, v in step.meta["sizes"].items())
            lines += ["from kvtable.contract import GroupSpec", f"runner = backend.graph([{specs}], {sizes})"]
        elif step.kind == "capture":
            lines.append(f"runner.capture({step.meta['bs']}, {step.meta['group_ids']!r}, {step.n})")
        else:
            tables = ", ".join(f"{gid!r}: {_tensor(step.need('table', gid))}" for gid in step.groups)
            seq = step.need("seq_lens").astype(np.int64).tolist()
            extra = "" if step.actual_bs is None else f", actual_bs={step.actual_bs}"
            lines.append(f"runner.replay({step.meta['bs']}, {{{tables}}}, torch.tensor({seq}, dtype=torch.int32), "
                         f"{step.n}{extra})  # step {step.index}")
    return lines


def snippet(header: Header, step: Step, violation: Violation, graph_steps: Sequence[Step]) -> str:
    """Python that redoes the failing step with the trace's backend; prints the offending location."""
    lines = [f"# trace step {step.index} ({step.kind}), {violation.clause}, group {violation.group!r}", *_load(header)]
    gid = violation.group if violation.group in step.groups else None
    if violation.clause in RING_CLAUSES and gid is not None:
        lines.append(f"locs = {_ring_call(header, step, gid, violation)}")
    elif step.kind in CALLS and gid is not None:
        lines.append(f"locs = {_call(step, gid)}")
    elif step.kind == "allocate":
        lines += ["from kvtable.conformance.alloc_calls import alloc_state, call_allocator",
                  "from kvtable.reference.allocation import AllocStep, SwaState", "",
                  f"state, arena = alloc_state({alloc_step(step)!r})  # the output buffer between guard cells",
                  "# buffers the engine makes in the call get guard cells too (made)",
                  f"got, made, changed = call_allocator(backend, {OPERATION[step.meta['mode']]!r}, state)",
                  f"print(arena, made, got.req_to_token[{violation.row}])  # {violation.reason}"]
        return "\n".join(lines)
    elif step.kind == "replay":
        lines.append("# a replay reads buffers earlier replays left: the graph, its captures and its last replays")
        lines += _replays(graph_steps)
        if violation.group is not None:
            lines.append(f"locs = runner.loc_buffers[{violation.group!r}]")
    else:
        return "\n".join([*lines, f"# step {step.index} is a {step.kind} event: no call redoes it"])
    if violation.token is not None and violation.group is not None:
        recorded = "" if violation.loc is None else f"the trace recorded {violation.loc}: "
        lines.append(f"print(locs[{violation.token}])  # {recorded}{violation.reason}")
    elif step.unsafe is not None:
        lines.append(f"print(locs)  # unsafe in the trace: {step.unsafe}")
    else:
        lines.append("print(locs)")
    return "\n".join(lines)
