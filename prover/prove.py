"""``kvtable prove``: discharge every proof obligation with z3 and print one table row as each finishes.

Exit status 0 only if every obligation passed: proved where it must be proved, refuted with a concrete
counterexample where it drops a precondition on purpose; 1 if any got the other verdict; otherwise 4
(``EXIT_INCONCLUSIVE``) if z3 reached its resource limit on any ("unknown": no verdict about the contract).
Limits are z3 resource counts (``--rlimit``), so a run gives the same verdicts on any machine at any load;
a wall-clock cap (``--timeout``) guards only against a hang: an obligation that reaches it is "too slow" (exit
5, ``EXIT_TOO_SLOW``, where nothing failed): the machine ran out of time, never a verdict, never "unknown".
"""

from __future__ import annotations

import argparse
import fnmatch
import inspect
import json
import multiprocessing
import os
import re
import signal
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection, wait
from typing import Any, TextIO

from kvtable import interrupts
from kvtable.argtypes import positive_float, positive_int
from kvtable.exitcodes import EXIT_FAILED, EXIT_INCONCLUSIVE, EXIT_PASSED, EXIT_TOO_SLOW, UsageError
from kvtable.prover.bindings.binding import Binding, load_binding, load_object
from kvtable.prover.bindings.check import check_binding
from kvtable.prover.bindings.coverage import output_stores
from kvtable.prover.bindings.queries import symbolic_run
from kvtable.prover.obligations.kernels import KernelObligation, kernel_obligations, kernel_outcome, preload
from kvtable.prover.obligations.registry import OBLIGATIONS, Obligation
from kvtable.prover.solver.discharge import DEFAULT_RLIMIT, HANG_GUARD_MS, Outcome, discharge
from kvtable.prover.solver.intblast import UnsupportedOperation
from kvtable.prover.symexec.run import is_jit, python_function
from kvtable.prover.symexec.tl import NotCompilable
from kvtable.prover.symexec.values import KernelNotSupported
from kvtable.spec.clauses import clause_label

HANG_GUARD_S = HANG_GUARD_MS / 1000
DEFAULT_WORKERS = min(2, os.cpu_count() or 1)
"""Obligations solved at once by default: two, on a machine with two cores or more."""
SMALL_VALUES = 64
"""Expected counterexamples are looked for among values in [-64, 64] first, to read easily."""
ASSUMED = "holds under the stated assumptions"
"""The verdict of a proof that needs the binding's ``assumes`` (prover/bindings/assumptions.py)."""
NO_VERDICT = ("unknown", "too slow")
"""Statuses that say nothing about the contract: z3's resource limit, and the machine's wall clock."""
GRACE_S = 10.0
"""Beyond its hang guard, how long an isolated obligation may take (building, checking) before it is killed."""


@dataclass(frozen=True)
class Limits:
    """What an obligation may spend: z3 resource units (the deterministic limit) and a wall-clock hang guard."""

    rlimit: int = DEFAULT_RLIMIT
    guard_s: float = HANG_GUARD_S


@dataclass(frozen=True)
class Result:
    """One obligation and what z3 made of it."""

    obligation: Obligation
    outcome: Outcome
    seconds: float

    @property
    def passed(self) -> bool:
        return self.outcome.status == self.obligation.expect

    @property
    def verdict(self) -> str:
        status, expect = self.outcome.status, self.obligation.expect
        if status == "counterexample" and expect == "counterexample":
            return "counterexample (expected)"
        if status == "proved" and expect == "counterexample":
            return "proved (counterexample expected)"
        if status == "proved" and self.outcome.assumed:
            return ASSUMED
        return status


def _outcome(obligation: Obligation, limits: Limits) -> Outcome:
    small = SMALL_VALUES if obligation.expect == "counterexample" else None
    guard_ms = int(limits.guard_s * 1000)
    try:
        if isinstance(obligation, KernelObligation):
            return kernel_outcome(obligation, guard_ms, SMALL_VALUES, rlimit=limits.rlimit)
        return discharge(obligation.build(), guard_ms, rlimit=limits.rlimit, small=small)
    except (UnsupportedOperation, KernelNotSupported) as exc:
        return Outcome("unknown", 0.0, detail=str(exc))


