"""``kvtable zoo``: the conformance suite (and z3, where a bug is a formula) against every known-engine-bug mutant.

Prints one row per bug (the clause that caught it, how, after how many examples, how long), then each
shrunk counterexample as a replayable snippet. Exits 0 only when every entry is caught by the clause
it names; with ``--mutants`` the source-level mutants of impl/ must all be killed too.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from kvtable import interrupts
from kvtable.argtypes import positive_int
from kvtable.console import wants_progress
from kvtable.declared import declared
from kvtable.exitcodes import EXIT_FAILED, EXIT_PASSED, UsageError

if TYPE_CHECKING:
    from kvtable.zoo.entries import Entry
    from kvtable.zoo.hunt import Baseline
    from kvtable.zoo.run import Verdict

NVIDIA_DEVICE = Path("/dev/nvidiactl")
"""Present wherever an NVIDIA driver is loaded: without it no CUDA device exists, and torch need not be asked."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", nargs="*", metavar="BUG", help="entries to run (default: all)")
    parser.add_argument("--examples", type=positive_int, default=None,
                        help="examples per property (default: each entry's own budget, 10 for most)")
    parser.add_argument("--seed", type=int, default=0, help="hypothesis seed (default 0)")
    parser.add_argument("--seeds", type=positive_int, default=None, metavar="N",
                        help="run each entry at seeds 0..N-1; an entry is caught only if caught at every seed")
    parser.add_argument("--full", action="store_true",
                        help="run every property against each entry, not only those of the clause it names")
    parser.add_argument("--no-shrink", action="store_true", help="skip shrinking (faster; raw counterexamples)")
    parser.add_argument("--mutants", action="store_true", help="also run the source-level mutants of impl/")
    parser.add_argument("--quiet", action="store_true", help="tables only, no counterexamples")
    parser.add_argument("--no-progress", action="store_true",
                        help="no per-entry lines on stderr (there are none anyway when stderr is not a terminal)")
    parser.add_argument("--workers", type=positive_int, default=1, metavar="N",
                        help="spread the entries over N worker processes (default 1: this process)")
    parser.add_argument("--device", default="cpu",
                        help="device the mutants run on (default cpu; cuda hands the runners device-side lengths)")


def check_device(device: str) -> None:
    """The mutants' device must exist here: ``--device cuda`` on a machine without CUDA is a usage error (torch is
    imported only where an NVIDIA driver is present to ask)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise UsageError(f"--device {device}: expected cpu or cuda[:N]")
    if device.startswith("cuda"):
        if NVIDIA_DEVICE.exists():
            import torch

            if torch.cuda.is_available():
                return
        raise UsageError(f"--device {device}: CUDA is not available on this machine")


def _judge_entries(entries: list[Entry], args: argparse.Namespace, baseline: Baseline) -> Iterator[Verdict]:
    """Each entry's verdict in order: here, or spread over ``--workers`` processes (each its own baseline)."""
    from kvtable.zoo.run import judge_entry, judge_seeds

    options = {"examples": args.examples, "full": args.full, "shrink": not args.no_shrink, "device": args.device}
    judge: Callable[..., Verdict] = partial(judge_seeds, seeds=args.seeds)
    if args.seeds is None:
        judge, options = judge_entry, {**options, "seed": args.seed}
    if args.workers == 1:
        yield from (judge(entry, baseline=baseline, **options) for entry in entries)
        return
    from kvtable.conformance.isolation import process_pool

    with process_pool(args.workers) as pool:
        futures = [pool.submit(judge, entry, **options) for entry in entries]
        yield from (future.result() for future in futures)


def run(args: argparse.Namespace) -> int:
    known = sorted(name for name, in declared("kvtable.zoo", "Entry"))  # read from the source: no import yet
    unknown = sorted(set(args.names) - set(known))
    if unknown:
        raise UsageError(f"unknown entries {unknown}; known: {known}")
    check_device(args.device)
    with interrupts.deferred():  # Ctrl-C while the zoo loads waits for its first safe point
        from kvtable.zoo.entries import BY_NAME, ENTRIES, OUTSIDE
        from kvtable.zoo.hunt import Baseline
        from kvtable.zoo.mutants import MUTANTS
        from kvtable.zoo.run import entry_table, judge_mutant, mutant_table

    entries = [BY_NAME[n] for n in args.names] if args.names else list(ENTRIES)
    baseline = Baseline(args.device)
    progress = wants_progress(args.no_progress)
    verdicts = []
    try:
        interrupts.check()  # Ctrl-C while starting up: no entry starts
        for entry, verdict in zip(entries, _judge_entries(entries, args, baseline), strict=True):
            interrupts.check()  # an entry Ctrl-C cut short is no verdict
            verdicts.append(verdict)
            if progress:
                print(f"  {entry.name}: {'caught' if verdict.caught else 'NOT CAUGHT'}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        entries = entries[:len(verdicts)]
    interrupts.hold()  # the table of the entries judged is printed whole
    print(entry_table(entries, verdicts))
    if not args.quiet:
        for entry, v in zip(entries, verdicts, strict=True):
            print(f"\n=== {entry.name} ({entry.issue}): {entry.bug}\n    mutant: {entry.mutant}")
            if v.z3 is not None:
                print(f"--- {v.z3.text()}")
            if v.catch is not None and v.catch.caught_by is not None:
                print(f"--- {v.catch.message}\n--- counterexample (replayable):\n{v.catch.counterexample}")
    ok = all(v.caught for v in verdicts)
    summary = [f"{sum(v.caught for v in verdicts)}/{len(verdicts)} entries caught by the clause they name"
               + (f" at every seed of 0..{args.seeds - 1}" if args.seeds else "")]
    if args.mutants and not interrupts.pending():
        with interrupts.raising():
            mutant_verdicts = [judge_mutant(m, seed=args.seed, examples=args.examples, full=args.full,
                                            baseline=baseline, device=args.device) for m in MUTANTS]
        print("\n" + mutant_table(MUTANTS, mutant_verdicts))
        for mutant in MUTANTS:
            if mutant.equivalent or mutant.gap:
                print(f"  {mutant.name}: {'equivalent: ' + mutant.equivalent if mutant.equivalent else mutant.gap}")
        hunted = [v for m, v in zip(MUTANTS, mutant_verdicts, strict=True) if not m.equivalent]
        summary.append(f"{sum(v.caught for v in hunted)}/{len(hunted)} source mutants killed by the clause "
                       "they name")
        ok = ok and all(v.caught for v in hunted)
    if not args.names:
        print("\nOutside the contract: " + "; ".join(f"#{o.item} {o.issue}" for o in OUTSIDE))
    if interrupts.pending():
        summary.insert(0, f"INTERRUPTED after {len(verdicts)} entries")
    print(f"\nkvtable zoo: {'; '.join(summary)}: {'PASS' if ok else 'FAIL'}")
    return EXIT_PASSED if ok else EXIT_FAILED
