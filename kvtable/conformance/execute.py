"""Executing one property against a backend: its searches, up to ``MAX_FAILURES`` distinct failures, its verdict.

A property that does not apply to the backend (a method it needs is missing, no debug mode, or its own
``not_applicable``) is not run; examples the backend raises ``kvtable.Unsupported`` for are discarded and
counted. ``kvtable.conformance.isolation`` runs this same function in worker processes.
"""

from __future__ import annotations

import time
from functools import partial

from hypothesis.database import ExampleDatabase
from hypothesis.errors import DidNotReproduce, FlakyFailure, HypothesisException, Unsatisfiable

from kvtable.backends import NoDebugMode, missing_methods
from kvtable.conformance.budget import BudgetSpent
from kvtable.conformance.checks import Mismatch
from kvtable.conformance.core import Context, Property
from kvtable.conformance.counterexample import Blob
from kvtable.conformance.levels import DEFAULT_LEVEL
from kvtable.conformance.result import MAX_FAILURES, PropertyResult, Recording, not_applicable
from kvtable.conformance.search import Count, search

__all__ = ["RUN_BROKE", "run_property"]

RUN_BROKE = (HypothesisException, ArithmeticError, AssertionError, AttributeError, LookupError, RuntimeError,
             TypeError, ValueError)
"""What ends a property's run as an ``error`` verdict: Hypothesis refusing the run (a failed health check, an
invalid strategy, a flaky example with no failure of ours), or a bug raised in kvtable's own strategy, reference or
harness code (a backend's exceptions never get here: ``checks.judge`` makes them failures). Anything else, a
usage error (the database failed) among them, propagates."""


def run_property(prop: Property, ctx: Context, *, examples: int, seed: int, spec: str = "backend",
                 database: ExampleDatabase | None = None, shrink: bool = True,
                 level: str = DEFAULT_LEVEL, reproduce: Blob | None = None, seconds: float | None = None
                 ) -> PropertyResult:
    """Run one property for up to ``examples`` examples; on failure keep the (shrunk, unless not ``shrink``)
    example's transcript, and search on for up to ``MAX_FAILURES`` distinct failures (by clause and kind).
    With ``reproduce`` only that one example runs (a counterexample snippet re-judging itself). ``seconds``: its
    share of a ``--budget``: no new example is drawn past it (``budget.spent``), a failure is still shrunk.
    A failure's tier decides whether it fails the property at ``level`` or stays a note.
    """
    reason = _lacking(prop, ctx) or (prop.not_applicable(ctx) if prop.not_applicable is not None else None)
    if reason:
        return not_applicable(prop, reason, level)
    ctx.seen.clear()
    ctx.unsupported.clear()
    record, count = Recording(prop, ctx, spec, level), Count()
    deadline = None if seconds is None else time.monotonic() + seconds
    one = partial(search, prop, ctx, count, seed=seed, shrink=shrink, reproduce=reproduce, deadline=deadline)
    # a find run (no shrinking) and a reproduction stop at the first failure that fails at ``level`` (a note
    # below it, such as an unnamed refusal at level correct, does not end the search)
    wanted = MAX_FAILURES if shrink and reproduce is None else 1
    try:
        _searches(one, record, count, examples=examples, database=database, wanted=wanted)
    except Unsatisfiable as err:
        return record.unsatisfiable(err, count.examples, count.found_at)
    except RUN_BROKE as err:
        return record.broke(err, count.examples, count.found_at)
    return record.verdict(count.examples, count.found_at)


def _searches(one: partial[None], record: Recording, count: Count, *, examples: int,
              database: ExampleDatabase | None, wanted: int) -> None:
    """Search until ``wanted`` failures fail at the level (``MAX_FAILURES`` in all), or the examples or the budget
    run out; each search after a failure looks for a failure of another clause or kind."""
    while len(record.failures) < MAX_FAILURES and record.failing < wanted:
        left = examples - count.searched  # --examples bounds the searches together (shrinking apart)
        if left < 1:
            return
        count.start()
        try:
            # only the first search uses the database: a later one would drop the saved example it rejects
            one(examples=left, database=None if record.failures else database)
            return
        except (DidNotReproduce, BudgetSpent):  # the example of ``reproduce`` passes now; the share is spent
            return
        except (Mismatch, FlakyFailure) as caught:
            err = caught if isinstance(caught, Mismatch) else count.mismatch
            if err is None:  # flaky with no failure of ours: the run itself broke
                raise
            count.failed(err)  # where the failing example's own hook did not see it (a machine's __init__)
            record.add(err, flaky=caught is not err)
        except Unsatisfiable:
            if not record.failures:
                raise
            return  # every example left repeats a failure already reported


def _lacking(prop: Property, ctx: Context) -> str | None:
    """Why ``prop`` cannot run on this backend: the protocol methods it needs that the backend lacks."""
    backend = getattr(ctx.backend, "target", ctx.backend)
    missing = set(missing_methods(backend))
    lacking = [m for m in prop.needs if m in missing]
    if not lacking:
        return _no_debug_mode(prop, ctx)
    name = getattr(backend, "name", type(backend).__name__)
    return f"backend {name!r} has no {', '.join(lacking)}"


def _no_debug_mode(prop: Property, ctx: Context) -> str | None:
    """Why a debug-mode property cannot run: the backend's factory takes no ``debug`` (``NoDebugMode``)."""
    if not prop.debug:
        return None
    try:
        ctx.debug_backend  # noqa: B018 - built once and kept; the debug properties use it next
    except NoDebugMode as err:
        return str(err)
    return None
