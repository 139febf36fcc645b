"""A seeded random sample of a cosmic-ray session's mutants: the rest are marked skipped ("not sampled").

    python mutation/sample.py SESSION.sqlite --size 160 --seed 0

Run after ``cosmic-ray init`` and before ``cosmic-ray exec``. The mutants are ordered by where they apply
(module, operator, occurrence), not by job id (a fresh random id each ``init``), and the sample is
``random.Random(seed).sample`` of that order: the same sources, size and seed give the same mutants.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def sampled(keys: Iterable[K], size: int, seed: int) -> set[K]:
    """``size`` of ``keys`` (all of them if fewer), drawn with ``random.Random(seed)`` from their sorted order."""
    ordered = sorted(keys)
    return set(random.Random(seed).sample(ordered, min(size, len(ordered))))


def site(mutations: Sequence) -> tuple:
    """Where a work item's mutations apply: module path, operator and occurrence, in order."""
    return tuple((str(m.module_path), m.operator_name, m.occurrence) for m in mutations)


def main(argv: list[str] | None = None) -> None:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session")
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with use_db(args.session, WorkDB.Mode.open) as db:
        pending = {site(item.mutations): item.job_id for item in db.pending_work_items}
        keep = sampled(pending, args.size, args.seed)
        skipped = [job for key, job in pending.items() if key not in keep]
        db.set_multiple_results(skipped, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output="not sampled"))
    print(f"{len(keep)} of {len(pending)} mutants sampled (seed {args.seed}); {len(skipped)} skipped")


if __name__ == "__main__":
    main()
