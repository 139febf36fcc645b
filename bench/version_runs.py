"""The tester's speed against earlier commits: the same ``fuzz`` and ``conform`` runs on the torch backend, each in
a fresh process of its own checkout's interpreter, interleaved round by round.

``kvtable bench --baseline PYTHON`` names the interpreter of another checkout's venv (``git worktree add
../base <commit>`` then ``pip install -e`` there); its commit is read from its checkout. Each round runs every
candidate once (this checkout first, then each baseline); a run reports the examples it ran and its CPU and wall
seconds after loading (the start-up apart). The ratio of a round is this checkout's examples per CPU second over
the baseline's: sample i of each saw the same machine, so a loaded machine slows both alike.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RUN = r"""
import json, sys, time
kind, examples, variant = sys.argv[1], int(sys.argv[2]), sys.argv[3] if len(sys.argv) > 3 else ""
cpu0, wall0 = time.process_time(), time.perf_counter()
import kvtable
from kvtable.conformance.properties import PROPERTIES
chosen = {}
if variant:  # this checkout only: each check a no-op ("bare": one integer drawn), the state machines as they are
    import dataclasses
    from hypothesis import strategies as st
    def nothing(ctx, example): pass
    swap = {"check": nothing, **({"strategy": st.integers()} if variant == "bare" else {})}
    chosen = {"properties": [p if p.stateful else dataclasses.replace(p, **swap) for p in PROPERTIES]}
if kind == "fuzz":
    from kvtable.conformance.fuzz import fuzz
    run = lambda: fuzz("torch", examples=examples, seed=0, database=None, **chosen)
else:
    from kvtable.conformance.runner import run_conformance
    run = lambda: run_conformance("torch", examples=examples, seed=0, **chosen)
cpu1, wall1 = time.process_time(), time.perf_counter()
report = run()
json.dump({"kvtable": kvtable.__file__, "examples": sum(r.examples for r in report.results),
           "properties": len(report.results), "passed": report.passed, "cpu_s": time.process_time() - cpu1,
           "wall_s": time.perf_counter() - wall1, "startup_cpu_s": cpu1 - cpu0,
           "per_property": {r.property: [r.seconds, r.examples] for r in report.results}}, sys.stdout)
"""
"""What each candidate process runs: only APIs every compared commit has (no example database: fresh draws), but
for a ``VARIANTS`` run, which only this checkout makes."""

VARIANTS = {"unchecked": "this, checks removed", "bare": "this, checks and draws removed"}
"""This checkout's runs with less of the tester, for the ceiling on its speed: each property's check a no-op (a
state machine's steps draw and check as one, so the machines run as they are); "bare": each strategy also one
``st.integers()``, so what is left of the stateless properties is Hypothesis' engine and kvtable's runner."""


def run_once(python: str, kind: str, examples: int, timeout: float = 3600, variant: str = "") -> dict[str, Any]:
    """One run of ``kind`` (``fuzz``: ``examples`` in all; ``conform``: per property) in ``python``'s checkout
    (``variant``: one of ``VARIANTS``)."""
    python = os.path.abspath(python)  # the run's cwd is elsewhere: a relative path would name another file there
    done = subprocess.run([python, "-c", RUN, kind, str(examples), variant], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(python).resolve().parent)
    if done.returncode != 0:
        raise RuntimeError(f"{python} {kind}: exit {done.returncode}: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def commit_of(package_file: str) -> str | None:
    """The commit of the checkout a ``kvtable/__init__.py`` lives in (None outside git)."""
    root = Path(package_file).resolve().parent.parent
    done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else None


def compare(baselines: Sequence[str], kind: str, examples: int, rounds: int, variants: Sequence[str] = ()
            ) -> dict[str, Any]:
    """Every candidate's runs, interleaved; per candidate its examples/s and, per baseline, the ratio of rounds;
    ``variants``: this checkout's ``VARIANTS`` runs too, each a candidate with its ``variant`` named."""
    candidates = [(sys.executable, ""), *((b, "") for b in baselines), *((sys.executable, v) for v in variants)]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {c: [] for c in candidates}
    for _ in range(rounds):
        for python, variant in candidates:
            runs[python, variant].append(run_once(python, kind, examples, variant=variant))
    out: dict[str, Any] = {"kind": kind, "examples": examples, "rounds": rounds, "candidates": []}
    own = [r["examples"] / r["cpu_s"] for r in runs[sys.executable, ""]]
    for (python, variant), done in runs.items():
        rates = [r["examples"] / r["cpu_s"] for r in done]
        walls = [r["examples"] / r["wall_s"] for r in done]
        ratios = [a / b for a, b in zip(own, rates, strict=True)]
        out["candidates"].append({
            "python": os.path.relpath(python), "commit": commit_of(done[0]["kvtable"]),
            "this": python == sys.executable and not variant, "variant": variant,
            "examples": done[0]["examples"], "properties": done[0]["properties"],
            "passed": all(r["passed"] for r in done),
            "cpu_s": _spread([r["cpu_s"] for r in done]), "startup_cpu_s": _spread([r["startup_cpu_s"] for r in done]),
            "examples_per_cpu_s": _spread(rates), "rounds_examples_per_cpu_s": rates,
            "examples_per_wall_s": _spread(walls), "this_over_it": _spread(ratios),
            "per_property": _summed([r["per_property"] for r in done])})
    return out


def family_rows(candidates: Sequence[dict[str, Any]], family: Callable[[str], str]
                ) -> tuple[list[str], list[list[Any]]]:
    """Per property family: each candidate's properties and wall ms per example (its rounds summed), and this
    checkout's speed over each baseline's on the properties both have (>1: faster now)."""
    this = next(c for c in candidates if c["this"])
    others = [c for c in candidates if not c["this"] and not c.get("variant")]
    columns = ["family", "this: properties", "this: ms/example"]
    for c in others:
        columns += [f"{c['commit']}: properties", f"{c['commit']}: ms/example", f"this / {c['commit']} (shared)"]
    names = sorted({family(p) for c in candidates for p in c["per_property"]})
    rows = []
    for name in [*names, "all"]:
        def timed(c: dict[str, Any], among: set[str] | None = None, name: str = name) -> list[list[float]]:
            return [v for p, v in c["per_property"].items()
                    if name in ("all", family(p)) and (among is None or p in among)]
        row: list[Any] = [name, len(timed(this)), _ms(timed(this))]
        for c in others:
            shared = set(this["per_property"]) & set(c["per_property"])
            mine, theirs = _ms(timed(this, shared)), _ms(timed(c, shared))
            row += [len(timed(c)), _ms(timed(c)), round(theirs / mine, 2) if mine and theirs else None]
        rows.append(row)
    return columns, rows


def _ms(timed: Sequence[Sequence[float]]) -> float | None:
    """Milliseconds per example over ``[seconds, examples]`` pairs (None without examples)."""
    examples = sum(e for _, e in timed)
    return round(1000 * sum(s for s, _ in timed) / examples, 2) if examples else None


def _summed(rounds: Sequence[dict[str, list[float]]]) -> dict[str, list[float]]:
    """Each property's seconds and examples summed over the rounds."""
    out: dict[str, list[float]] = {}
    for per in rounds:
        for name, (seconds, examples) in per.items():
            got = out.setdefault(name, [0.0, 0])
            got[0] += seconds
            got[1] += examples
    return out


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}