def _child(obligation: Obligation, limits: Limits, conn: Connection) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the parent stops this one
    try:
        conn.send(_outcome(obligation, limits))
    except Exception as exc:  # report the builder's bug in the table rather than lose it
        conn.send(Outcome("unknown", 0.0, detail=f"error: {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


class _Forked:
    """One obligation discharged in a forked process: a fresh z3 term table (the answer cannot depend on which
    obligations ran before) and a hard stop if it overruns its hang guard."""

    def __init__(self, obligation: Obligation, limits: Limits) -> None:
        context = multiprocessing.get_context("fork")
        self.obligation = obligation
        self.receive, send = context.Pipe(duplex=False)
        self.process = context.Process(target=_child, args=(obligation, limits, send), daemon=True)
        self.process.start()
        send.close()
        self.start = time.perf_counter()
        self.cap = limits.guard_s + GRACE_S

    def left(self) -> float:
        return self.cap - (time.perf_counter() - self.start)

    def result(self) -> Result:
        """The outcome sent, or unknown if the process died or (not ready) overran its cap; the process ends."""
        try:
            if self.receive.poll(0):
                outcome = self.receive.recv()
            else:
                outcome = Outcome("too slow", self.cap, detail=f"the machine was too slow: killed by the hang guard"
                                  f" after {self.cap:g} s of wall clock (not a verdict; rerun on a less loaded"
                                  " machine or raise --timeout)")
        except EOFError:
            self.process.join()
            outcome = Outcome("unknown", 0.0, detail=f"the prover process died (exit code {self.process.exitcode})")
        finally:
            self.receive.close()
            if self.process.is_alive():
                self.process.kill()
            self.process.join()
        return Result(self.obligation, outcome, time.perf_counter() - self.start)


def prove_one(obligation: Obligation, limits: Limits = Limits(), *, isolate: bool | None = None) -> Result:
    """Build the obligation's query and discharge it within ``limits``.

    ``isolate`` (default: wherever ``fork`` exists) runs it in a forked process.
    """
    if isolate is None:
        isolate = "fork" in multiprocessing.get_all_start_methods()
    if isolate:
        forked = _Forked(obligation, limits)
        forked.receive.poll(forked.cap)
        return forked.result()
    start = time.perf_counter()
    outcome = _outcome(obligation, limits)
    return Result(obligation, outcome, time.perf_counter() - start)


def prove(obligations: Iterable[Obligation], limits: Limits = Limits(),
          on_result: Callable[[Result], None] | None = None, *, isolate: bool | None = None,
          workers: int = 1) -> list[Result]:
    """Discharge ``obligations``, calling ``on_result`` for each in order as soon as it and those before it are
    done; isolated (forked) ones run ``workers`` at a time, each its own process with its own resource limit, so
    the verdicts do not depend on ``workers``."""
    obligations = list(obligations)
    preload(obligations)
    if isolate is None:
        isolate = "fork" in multiprocessing.get_all_start_methods()
    if not isolate:
        workers = 1
    done: dict[int, Result] = {}
    results: list[Result] = []
    running: dict[int, _Forked] = {}
    pending = list(enumerate(obligations))
    while pending or running:
        interrupts.check()  # a safe point: a Ctrl-C a callback swallowed still ends the run
        while pending and len(running) < workers:
            number, obligation = pending.pop(0)
            if isolate:
                running[number] = _Forked(obligation, limits)
            else:
                done[number] = prove_one(obligation, limits, isolate=False)
        if running:
            timeout = max(0.0, min(f.left() for f in running.values()))
            ready = wait([f.receive for f in running.values()], timeout)
            for number, forked in list(running.items()):
                if forked.receive in ready or forked.left() <= 0:
                    done[number] = running.pop(number).result()
        while len(results) in done:
            results.append(done.pop(len(results)))
            if on_result is not None:
                on_result(results[-1])
    return results


def select(patterns: Sequence[str] | None, obligations: Sequence[Obligation] = OBLIGATIONS) -> list[Obligation]:
    """The obligations matching any of ``patterns`` (names or shell globs like ``T5.*``), in registry order."""
    if not patterns:
        return list(obligations)
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(ob.name, p) for ob in obligations)]
    if unmatched:
        raise KeyError(f"no proof obligation matches {unmatched}; known: {[ob.name for ob in obligations]}")
    return [ob for ob in obligations if any(fnmatch.fnmatchcase(ob.name, p) for p in patterns)]


