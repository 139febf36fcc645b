"""Where an example's time goes, per property family: the tester's own CPU time cut into phases.

One in-process ``run_conformance`` on the torch backend with the phases timed (``time.thread_time``, exclusive:
a phase inside another is charged to the inner one only), then the same run with the index guard off, so the
guard's share is the backend time the two runs differ by (the same seed draws the same examples: the torch
backend fails nothing, so both runs take the same path). The timers wrap functions for the run and restore them.
A timed call costs the timers a few microseconds, which a small function called often (the reference's) would
otherwise be charged: that cost, measured on a timed no-op (``timer_cost``), is taken out per call, and a third run
without timers gives each family's whole CPU time per example beside the phases' sum, as a check.

Phases: ``draw`` (the property's strategy), ``backend`` (the backend's own call, the index guard's dispatch
mode around it included), ``guard`` (that mode's share of ``backend``), ``integrity`` (copying a call's inputs
and comparing them after), ``reference`` (kvtable's model: ``kvtable.reference`` and the profile's expected
values and safety oracle), ``judge`` (comparing a result with the expected one), ``property`` (the rest of the
property's code: building the calls, the transcript) and ``hypothesis`` (the rest: the engine choosing,
recording and mutating examples, and the runner's bookkeeping of each). A state machine's steps are drawn and
run by the engine: outside its backend, reference and judge, its time is ``hypothesis``. Each property runs one
example first, untimed, so what its first use costs once (imports, strategies built) is no example's.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from types import FunctionType, ModuleType
from typing import Any

PHASES = ("draw", "backend", "guard", "integrity", "reference", "judge", "property", "hypothesis")


class Clock:
    """Exclusive phase timers on the thread's CPU clock: entering a phase pauses the one it is inside."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self.entries: dict[tuple[str, str], int] = {}
        """How often each phase was entered, by the phase it was entered from ("" at the top)."""
        self._stack: list[str] = []
        self._since = 0.0

    def _charge(self) -> float:
        now = time.thread_time()
        if self._stack:
            phase = self._stack[-1]
            self.totals[phase] = self.totals.get(phase, 0.0) + now - self._since
        self._since = now
        return now

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self._charge()
        key = (self._stack[-1] if self._stack else "", name)
        self.entries[key] = self.entries.get(key, 0) + 1
        self._stack.append(name)
        try:
            yield
        finally:
            self._charge()
            self._stack.pop()

    def net(self, cost: tuple[float, float]) -> dict[str, float]:
        """The totals less what the timers themselves cost: ``cost`` is one timed call's, charged to the phase it
        is made from and to its own (``timer_cost``); a small fn timed in many calls is otherwise overstated."""
        out = dict(self.totals)
        for (outer, inner), n in self.entries.items():
            out[inner] = out.get(inner, 0.0) - n * cost[1]
            if outer:
                out[outer] = out.get(outer, 0.0) - n * cost[0]
        return {phase: max(seconds, 0.0) for phase, seconds in out.items()}

    def timed(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with self.phase(name):
                return fn(*args, **kwargs)
        functools.update_wrapper(run, fn, assigned=(), updated=())  # sets run.__wrapped__ alone
        return run


def _nothing() -> None:
    return None


def timer_cost(calls: int = 20000, trials: int = 5) -> tuple[float, float]:
    """What one timed call costs the timers (CPU seconds), charged to the phase it is made from and to its own: a
    timed no-op called in a phase, less the same loop calling it untimed; the least of ``trials`` (a floor)."""
    outer, inner = [], []
    for _ in range(trials):
        clock = Clock()
        timed = clock.timed("inner", _nothing)
        with clock.phase("outer"):
            for _ in range(calls):
                timed()
        start = time.thread_time()
        for _ in range(calls):
            _nothing()
        plain = (time.thread_time() - start) / calls
        outer.append(clock.totals["outer"] / calls - plain)
        inner.append(clock.totals["inner"] / calls)
    return max(min(outer), 0.0), max(min(inner), 0.0)


@contextmanager
def _swapped(replacements: dict[int, tuple[Any, Any]], owners: Sequence[Any]) -> Iterator[None]:
    """Every attribute of ``owners`` (modules, classes) that is one of the originals (by id) replaced for the
    block: a name imported with ``from x import f`` is a binding of its own, so each one is swapped."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for owner in owners:
            for name, value in list(vars(owner).items()):
                if id(value) in replacements and replacements[id(value)][0] is value:
                    undo.append((owner, name, value))
                    setattr(owner, name, replacements[id(value)][1])
        yield
    finally:
        for owner, name, value in reversed(undo):
            setattr(owner, name, value)


def _kvtable_modules() -> list[ModuleType]:
    return [m for name, m in list(sys.modules.items()) if name.startswith("kvtable.") and m is not None]


def _reference_functions(clock: Clock) -> tuple[dict[int, tuple[Any, Any]], list[Any]]:
    """kvtable's model, timed as ``reference``: the functions and class methods of ``kvtable.reference`` and
    the profile's methods (its expected values and its safety oracle)."""
    from kvtable.backends.profiles import Profile

    replacements: dict[int, tuple[Any, Any]] = {}
    classes: list[Any] = [Profile]
    for module in _kvtable_modules():
        if not module.__name__.startswith("kvtable.reference"):
            continue
        for value in vars(module).values():
            if getattr(value, "__module__", None) != module.__name__:
                continue
            if isinstance(value, FunctionType):
                replacements[id(value)] = (value, clock.timed("reference", value))
            elif isinstance(value, type):
                classes.append(value)
    for cls in classes:
        for value in vars(cls).values():
            if isinstance(value, FunctionType) and not value.__name__.startswith("__"):
                replacements[id(value)] = (value, clock.timed("reference", value))
    return replacements, classes


@contextmanager
def instrumented(clock: Clock, *, guard: bool = True) -> Iterator[None]:
    """The phases timed on ``clock`` for the block (and the index guard off where ``guard`` is False)."""
    from kvtable.conformance import checks, integrity, watch

    inputs_cls, guard_cls, judge = watch.Inputs, watch.IndexGuard, checks.judge

    class TimedInputs(integrity.Inputs):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            with clock.phase("integrity"):
                super().__init__(*args, **kwargs)

        def changed(self) -> Any:
            with clock.phase("integrity"):
                return super().changed()

    @contextmanager
    def timed_guard(on_hit: Callable[[Any], None]) -> Iterator[None]:
        with clock.phase("backend"), guard_cls(on_hit) if guard else nullcontext():
            yield

    def timed_judge(clause: str, what: str, expected: Any, call: Callable[[], Any],
                    compare: Callable[[Any, Any], None], **kwargs: Any) -> Any:
        return judge(clause, what, expected, call, clock.timed("judge", compare), **kwargs)

    replacements, classes = _reference_functions(clock)
    replacements[id(judge)] = (judge, timed_judge)
    replacements[id(checks.check_tensor)] = (checks.check_tensor, clock.timed("judge", checks.check_tensor))
    watch.Inputs, watch.IndexGuard = TimedInputs, timed_guard
    try:
        with _swapped(replacements, [*_kvtable_modules(), *classes]):
            yield
    finally:
        watch.Inputs, watch.IndexGuard = inputs_cls, guard_cls


def _timed_property(prop: Any, clock: Clock) -> Any:
    """``prop`` with its strategy's draw and its check timed (a stateful property: its whole run)."""
    from hypothesis import strategies as st

    if prop.strategy is None or prop.check is None:
        return prop

    @st.composite
    def drawn(draw: st.DrawFn) -> Any:
        with clock.phase("draw"):
            return draw(prop.strategy)

    return dataclasses.replace(prop, strategy=drawn(), check=clock.timed("property", prop.check))


def family(name: str) -> str:
    """A property's family: the part of its name before ``/`` (the lone location properties: ``locs``)."""
    return name.split("/")[0] if "/" in name else "locs"


def profile_run(examples: int, seed: int = 0, *, cost: tuple[float, float] | None, guard: bool = True,
                properties: Sequence[Any] | None = None) -> dict[str, dict[str, float]]:
    """Per family: examples run and CPU seconds per phase of one ``run_conformance`` on the torch backend, the
    timers' own ``cost`` (``timer_cost``) taken out (None: no timers, the whole CPU time as ``untimed``)."""
    from kvtable.conformance.context import make_context
    from kvtable.conformance.execute import run_property
    from kvtable.conformance.properties import PROPERTIES

    chosen = PROPERTIES if properties is None else properties
    ctx, spec = make_context("torch")
    out: dict[str, dict[str, float]] = {}
    for prop in chosen:
        run_property(prop, ctx, examples=1, seed=seed, spec=spec)  # warm: first-use costs are no example's
        if cost is not None:
            clock = Clock()
            with instrumented(clock, guard=guard), clock.phase("hypothesis"):
                result = run_property(_timed_property(prop, clock), ctx, examples=examples, seed=seed, spec=spec)
            spent = clock.net(cost)
        else:
            start = time.thread_time()
            result = run_property(prop, ctx, examples=examples, seed=seed, spec=spec)
            spent = {"untimed": time.thread_time() - start}
        if not result.applicable:
            continue
        row = out.setdefault(family(prop.name), {"examples": 0.0, "properties": 0.0})
        row["examples"] += result.examples
        row["properties"] += 1
        for phase, seconds in spent.items():
            row[phase] = row.get(phase, 0.0) + seconds
    return out


PROFILE_REPEATS = 3


def profile_table(examples: int, seed: int = 0, properties: Sequence[Any] | None = None,
                  repeats: int = PROFILE_REPEATS) -> tuple[list[str], list[list[Any]]]:
    """The profile table: per family (and in all), examples and milliseconds of CPU per example in each phase,
    the guard's share from runs without it, and beside their sum the CPU of runs without timers; each figure the
    median of ``repeats`` interleaved runs (a collection or a stall lands in one phase of one run), all after a
    pass that warms what the first use of an example's shapes fills."""
    profile_run(examples, seed, cost=None, properties=properties)  # warm: the Triton interpreter's caches (routes/*
    # run 1.7x slower in the first pass over their examples than in the next) would favour the later runs
    cost = timer_cost()
    runs: tuple[list[dict[str, dict[str, float]]], ...] = ([], [], [])
    for _ in range(repeats):
        runs[0].append(profile_run(examples, seed, cost=cost, properties=properties))
        runs[1].append(profile_run(examples, seed, cost=cost, guard=False, properties=properties))
        runs[2].append(profile_run(examples, seed, cost=None, properties=properties))
    guarded, bare, untimed = (_medians(run) for run in runs)
    columns = ["family", "properties", "examples", "ms/example", "untimed ms/example", *PHASES]
    rows: list[list[Any]] = []
    total: dict[str, float] = {}
    for name in sorted(guarded):
        row = dict(guarded[name])
        row["guard"] = max(0.0, row.get("backend", 0.0) - bare.get(name, {}).get("backend", 0.0))
        row["backend"] = row.get("backend", 0.0) - row["guard"]
        row["untimed"] = untimed.get(name, {}).get("untimed", 0.0) * row["examples"] / max(
            untimed.get(name, {}).get("examples", 0.0), 1.0)  # per example of its own run, over this run's
        for key, value in row.items():
            total[key] = total.get(key, 0.0) + value
        rows.append(_row(name, row))
    rows.append(_row("all", total))
    return columns, rows


def _medians(runs: Sequence[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Per family and figure, the median over the runs (a figure a run lacks counts as 0)."""
    out: dict[str, dict[str, float]] = {}
    for name in runs[0]:
        keys = {key for run in runs for key in run.get(name, {})}
        out[name] = {key: statistics.median(run.get(name, {}).get(key, 0.0) for run in runs) for key in keys}
    return out


def _row(name: str, row: dict[str, float]) -> list[Any]:
    n = max(row.get("examples", 0.0), 1.0)
    phases = [1000 * row.get(p, 0.0) / n for p in PHASES]
    return [name, int(row.get("properties", 0)), int(row.get("examples", 0)), round(sum(phases), 2),
            round(1000 * row.get("untimed", 0.0) / n, 2), *(round(p, 2) for p in phases)]
