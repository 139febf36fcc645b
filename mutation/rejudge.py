"""Re-judge a cosmic-ray session's survivors at another budget (``kvtable fuzz``'s default 2000, say): each
survivor's mutation applied to the files in turn, the suite run in a fresh process, the file restored.

    python mutation/rejudge.py SESSION.sqlite --examples 2000 [--jobs JOB ...] [--out results.jsonl]
    python mutation/rejudge.py --patches sites.json --examples 2000    # survivors of an older commit, by text

A session's mutants are numbered over the files it was made from; once impl/ has moved on, a survivor is
re-judged by its text instead: ``sites.json`` lists ``{"site", "module", "old", "new"}`` objects (the mutated
line as cosmic-ray showed it, and the same change written against today's file).

A first pass at a small budget (``cosmic-ray exec`` with ``suite.py --serve ... --examples 200``) already
settles every mutant it kills (a kill is a kill); only its survivors need the default budget. Run it in the
scratch clone the session was made in (it edits impl/ in place and restores it, also on Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SUITE_TIMEOUT_S = 900


def survivors(session: str) -> list[tuple[str, str, str, int, int]]:
    """(job id, module path, operator, occurrence, line) of every surviving mutant, in site order."""
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import TestOutcome

    with use_db(session, WorkDB.Mode.open) as db:
        found = [(item.job_id, str(m.module_path), m.operator_name, m.occurrence, m.start_pos[0])
                 for item, result in db.completed_work_items if result.test_outcome == TestOutcome.SURVIVED
                 for m in item.mutations[:1]]
    return sorted(found, key=lambda s: s[1:])


def judge(module: str, operator: str, occurrence: int, examples: int, seed: int) -> tuple[bool, str, float]:
    """(killed, the suite's verdict line, seconds) for one mutation, the module restored afterwards."""
    def apply() -> None:
        subprocess.run(["cosmic-ray", "apply", module, operator, str(occurrence)], check=True, capture_output=True)

    return _judge_applied(module, apply, examples, seed)


def judge_text(module: str, old: str, new: str, examples: int, seed: int) -> tuple[bool, str, float]:
    """``judge`` for a mutation written as text: ``old`` (found exactly once in the module) becomes ``new``."""
    path = Path(module)

    def apply() -> None:
        source = path.read_text()
        if source.count(old) != 1:
            raise ValueError(f"{module}: {old!r} occurs {source.count(old)} times, not once")
        path.write_text(source.replace(old, new))

    return _judge_applied(module, apply, examples, seed)


def _judge_applied(module: str, apply: Callable[[], None], examples: int, seed: int) -> tuple[bool, str, float]:
    path = Path(module)
    original = path.read_bytes()
    start = time.monotonic()
    try:
        apply()
        run = subprocess.run([sys.executable, "mutation/suite.py", "--examples", str(examples), "--seed", str(seed)],
                             capture_output=True, text=True, timeout=SUITE_TIMEOUT_S)
        lines = (run.stdout + run.stderr).strip().splitlines()
        return run.returncode != 0, (lines[-1] if lines else f"exit {run.returncode}"), time.monotonic() - start
    except subprocess.TimeoutExpired:
        return True, f"timeout after {SUITE_TIMEOUT_S} s", time.monotonic() - start
    finally:
        path.write_bytes(original)


def _record(out: str | None, verdict: dict) -> None:
    if out:
        with open(out, "a") as stream:
            stream.write(json.dumps(verdict) + "\n")


def _rejudge_patches(patches: str, examples: int, seed: int, out: str | None) -> None:
    for site in json.loads(Path(patches).read_text()):
        killed, verdict, seconds = judge_text(site["module"], site["old"], site["new"], examples, seed)
        print(f"{'KILLED  ' if killed else 'SURVIVED'} {site['site']} ({seconds:.0f} s): {verdict[:160]}", flush=True)
        _record(out, {**site, "killed": killed, "verdict": verdict, "seconds": round(seconds, 1),
                      "examples": examples})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("session", nargs="?")
    parser.add_argument("--patches", help="a JSON list of {site, module, old, new}: re-judge these by text")
    parser.add_argument("--examples", type=int, default=2000, help="the suite's budget (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", nargs="*", help="only these job ids (default: every survivor)")
    parser.add_argument("--out", help="append one JSON line per mutant here")
    args = parser.parse_args(argv)
    if args.patches:
        _rejudge_patches(args.patches, args.examples, args.seed, args.out)
        return 0
    if not args.session:
        parser.error("a session (or --patches) is required")
    for job, module, operator, occurrence, line in survivors(args.session):
        if args.jobs and job not in args.jobs:
            continue
        killed, verdict, seconds = judge(module, operator, occurrence, args.examples, args.seed)
        print(f"{'KILLED  ' if killed else 'SURVIVED'} {module}:{line} {operator} #{occurrence} ({seconds:.0f} s): "
              f"{verdict[:160]}", flush=True)
        _record(args.out, {"job": job, "module": module, "line": line, "operator": operator,
                           "occurrence": occurrence, "killed": killed, "verdict": verdict,
                           "seconds": round(seconds, 1), "examples": args.examples})
    return 0


if __name__ == "__main__":
    sys.exit(main())