# Output ------------------------------------------------------------------------------------------
def format_model(model: Iterable[tuple[str, int | bool]]) -> str:
    """``seq_len=0, page_size=1, ...``: a counterexample's values, in the order the query gives them."""
    return ", ".join(f"{name}={value}" for name, value in model)


ACCESS = re.compile(r"^(load|store) (\d+) (\S+) (.+)$")
"""A kernel counterexample's per-access value: ``store 8 out@path1 index[0]`` (the access, its field)."""
SHOWN_FIELDS = ("value", "expected", "in range", "row", "position", "column", "page", "slot")
"""The fields a store's line names after its element, in this order, where the model has them."""


def kernel_model_text(model: Iterable[tuple[str, int | bool]]) -> list[str]:
    """A kernel counterexample as a reader wants it: the inputs (of tensor elements, those an access reads; no
    masked-off loads' free values), then one line per access that happens (its mask on): the element it reads or
    writes, its line, and for a store what it stored and what the clause says. ``--show-counterexamples`` prints
    every value as the query has them."""
    inputs: list[tuple[str, int | bool]] = []
    accesses: dict[tuple[str, int, str], dict[str, int | bool]] = {}
    for name, value in model:
        found = ACCESS.match(name)
        if found is None:
            if not name.startswith("undefined#"):
                inputs.append((name, value))
            continue
        kind, number, where, field_name = found.groups()
        accesses.setdefault((kind, int(number), where), {})[field_name] = value
    happening = {key: fields for key, fields in accesses.items() if fields.get("mask", True)}
    element = {key: _element(key[2].partition("@")[0], f) for key, f in happening.items()}
    read = set(element.values())
    lines = [", ".join(f"{name}={value}" for name, value in inputs if "[" not in name or name in read)]
    for (kind, number, where), fields in happening.items():
        path = where.partition("@")[2]
        line = f" (line {fields['line']})" if "line" in fields else ""
        text = f"{kind} {number} {element[kind, number, where]}{line}{f' on {path}' if path else ''}"
        said = [f"{f} {fields[f]}" for f in SHOWN_FIELDS if f in fields]
        lines.append(text + (": " + ", ".join(said) if said else ""))
    return lines


def _element(tensor: str, fields: dict[str, int | bool]) -> str:
    """``tensor[i, j]``, the access's element as the model names a tensor's element."""
    return f"{tensor}[{', '.join(str(fields[f'index[{k}]']) for k in range(4) if f'index[{k}]' in fields)}]"


class Table:
    """The progress table: a header, then one row per obligation as it finishes, then a summary."""

    def __init__(self, obligations: Sequence[Obligation], out: TextIO, show_counterexamples: bool,
                 times: bool = True) -> None:
        self.out = out
        self.show_counterexamples = show_counterexamples
        self.times = times
        self.name_width = max([len("obligation"), *(len(ob.name) for ob in obligations)])
        self.clause_width = max([len("clause"), *(len(clause_label(ob.clause)) for ob in obligations)])
        self.result_width = len(ASSUMED)

    def header(self) -> None:
        self._line("obligation", "clause", "result", "time")

    def row(self, result: Result) -> None:
        ob, outcome = result.obligation, result.outcome
        self._line(ob.name, clause_label(ob.clause), result.verdict, f"{result.seconds:6.2f}s" if self.times else "")
        replayed = isinstance(ob, KernelObligation) and outcome.status == "counterexample"
        if outcome.assumed:
            self.out.write("    assumes: " + "; ".join(outcome.assumed) + "\n")
        if outcome.detail and (not result.passed or (replayed and self.show_counterexamples)):
            self.out.write("    why: " + outcome.detail.replace("\n", "\n         ") + "\n")
        if outcome.model and self.show_counterexamples:
            self.out.write(f"    counterexample: {format_model(outcome.model)}\n")
        elif outcome.model and not result.passed:
            text = kernel_model_text(outcome.model) if isinstance(ob, KernelObligation) else [
                format_model(outcome.model)]
            self.out.write("    counterexample: " + "\n      ".join(text) + "\n")
        self.out.flush()

    def summary(self, results: Sequence[Result], seconds: float) -> None:
        unknown = [r.obligation.name for r in results if r.outcome.status == "unknown"]
        slow = [r.obligation.name for r in results if r.outcome.status == "too slow"]
        failed = [r.obligation.name for r in results if not r.passed and r.outcome.status not in NO_VERDICT]
        expected = sum(r.passed and r.obligation.expect == "counterexample" for r in results)
        proved = sum(r.passed and r.obligation.expect == "proved" for r in results)
        line = (f"{len(results)} obligations: {proved} proved, {expected} counterexamples found as expected, "
                f"{len(failed)} failed, {len(unknown)} unknown" + (f", {len(slow)} too slow" if slow else "")
                + (f" ({seconds:.2f}s)" if self.times else ""))
        if failed:
            line += "\nfailed: " + ", ".join(failed)
        if unknown:
            line += "\nunknown (a limit was reached or a shape is not modelled: no verdict): " + ", ".join(unknown)
        if slow:
            line += ("\ntoo slow (the wall-clock hang guard ran out on this machine: no verdict, not unknown): "
                     + ", ".join(slow))
        self.out.write(line + "\n")

    def _line(self, name: str, clause: str, result: str, seconds: str) -> None:
        line = f"{name:<{self.name_width}}  {clause:<{self.clause_width}}  {result:<{self.result_width}}"
        self.out.write((f"{line}  {seconds:>7}" if self.times else line.rstrip()) + "\n")


def to_json(results: Sequence[Result], seconds: float | None, limits: Limits) -> dict[str, Any]:
    """The machine-readable report of ``--json`` (``seconds`` None: no wall-clock times in it at all)."""
    rows = [{
        "name": r.obligation.name,
        "clause": r.obligation.clause,
        "statement": r.obligation.statement,
        "expect": r.obligation.expect,
        "status": r.outcome.status,
        "result": r.verdict,
        "passed": r.passed,
        "work": r.outcome.work,
        "detail": r.outcome.detail,
        "assumed": list(r.outcome.assumed),
        "counterexample": dict(r.outcome.model) if r.outcome.status == "counterexample" else None,
    } | ({} if seconds is None else {"seconds": round(r.seconds, 4)}) for r in results]
    failed = sum(not r.passed for r in results)
    summary = {"total": len(results), "passed": len(results) - failed, "failed": failed,
               "unknown": sum(r.outcome.status == "unknown" for r in results),
               "too_slow": sum(r.outcome.status == "too slow" for r in results),
               "rlimit": limits.rlimit, "hang_guard_s": limits.guard_s}
    if seconds is not None:
        summary["seconds"] = round(seconds, 3)
    return {"obligations": rows, "summary": summary}


def user_kernel_obligations(binding: str | None, kernel: str | None) -> tuple[Obligation, ...]:
    """``--binding`` (and ``--kernel``): the in-bounds, agreement and safety obligations of a user's kernel."""
    if not binding:
        raise ValueError("--kernel needs --binding: which argument is the table, the lengths, the output, the clause")
    loaded = load_binding(binding)
    if kernel:
        loaded = replace(loaded, kernel=load_object(kernel))
    refuse_unprovable(loaded)
    return kernel_obligations(loaded)


def refuse_unprovable(binding: Binding) -> None:
    """Before any solving: a kernel that is not ``@triton.jit``, a binding that does not fit it
    (``check_binding``), a kernel the executor cannot run on the binding, or one whose run stores nothing into
    the binding's output raises (``KernelNotSupported``, ``ValueError``: exit 2)."""
    kernel = binding.kernel_object()
    if not is_jit(kernel):
        raise KernelNotSupported(f"{getattr(kernel, '__qualname__', kernel)!r} is not a @triton.jit function")
    parameters = inspect.signature(python_function(kernel)).parameters
    check_binding(binding, list(parameters), {n for n, p in parameters.items() if p.default is not p.empty})
    try:
        launch, trace = symbolic_run(binding)
    except NotCompilable as exc:  # name the binding's key that gave the block its length
        keys = ", ".join(f"constexprs.{name} = {value}" for name, value in binding.constexprs.items()
                         if value == exc.length)
        raise KernelNotSupported(f"{exc} (from the binding: {keys})" if keys else str(exc)) from None
    if not output_stores(launch, trace):
        raise KernelNotSupported(f"{binding.label}: the kernel stores nothing into {binding.roles.get('out')!r},"
                                 " the binding's output, so it has nothing to prove")


# The subcommand ----------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--show-counterexamples", action="store_true",
                        help="print the concrete values of every counterexample, expected ones included")
    parser.add_argument("--json", action="store_true", help="print one JSON report instead of the table")
    parser.add_argument("--only", action="append", metavar="NAME",
                        help="discharge only obligations matching NAME (a name or a glob like 'T5.*');"
                             " may be repeated")
    parser.add_argument("--binding", metavar="FILE",
                        help="prove a Triton kernel of yours: a binding (FILE.toml, FILE.py:NAME or pkg.mod:NAME)"
                             " naming its tensors, lengths, page sizes, output and clause; only its obligations run")
    parser.add_argument("--kernel", metavar="MODULE:NAME",
                        help="with --binding: the @triton.jit kernel to prove, instead of the binding's own")
    parser.add_argument("--workers", type=positive_int, default=DEFAULT_WORKERS, metavar="N",
                        help="obligations solved at once, each in its own process with its own resource limit (the"
                             f" verdicts do not depend on it; default {DEFAULT_WORKERS})")
    parser.add_argument("--rlimit", type=positive_int, default=DEFAULT_RLIMIT, metavar="UNITS",
                        help="z3 resource units per question (premises, each step, each part of a goal) before its"
                             " obligation is unknown (exit 4);"
                             " deterministic, unlike time: the same verdicts on any machine and load"
                             f" (default {DEFAULT_RLIMIT})")
    parser.add_argument("--timeout", type=positive_float, default=HANG_GUARD_S, metavar="SECONDS",
                        help="wall-clock cap per obligation, a guard against a hang only: past it the obligation is"
                             f" 'too slow' (exit 5), never unknown nor a verdict (default {HANG_GUARD_S:g})")
    parser.add_argument("--no-times", action="store_true",
                        help="leave wall-clock times out of the table and the JSON, so two runs of the same"
                             " obligations print the same bytes at any load")


def run(args: argparse.Namespace, obligations: Sequence[Obligation] = OBLIGATIONS) -> int:
    """Discharge the selected obligations; 0 if all passed, 1 if any got the wrong verdict, else 4 if any is
    unknown; ``--only`` matching none, or a ``--binding`` that does not load, is a ``UsageError`` (exit 2)."""
    if getattr(args, "binding", None) or getattr(args, "kernel", None):
        try:
            obligations = user_kernel_obligations(args.binding, args.kernel)
        except (ValueError, ImportError, KernelNotSupported) as exc:
            raise UsageError(str(exc)) from None
    try:
        chosen = select(args.only, obligations)
    except KeyError as exc:
        raise UsageError(exc.args[0]) from None
    limits = Limits(args.rlimit, args.timeout)
    start = time.perf_counter()
    if args.json:
        results = prove(chosen, limits, workers=args.workers)
        report = to_json(results, None if args.no_times else time.perf_counter() - start, limits)
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        table = Table(chosen, sys.stdout, args.show_counterexamples, times=not args.no_times)
        table.header()
        results = prove(chosen, limits, on_result=table.row, workers=args.workers)
        table.summary(results, time.perf_counter() - start)
    return exit_status(results)


def exit_status(results: Sequence[Result]) -> int:
    """1 if any obligation got a verdict other than its expected one, else 4 if any is unknown, else 5 if any was
    too slow for this machine's wall clock, else 0."""
    if any(not r.passed and r.outcome.status not in NO_VERDICT for r in results):
        return EXIT_FAILED
    if any(r.outcome.status == "unknown" for r in results):
        return EXIT_INCONCLUSIVE
    return EXIT_TOO_SLOW if any(r.outcome.status == "too slow" for r in results) else EXIT_PASSED
